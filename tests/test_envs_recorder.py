"""The episode recorder's rules (transcript/recorder.py): messages, tool turns, return and success."""
from __future__ import annotations

import envs
from transcript.toolcalls import format_tool_call


def _recorded(actions: list[str], *, max_steps: int = 6) -> envs.EpisodeRecorder:
    env = envs.make("bash_exec_env", split="test", max_steps=max_steps)
    try:
        obs, info = env.reset(seed=0, options={"task_id": "bash_exec_env:test:00000"})
        rec = envs.EpisodeRecorder(obs, info)
        for action in actions:
            rec.add_step(action, *env.step(action))
            if rec.done:
                break
        return rec
    finally:
        env.close()


def test_one_tool_turn_per_call_and_none_after_the_final_step():
    two = "<think>two at once</think>Listing." + format_tool_call("run", {"command": "echo a"}) + \
          format_tool_call("run", {"command": "echo b"})
    rec = _recorded([two, format_tool_call("submit", {})])
    system, user, first, tool_a, tool_b, final = rec.messages
    assert first == {"role": "assistant", "content": "Listing.", "reasoning": "two at once", "tool_calls": [
        {"id": "call_0_0", "name": "run", "arguments": {"command": "echo a"}},
        {"id": "call_0_1", "name": "run", "arguments": {"command": "echo b"}}]}
    assert (tool_a["tool_call_id"], tool_a["content"]) == ("call_0_0", "a")
    assert (tool_b["tool_call_id"], tool_b["content"]) == ("call_0_1", "b")
    assert final["tool_calls"][0]["name"] == "submit" and rec.steps[-1]["result"].startswith("submitted")
    assert rec.steps[0]["action"] == two and rec.steps[0]["thought"] == "two at once"
    assert rec.done and rec.success is False and rec.reward == 0.0  # echo a/b does not solve the task


def test_a_malformed_block_stays_in_content_and_gets_one_tool_turn_with_the_error():
    bad = 'Trying.<tool_call>{"name": "run", "arguments": {"command": </tool_call>'
    rec = _recorded([bad])
    assistant, tool = rec.messages[2:]
    assert assistant == {"role": "assistant", "content": bad}
    assert tool["role"] == "tool" and tool["content"].startswith("error: tool call 1: invalid JSON")
    assert "tool_call_id" not in tool and not rec.done


def test_return_is_the_sum_and_a_cut_episode_is_no_success():
    task = envs.find_task("bash_exec_env", "bash_exec_env:test:00000")
    solve = format_tool_call("run", task.solution[0]["arguments"])
    rec = _recorded([solve, format_tool_call("submit", {})])
    assert rec.success and rec.reward == sum(s["reward"] for s in rec.steps) == 1.0
    cut = _recorded([solve])
    cut.stop()
    assert cut.done and not cut.success and cut.record(model="m", policy_version="v", source="t")["success"] is False
    truncated = _recorded([solve] * 2, max_steps=2)  # the env's own step limit ends and scores it
    assert truncated.done and truncated.final["submitted"] is False and truncated.success
