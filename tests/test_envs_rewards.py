"""Fine-grained rewards (issue 13 item 3, envs/core/rewards.py): per-step terms beside the final reward, weighted as
configured, in the recorded steps and the lake; the default weights leave every episode as it was."""
from __future__ import annotations

import pytest

import envs
from envs import RewardWeights
from envs.core.tasks import Task

SHAPED = RewardWeights(well_formed_call_bonus=0.05, malformed_call_penalty=0.1, command_error_penalty=0.05,
                       partial_credit=0.5, reward_scale=1.0)
call = envs.format_tool_call
SUBMIT = call("submit", {})


def _episode(env_name: str, actions: list[str], weights: RewardWeights | None, index: int = 0, task: Task | None = None,
             max_steps: int = 8) -> tuple[envs.EpisodeRecorder, list[dict]]:
    """Play fixed actions; the recorder and every step's info."""
    env = envs.make(env_name, split="test", max_steps=max_steps, reward_weights=weights)
    try:
        obs, info = env.reset(seed=0, options={"task": task} if task else {"index": index})
        rec, infos = envs.EpisodeRecorder(obs, info), []
        for action in actions:
            obs, reward, term, trunc, step_info = env.step(action)
            rec.add_step(action, obs, reward, term, trunc, step_info)
            infos.append(step_info)
            if rec.done:
                break
        return rec, infos
    finally:
        env.close()


def _solution(env_name: str, index: int) -> list[str]:
    task = envs.find_task(env_name, f"{env_name}:test:{index:05d}")
    return [call(c["name"], c["arguments"]) for c in task.solution]


def _old_final_reward(env_name: str, checks: dict) -> float:
    """The final reward before the terms existed: python_debug the share of hidden tests, else all or nothing."""
    if env_name == "python_debug_env":
        return checks["passed"] / checks["total"] if checks["total"] else 0.0
    return 1.0 if checks["passed"] == checks["total"] and len(checks["details"]) == checks["total"] else 0.0


@pytest.mark.parametrize("env_name", ["python_debug_env", "bash_exec_env", "git_repo_env"])
def test_default_weights_leave_episodes_as_before(env_name):
    """No weights, and RewardWeights.off(): every non-final step earns exactly 0.0, the final step the old reward."""
    for kind, index in (("noisy", 1), ("random", 2), ("expert", 3)):
        rewards = []
        for weights in (None, RewardWeights.off()):
            env = envs.make(env_name, split="test", max_steps=4, reward_weights=weights)
            try:
                rec = envs.play(env, envs.get_policy(env_name, kind, seed=index), seed=index, options={"index": index})
            finally:
                env.close()
            assert all(s["reward"] == 0.0 for s in rec.steps[:-1])
            final = rec.final
            assert rec.steps[-1]["reward"] == final["reward"] == _old_final_reward(env_name, final["checks"])
            assert rec.success == (final["reward"] == 1.0) and rec.reward == final["reward"]
            assert set(final["reward_terms"].values()) <= {0.0, final["reward"]}
            rewards.append(([s["reward"] for s in rec.steps], rec.success))
        assert rewards[0] == rewards[1]


def test_step_terms_follow_the_weights():
    task = envs.find_task("bash_exec_env", "bash_exec_env:test:00000")
    actions = [call("run", {"command": "ls"}),                                   # well-formed
               "<tool_call>{not json</tool_call>",                                # malformed
               call("run", {"command": "cat no_such_file"}),                     # well-formed, exit 1
               call("nope", {}) + call("run", {}),                               # unknown tool, bad arguments
               *_solution("bash_exec_env", 0), SUBMIT]
    rec, infos = _episode("bash_exec_env", actions, SHAPED)
    terms = [i["reward_terms"] for i in infos]
    assert terms[0] == {"well_formed_call": 0.05, "malformed_call": 0.0, "command_error": 0.0}
    assert terms[1] == {"well_formed_call": 0.0, "malformed_call": -0.1, "command_error": 0.0}
    assert terms[2] == {"well_formed_call": 0.05, "malformed_call": 0.0, "command_error": -0.05}
    assert terms[3] == {"well_formed_call": 0.0, "malformed_call": pytest.approx(-0.2), "command_error": 0.0}
    assert terms[-1] == {"well_formed_call": 0.05, "malformed_call": 0.0, "command_error": 0.0, "final": 1.0}
    assert task.checker and rec.success and len(rec.steps) == len(actions)
    step_rewards = [s["reward"] for s in rec.steps]
    assert step_rewards == pytest.approx([0.05, -0.1, 0.0, -0.2, 0.05, 1.05])
    assert rec.reward == pytest.approx(sum(step_rewards))

    # other weights, same actions: the terms move with them
    rec2, _ = _episode("bash_exec_env", actions, RewardWeights(well_formed_call_bonus=0.2, malformed_call_penalty=1.0))
    assert [s["reward"] for s in rec2.steps] == pytest.approx([0.2, -1.0, 0.2, -2.0, 0.2, 1.2])


def test_reward_scale_multiplies_the_final_success():
    plan = _solution("git_repo_env", 4) + [SUBMIT]
    plain, _ = _episode("git_repo_env", plan, None, index=4)
    scaled, infos = _episode("git_repo_env", plan, RewardWeights(reward_scale=2.5), index=4)
    assert plain.success and scaled.success
    assert plain.steps[-1]["reward"] == 1.0 and scaled.steps[-1]["reward"] == 2.5 == infos[-1]["reward"]
    before_final = [0.0] * (len(plan) - 1)
    assert [s["reward"] for s in scaled.steps[:-1]] == [s["reward"] for s in plain.steps[:-1]] == before_final
    # a failure is not scaled: only the key success action is
    failed, _ = _episode("git_repo_env", [SUBMIT], RewardWeights(reward_scale=2.5), index=4)
    assert not failed.success and failed.reward == 0.0


def test_partial_credit_is_the_weighted_share_of_checks():
    """bash: an immediate submit passes the checks that the untouched files are still there, not the task's own."""
    plain, infos = _episode("bash_exec_env", [SUBMIT], None, index=2)  # template 2 = move: several checks
    checks = infos[-1]["checks"]
    assert 0 < checks["passed"] < checks["total"] and plain.reward == 0.0 and not plain.success
    shaped, _ = _episode("bash_exec_env", [SUBMIT], SHAPED, index=2)
    assert shaped.steps[-1]["reward"] == pytest.approx(0.05 + 0.5 * checks["passed"] / checks["total"])
    assert not shaped.success


PARTIAL_TASK = Task(task_id="partial-1", instruction="Make f return x + 1 for 3 and 0.",
                    files={"m.py": "def f(x):\n    return x\n"},
                    checker={"tests": "from m import f\n\ndef test_a():\n    assert f(1) == 1\n\n"
                                      "def test_b():\n    assert f(2) == 2\n\ndef test_c():\n    assert f(3) == 4\n\n"
                                      "def test_d():\n    assert f(0) == 1\n"})


def test_python_debug_partial_credit_and_command_errors():
    # the environment's own reward stays the share of hidden tests passing
    plain, _ = _episode("python_debug_env", [SUBMIT], None, task=PARTIAL_TASK)
    assert plain.reward == 0.5 and not plain.success
    actions = [call("read_file", {"path": "missing.py"}),                                   # command error
               call("replace_in_file", {"path": "m.py", "old": "return y", "new": "x"}),   # snippet not found
               call("read_file", {"path": "m.py"}), SUBMIT]
    rec, infos = _episode("python_debug_env", actions, SHAPED, task=PARTIAL_TASK)
    assert [i["reward_terms"]["command_error"] for i in infos] == [-0.05, -0.05, 0.0, 0.0]
    assert [s["reward"] for s in rec.steps] == pytest.approx([0.0, 0.0, 0.05, 0.05 + 0.5 * 0.5])
    assert infos[-1]["reward_terms"]["final"] == 0.25 and not rec.success
    assert rec.steps[0]["result"].startswith("error:")  # the agent sees the same text as before


def test_step_rewards_land_in_the_lake(tmp_path):
    from lake import Lake

    actions = ["<tool_call>{oops</tool_call>", *_solution("bash_exec_env", 0), SUBMIT]
    rec, _ = _episode("bash_exec_env", actions, RewardWeights(malformed_call_penalty=0.1, well_formed_call_bonus=0.05,
                                                              reward_scale=2.5))
    record = rec.record(model="policy:test", policy_version="7", source="test")
    lake = Lake.init(tmp_path / "lake")
    lake.append("trajectories", [record], writer_id="test-rewards")
    (steps, reward, success), = Lake(tmp_path / "lake").snapshot().sql(
        "SELECT [s.reward FOR s IN steps], reward, success FROM trajectories").fetchall()
    assert steps == pytest.approx([-0.1, 0.05, 2.55]) and reward == pytest.approx(2.5) and success is True
