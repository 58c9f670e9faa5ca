"""Task families (issue 24 item 2): every family's expert solves it, random play does not, the recovering expert
gets there after a failed first try, held-out families stay out of train (suites, hermes_eval's --split, the sft
view), and tool calls with quotes inside their arguments round-trip."""
from __future__ import annotations

import json

import pytest

import envs
from envs.core.pools import tokens
from envs.core.tasks import FAMILY_SPLIT

ENVS = ["python_debug_env", "bash_exec_env", "git_repo_env"]


def _families() -> list[tuple[str, str, str, int]]:
    """(env, family, split, index of its first task in that split) for every family of every env."""
    out = []
    for name in ENVS:
        suite = envs.builtin_suite(name)
        for split in ("train", FAMILY_SPLIT):
            out += [(name, fam, split, i) for i, fam in enumerate(suite.templates_of(split))]
    return out


FAMILIES = _families()


@pytest.fixture(scope="module")
def made():
    """One environment per (env, split, step limit), reused across the parametrized cases (a sandbox per episode)."""
    cache: dict = {}
    yield lambda name, split, steps=8: cache.setdefault((name, split, steps), envs.make(name, split=split,
                                                                                         max_steps=steps))
    for env in cache.values():
        env.close()


@pytest.mark.parametrize("name, family, split, index", FAMILIES, ids=[f"{n}-{f}" for n, f, _, _ in FAMILIES])
def test_expert_solves_every_family(made, name, family, split, index):
    env = made(name, split)
    task = env.unwrapped.suite.task(split, index)
    assert task.template == family
    expert = envs.play(env, envs.get_policy(name, "expert", seed=0), options={"index": index})
    assert expert.reward == 1.0 and expert.final["success"], expert.final["checks"]


@pytest.mark.parametrize("name", ENVS)
def test_random_play_solves_no_family(made, name):
    """Every fourth family per env and split (random episodes are the slow ones: they run to the step limit)."""
    env = made(name, "train", 3)
    policy = envs.get_policy(name, "random", seed=0)
    for split in ("train", FAMILY_SPLIT):
        for i in range(0, len(env.unwrapped.suite.templates_of(split)), 4):
            rec = envs.play(env, policy, options={"index": i, "split": split})
            assert not rec.final["success"], (split, i, [s["action"] for s in rec.steps])


@pytest.mark.parametrize("name", ENVS)
def test_recovering_expert_reads_the_error_and_still_succeeds(made, name):
    env = made(name, "train")
    policy = envs.get_policy(name, "recover", seed=0)
    n = len(env.unwrapped.suite.templates_of("train"))
    recovered = 0
    for i in range(0, n, 2):
        rec = envs.play(env, policy, options={"index": i})
        assert rec.reward == 1.0, (i, rec.final["checks"])
        if policy.notes()["mistake"] != "none":
            recovered += 1
            seen = [s["result"] for s in rec.steps]  # the failed try's observation comes before the fix
            assert any(any(e in o for e in ("command not found", "syntax error", "occurs 0 times")) for o in seen), seen
    assert recovered >= 2


def test_multi_step_families_fail_first_then_read_the_output():
    env = envs.make("bash_exec_env", split="train")
    try:
        idx = envs.builtin_suite("bash_exec_env").templates_of("train").index("locate_count")
        rec = envs.play(env, envs.get_policy("bash_exec_env", "expert"), options={"index": idx})
        obs = [s["result"] for s in rec.steps]
        assert "No such file or directory" in obs[0]
        final_cmd = envs.parse_tool_calls(rec.steps[2]["action"]).calls[0].arguments["command"]
        where = final_cmd.split("< ", 1)[1]
        assert where in obs[1] and where not in rec.steps[0]["observation"]  # the path came from find's output
        assert rec.reward == 1.0
    finally:
        env.close()


@pytest.mark.parametrize("name", ENVS)
def test_held_out_families_are_only_in_test_families(name):
    suite = envs.builtin_suite(name)
    held = set(suite.held_out)
    assert len(held) >= 4 and held < set(suite.template_names)
    n_train = len(suite.templates_of("train"))
    assert n_train >= 20
    for split in ("train", "test"):
        seen = {suite.task(split, i).template for i in range(min(suite.count(split), 3 * n_train))}
        assert seen == set(suite.templates_of(split)) and not seen & held
    fam = suite.all(FAMILY_SPLIT)
    assert len(fam) == suite.count(FAMILY_SPLIT) >= 100 and {t.template for t in fam} == held
    assert all(t.task_id.startswith(f"{name}:{FAMILY_SPLIT}:") and suite.find(t.task_id) == t for t in fam[:5])
    # their names come from the test pool: no slot token of a held-out family task occurs in train text
    train_tokens = {tok.lower() for i in range(600) for tok in tokens(json.dumps(suite.task("train", i).as_record()))}
    shared = set(envs.families.bash_exec.EXTENSIONS) | set(envs.families.git_repo.EXTENSIONS)
    clashes = [(t.task_id, v) for t in fam for v in t.slots.values() for tok in tokens(v)
               if tok.lower() in train_tokens and tok not in shared and not tok.isdigit()]
    assert clashes == []


def test_family_split_through_make_eval_settings_and_template_filter():
    from trainers.eval.config import EvalSettings
    from trainers.eval.evaluate import load_eval_tasks

    assert EvalSettings(task="shell", split=FAMILY_SPLIT).split == FAMILY_SPLIT
    tasks = load_eval_tasks("git_repo_env", FAMILY_SPLIT, None)
    assert {t.template for t in tasks} == set(envs.families.git_repo.HELD_OUT)
    env = envs.make("bash", split=FAMILY_SPLIT, templates=["tar_list"])
    try:
        obs, info = env.reset(seed=3)
        assert info["split"] == FAMILY_SPLIT and info["template"] == "tar_list"
    finally:
        env.close()
    assert envs.builtin_suite("bash_exec_env").only_templates(["tar_list"]).count("train") == 0


def test_sft_view_never_trains_on_a_held_out_family(tmp_path):
    from tests.views_helpers import new_lake, trajectory

    lk = new_lake(tmp_path / "lake")
    held = [trajectory(i, f"bash_exec_env:test_families:{i:05d}", 1.0, True, split=FAMILY_SPLIT) for i in range(40)]
    lk.append("trajectories", held + [trajectory(100 + i, f"t-{i}", 1.0, True, split="train") for i in range(5)])
    snap = lk.snapshot()
    try:
        for source in ("auto", "hash"):
            snap.con.execute(f"SET VARIABLE sft_split_source = '{source}'")
            got = snap.arrow("SELECT task_id, split FROM sft").to_pylist()
            assert {r["split"] for r in got if "test_families" in r["task_id"]} == {"test"}, source
            assert len(got) == 45
    finally:
        snap.close()


@pytest.mark.parametrize("args", [
    {"command": 'echo \'a said "b"\' > f.txt'},
    {"command": 'for f in d/*.txt; do mv "$f" "${f%.txt}.md"; done'},
    {"command": "printf '%s\\n' x \\\\ y", "note": "tab\there\nnewline ünï"},
    {"path": "m.py", "old": "return ' '.join(xs)", "new": "return ','.join(xs)"},
])
def test_tool_calls_with_quotes_round_trip(args):
    text = envs.format_tool_call("run", args)
    parsed = envs.parse_tool_calls(text)
    assert parsed.valid_tool_call and parsed.calls[0].arguments == args
    if any('"' in v for v in args.values()):
        assert '\\"' in text  # escaped inside the JSON string, not ending it


def test_every_expert_call_of_a_sample_round_trips():
    for name in ENVS:
        suite = envs.builtin_suite(name)
        for split in ("train", FAMILY_SPLIT):
            for i in range(len(suite.templates_of(split))):
                for call in suite.task(split, i).solution:
                    parsed = envs.parse_tool_calls(envs.format_tool_call(call["name"], call["arguments"]))
                    assert parsed.valid_tool_call and parsed.calls[0].arguments == call["arguments"]
