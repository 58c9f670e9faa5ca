"""Task suites: sizes, determinism, disjoint slot pools (whole tokens), diversity, task-file errors."""
from __future__ import annotations

import json

import pytest

import envs
from envs.core.pools import tokens
from envs.core.tasks import TaskFileError
from envs.families import bash_exec, git_repo

ENVS = ["python_debug_env", "bash_exec_env", "git_repo_env"]


def _train_text(task) -> str:
    # Everything a model could see of a train task: instruction, workspace files, reference calls, setup.
    return "\n".join([task.instruction, json.dumps(task.files), json.dumps(task.solution), "\n".join(task.setup)])


@pytest.mark.parametrize("name", ENVS)
def test_suite_sizes_and_determinism(name):
    suite = envs.builtin_suite(name)
    assert suite.count("train") >= 300 and suite.count("test") >= 100
    a, b = suite.task("test", 7), suite.task("test", 7)
    assert a == b and a.task_id == f"{name}:test:00007"
    assert suite.find(a.task_id) == a
    assert suite.task("test", 8) != a
    assert all("\n" not in suite.task("train", i).instruction for i in range(40))


@pytest.mark.parametrize("name", ENVS)
def test_test_slots_never_occur_in_train_text(name):
    suite = envs.builtin_suite(name)
    train_tokens: set[str] = set()
    for i in range(1200):
        train_tokens.update(t.lower() for t in tokens(_train_text(suite.task("train", i))))
    shared = set(bash_exec.EXTENSIONS) | set(git_repo.EXTENSIONS)  # a closed set on purpose (learnability.md)
    clashes = []
    for task in suite.all("test"):
        for slot, value in task.slots.items():
            clashes += [(task.task_id, slot, tok) for tok in tokens(value)
                        if tok.lower() in train_tokens and tok not in shared]
    assert clashes == []


@pytest.mark.parametrize("name", ENVS)
def test_train_slots_are_diverse_and_mixed(name):
    suite = envs.builtin_suite(name)
    values = {tok for i in range(1500) for v in suite.task("train", i).slots.values() for tok in tokens(v)}
    assert len(values) >= 2000
    with_digits = sum(1 for v in values if any(c.isdigit() for c in v))
    assert 0.1 * len(values) < with_digits < 0.6 * len(values)  # random strings and wordNN, not only words


def test_bash_expert_solution_copies_the_instruction_names():
    """The first ten templates are one short `run` call (the tiny model's learnability set); every family's commands
    copy their names from the instruction, or from an earlier command's output (the multi-step families)."""
    first_ten = list(bash_exec.TEMPLATES)[:10]
    for task in envs.load_tasks("bash_exec_env", "test") + envs.load_tasks("bash_exec_env", "test_families"):
        assert {c["name"] for c in task.solution} == {"run"}
        commands = " ".join(c["arguments"]["command"] for c in task.solution)
        if task.template in first_ten:
            assert len(task.solution) == 1 and len(commands) < 72
        copied = {k: v for k, v in task.slots.items() if k != "answer"}
        assert all(v in task.instruction for v in copied.values()), task
        assert all(v in commands for k, v in copied.items() if k not in ("col",)), task  # col: read from the header


def _write(tmp_path, lines):
    p = tmp_path / "tasks.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


GOOD = {"task_id": "t1", "instruction": "Create hello.txt", "files": {"a.txt": "x\n"},
        "solution": [{"name": "run", "arguments": {"command": "echo hi > hello.txt"}}],
        "checks": [{"type": "file", "path": "hello.txt", "content": "hi\n"}]}


def test_task_file_round_trip_and_env_use(tmp_path):
    tasks = envs.load_tasks("bash_exec_env", "test")[:3]
    path = _write(tmp_path, [json.dumps(t.as_record()) for t in tasks] + [json.dumps(GOOD)])
    loaded = envs.load_tasks_file(path)
    assert [t.task_id for t in loaded] == [t.task_id for t in tasks] + ["t1"]
    env = envs.make("bash_exec_env", tasks=str(path), split="test")
    try:
        obs, info = env.reset(options={"task_id": tasks[1].task_id})
        assert obs == tasks[1].instruction and info["split"] == "test"
    finally:
        env.close()


@pytest.mark.parametrize("bad, line, field", [
    ([json.dumps(GOOD), "{not json"], 2, ""),
    ([json.dumps({**GOOD, "instruction": ""})], 1, "instruction"),
    ([json.dumps(GOOD), json.dumps({**GOOD, "task_id": "t2", "files": {"../x": "y"}})], 2, "files"),
    ([json.dumps({**GOOD, "solution": [{"arguments": {}}]})], 1, "solution"),
    ([json.dumps(GOOD), json.dumps(GOOD)], 2, "task_id"),
])
def test_malformed_task_file_names_line_and_field(tmp_path, bad, line, field):
    with pytest.raises(TaskFileError) as err:
        envs.load_tasks_file(_write(tmp_path, bad))
    assert err.value.line == line and err.value.field == field
    assert f"tasks.jsonl:{line}" in str(err.value)


def test_env_specific_fields_are_checked_with_line(tmp_path):
    no_checks = {k: v for k, v in GOOD.items() if k != "checks"}
    path = _write(tmp_path, [json.dumps(GOOD), json.dumps({**no_checks, "task_id": "t2"})])
    with pytest.raises(TaskFileError, match=r"tasks.jsonl:2: field 'checks'"):
        envs.make("bash_exec_env", tasks=str(path))
    path = _write(tmp_path, [json.dumps({**no_checks, "tests": "def test_x(:\n"})])
    with pytest.raises(TaskFileError, match=r"tasks.jsonl:1: field 'tests': not valid Python"):
        envs.make("python_debug_env", tasks=str(path))
    path = _write(tmp_path, [json.dumps({**GOOD, "env": "git_repo_env"})])
    with pytest.raises(TaskFileError, match=r"field 'env'"):
        envs.make("bash_exec_env", tasks=str(path))


def test_template_subset_keeps_ids_and_counts():
    suite = envs.builtin_suite("bash_exec_env").only_templates(["count", "tail"])
    tasks = suite.all("test")
    n = len(envs.builtin_suite("bash_exec_env").templates_of("test"))
    assert len(tasks) == suite.count("test") == sum(1 for i in range(100) if i % n in (1, 3))  # count=1, tail=3
    assert {t.template for t in tasks} == {"count", "tail"}
    assert tasks[0] == envs.builtin_suite("bash_exec_env").find(tasks[0].task_id)
    assert [t.task_id for t in envs.load_tasks("bash_exec_env", "test", templates=["tail"])][:2] == [
        "bash_exec_env:test:00003", f"bash_exec_env:test:{3 + n:05d}"]
    env = envs.make("bash_exec_env", split="test", templates=["count"])
    try:
        assert env.reset(seed=1)[1]["template"] == "count"
    finally:
        env.close()
    with pytest.raises(ValueError, match="templates: create, count"):
        envs.make("bash_exec_env", templates=["nope"])
