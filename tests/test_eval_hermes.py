"""hermes_eval: the multi-turn loop through a real environment, the lake records, the CLI."""
from __future__ import annotations

import json

import train_helpers as th
from train_helpers import tiny_dir  # noqa: F401  (session fixture)


def test_expert_replies_through_the_eval_loop_succeed_and_prompts_match_the_template(tiny_dir):
    import envs

    from trainers.evaluate import EvalSettings, Episode, play
    from trainers.models import load_tokenizer

    tok = load_tokenizer(str(tiny_dir))
    tasks = envs.load_tasks("bash_exec_env", "test")[:3]
    eps = [Episode(envs.make("bash_exec_env", split="test"), t, "bash_exec_env", i, tok) for i, t in enumerate(tasks)]
    plans = {e.task_id: [envs.format_tool_call(c["name"], c["arguments"]) for c in t.solution] +
             [envs.format_tool_call("submit", {})] for e, t in zip(eps, tasks)}
    eos = tok.convert_tokens_to_ids("<|im_end|>")

    def expert_generate(prompts, episodes):  # the expert's replies as "generated" tokens
        return [tok.encode(plans[e.task_id][e.turns], add_special_tokens=False) + [eos] for e in episodes]

    play(eps, expert_generate, tok, EvalSettings(batch_size=2))
    for e in eps:
        r = e.result()
        assert r["success"] and r["reward"] == 1.0 and r["turns"] == 2 and r["valid_tool_call_rate"] == 1.0
        # the prompt the model saw at turn 2 is token for token the chat template's rendering of the
        # conversation so far: training and evaluation see the same format
        rendered = tok.apply_chat_template(e.messages[:-1], tools=e.tools, tokenize=True, add_generation_prompt=True,
                                           return_dict=True)["input_ids"]
        assert list(e.ids) == list(rendered)
        assert [m["role"] for m in e.messages] == ["system", "user", "assistant", "tool", "assistant"]


def test_hermes_eval_cli_end_to_end_records_episodes_and_summary(tiny_dir, tmp_path):
    lake = tmp_path / "lake"
    r = th.run_cli("hermes_eval", "--task", "shell", "--split", "test", "--limit", "3", "--json", "--lake", str(lake),
                   "--max-new-tokens", "24")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["env"] == "bash_exec_env" and out["episodes"] == 3 and len(out["per_task"]) == 3
    assert out["success_rate"] == 0.0  # a random-init model never emits a tool call
    assert [p["task_id"] for p in out["per_task"]] == [f"bash_exec_env:test:{i:05d}" for i in range(3)]
    from lake import Lake

    snap = Lake(str(lake)).snapshot()
    traj = snap.arrow("SELECT split, model, env, task_id, group_id FROM trajectories ORDER BY task_id").to_pylist()
    assert len(traj) == 3 and {t["split"] for t in traj} == {"test"} and {t["model"] for t in traj} == {"tiny"}
    assert {t["group_id"] for t in traj} == {out["run_id"]}
    runs = snap.arrow("SELECT run_id, kind FROM runs").to_pylist()
    assert runs == [{"run_id": out["run_id"], "kind": "eval"}]


def test_unknown_task_is_a_one_line_error(tiny_dir):
    r = th.run_cli("hermes_eval", "--task", "no-such-env", "--no-lake")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "bash_exec_env" in r.stderr


def test_task_aliases():
    from trainers.evaluate import resolve_env_name

    assert resolve_env_name("debug-python") == "python_debug_env"
    assert resolve_env_name("shell") == "bash_exec_env"
    assert resolve_env_name("git") == "git_repo_env"
