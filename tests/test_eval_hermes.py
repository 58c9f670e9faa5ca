"""hermes_eval: the multi-turn loop through a real environment, the lake records, the CLI."""
from __future__ import annotations

import json

import train_helpers as th
from train_helpers import tiny_dir  # noqa: F401  (session fixture)


def test_expert_replies_through_the_eval_loop_succeed_and_prompts_match_the_template(tiny_dir):
    import envs

    from trainers.eval.config import EvalSettings
    from trainers.generation.episodes import Episode, play
    from trainers.generation.generate import Generation
    from trainers.modeling.models import load_tokenizer

    tok = load_tokenizer(str(tiny_dir))
    tasks = envs.load_tasks("bash_exec_env", "test")[:3]
    eps = [Episode(envs.make("bash_exec_env", split="test"), t.task_id, i, tok) for i, t in enumerate(tasks)]
    plans = {e.task_id: [envs.format_tool_call(c["name"], c["arguments"]) for c in t.solution] +
             [envs.format_tool_call("submit", {})] for e, t in zip(eps, tasks)}
    eos = tok.convert_tokens_to_ids("<|im_end|>")

    def expert_generate(prompts, episodes):  # the expert's replies as "generated" tokens
        return [Generation.scripted(tok.encode(plans[e.task_id][e.turns], add_special_tokens=False) + [eos])
                for e in episodes]

    play(eps, expert_generate, tok, 2, EvalSettings().max_context)
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
    from lake import Lake

    lake = tmp_path / "lake"
    Lake.init(lake)
    r = th.run_cli("hermes_eval", "--task", "shell", "--split", "test", "--limit", "3", "--json", "--lake", str(lake),
                   "--max-new-tokens", "24")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["env"] == "bash_exec_env" and out["episodes"] == 3 and len(out["per_task"]) == 3
    assert out["success_rate"] == 0.0  # a random-init model never emits a tool call
    assert [p["task_id"] for p in out["per_task"]] == [f"bash_exec_env:test:{i:05d}" for i in range(3)]
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


def test_a_missing_lake_is_a_one_line_error_and_is_not_created(tiny_dir, tmp_path):
    missing = tmp_path / "typo-lake"
    r = th.run_cli("hermes_eval", "--task", "shell", "--limit", "1", "--lake", str(missing))
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert f"no lake at {missing}" in r.stderr and "--no-lake" in r.stderr
    assert not missing.exists()


def test_the_per_task_table_shows_every_task(tiny_dir):
    # 55 tasks: more than the 50 rows the table used to stop at, silently
    r = th.run_cli("hermes_eval", "--task", "shell", "--limit", "55", "--max-new-tokens", "1", "--max-turns", "1",
                   "--no-lake", "--quiet", env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stderr.splitlines() if "bash_exec_env:test:" in line]  # the table is on stderr
    assert len(rows) == 55 and "bash_exec_env:test:00054" in rows[-1]


def test_task_aliases_are_the_registry_s():
    import envs

    from trainers.eval.config import resolve_env_name

    assert resolve_env_name("debug-python") == "python_debug_env"
    assert resolve_env_name("shell") == "bash_exec_env"
    assert resolve_env_name("git") == "git_repo_env"
    assert all(resolve_env_name(alias) == name for alias, name in envs.aliases().items())


def test_an_unclosed_final_tool_call_is_run_by_the_env_and_counted_valid_by_the_eval(tiny_dir):
    """The model stops at its end-of-turn token before </tool_call>: the env runs the call, so the eval
    counts it as a valid tool call (one parser, transcript.toolcalls)."""
    import envs

    from trainers.generation.generate import END_OF_TURN
    from trainers.eval.config import EvalSettings
    from trainers.generation.episodes import Episode, play
    from trainers.generation.generate import Generation
    from trainers.modeling.models import load_tokenizer

    tok = load_tokenizer(str(tiny_dir))
    eos = tok.convert_tokens_to_ids(END_OF_TURN)
    replies = ['<tool_call>\n{"name": "run", "arguments": {"command": "echo unclosed-ok"}}',
               envs.format_tool_call("submit", {})]
    episode = Episode(envs.make("bash_exec_env", split="test"), "bash_exec_env:test:00000", 0, tok)
    try:
        play([episode], lambda prompts, eps: [Generation.scripted(tok.encode(replies[e.turns], add_special_tokens=False)
                                                                    + [eos]) for e in eps], tok, EvalSettings().batch_size,
             EvalSettings().max_context)
    finally:
        episode.env.close()
    steps = episode.recorder.steps
    assert steps[0]["result"] == "unclosed-ok"  # the env ran it
    assert episode.result()["valid_tool_call_rate"] == 1.0 and episode.result()["turns"] == 2
    assert episode.messages[2]["tool_calls"][0]["arguments"] == {"command": "echo unclosed-ok"}
    assert not envs.parse_tool_calls('<tool_call>{"name": "run", "arguments": {"command": ').valid_tool_call


def test_first_call_validity_and_stop_reasons_are_counted_per_episode(tiny_dir):
    """A first reply whose command holds unescaped quotes is not a valid call (the JSON breaks), even when the
    next reply is; replies cut by the repetition stop or the token limit are counted, and a reply cut at the limit
    in a loop (what the stop exists to end) is counted apart: what the learning bench and the slow trained-model
    test report as valid first-turn calls and loops (issue 24)."""
    import envs

    from trainers.generation.generate import END_OF_TURN
    from trainers.eval.config import EvalSettings
    from trainers.generation.episodes import Episode, play
    from trainers.generation.generate import Generation
    from trainers.modeling.models import load_tokenizer

    tok = load_tokenizer(str(tiny_dir))
    eos = tok.convert_tokens_to_ids(END_OF_TURN)
    broken = '<tool_call>\n{"name": "run", "arguments": {"command": "echo "hi" > a.txt"}}\n</tool_call>'
    fine = envs.format_tool_call("run", {"command": 'echo "hi" > a.txt'})
    assert '\\"hi\\"' in fine and envs.parse_tool_calls(fine).valid_tool_call
    loop = "<tool_call>\n" + " ls -la" * 40  # what a stuck model emits until the token limit
    scripts = {0: [(broken, "repetition"), (fine, "length"), (loop, "length"), (envs.format_tool_call("submit", {}),
                                                                                 "stop")],
               1: [(fine, "stop"), (envs.format_tool_call("submit", {}), "stop")]}
    tasks = envs.load_tasks("bash_exec_env", "test")[:2]
    eps = [Episode(envs.make("bash_exec_env", split="test", max_steps=6), t.task_id, i, tok)
           for i, t in enumerate(tasks)]

    def generate(prompts, episodes):
        out = []
        for e in episodes:
            text, reason = scripts[e.seed][e.turns]
            g = Generation.scripted(tok.encode(text, add_special_tokens=False) + ([eos] if reason == "stop" else []))
            g.finish_reason = reason  # a reply cut short ends without the end-of-turn token
            out.append(g)
        return out

    try:
        play(eps, generate, tok, EvalSettings().batch_size, EvalSettings().max_context)
    finally:
        for e in eps:
            e.env.close()
    first, second = (e.result() for e in eps)
    assert (first["first_call_valid"], first["turns"], first["repetition_stops"], first["length_stops"],
            first["loops_at_limit"]) == (False, 4, 1, 2, 1)  # of the two replies cut at the limit, one loops
    assert abs(first["valid_tool_call_rate"] - 2 / 4) < 1e-9
    assert (second["first_call_valid"], second["repetition_stops"], second["length_stops"],
            second["loops_at_limit"]) == (True, 0, 0, 0)
    # the reply first_call_valid judged comes with the result, for reading why it failed
    assert (first["first_action"], second["first_action"]) == (broken, fine)


def test_bad_eval_options_are_one_line_errors():
    import pytest

    from trainers.runtime.errors import TrainerInputError
    from trainers.eval.config import EvalSettings

    assert EvalSettings(task="debug-python").task == "python_debug_env"
    for kw, msg in [({"batch_size": 0}, "--batch-size must be at least 1"), ({"split": "dev"}, "unknown --split"),
                    ({"max_turns": 0}, "--max-turns must be at least 1"), ({"task": "nope"}, "debug-python")]:
        with pytest.raises(TrainerInputError, match=msg):
            EvalSettings(**kw)
