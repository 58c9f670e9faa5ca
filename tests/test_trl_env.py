"""trainers/rl/trl_env.py: our registered environments as TRL GRPOTrainer environments, TRL unchanged.

The adapter's tools are the environment's (same names, parameters, descriptions, as TRL renders them); the
reference solution played through those tool methods scores what the environment scores; and TRL's own
GRPOTrainer runs two steps on the tiny model with it, logging rewards that are the environment's graders'.
"""
from __future__ import annotations

import json

import pytest

import envs
from train_helpers import set_threads, tiny_dir  # noqa: F401  (session fixture)
from trainers.runtime.errors import TrainerInputError
from trainers.rl.trl_env import EPISODE_OVER, environment_factory, grpo_dataset, hermes_tool_parser

# Two bash tasks whose grade does not depend on what an untrained model writes: one is already done in its
# starting workspace (reward 1.0 on submit), one needs a command nobody ran (0.0).
TASKS = [
    {"task_id": "already-done", "instruction": "Make sure notes.txt exists.", "files": {"notes.txt": "hi\n"},
     "solution": [], "checks": [{"type": "exists", "path": "notes.txt"}]},
    {"task_id": "to-do", "instruction": "Create out.txt.", "files": {},
     "solution": [{"name": "run", "arguments": {"command": "touch out.txt"}}],
     "checks": [{"type": "exists", "path": "out.txt"}]},
]


@pytest.fixture
def task_file(tmp_path):
    p = tmp_path / "tasks.jsonl"
    p.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    return str(p)


@pytest.mark.parametrize("name", ["python_debug_env", "bash_exec_env", "git_repo_env"])
def test_tools_are_the_environments_tools(name):
    from transformers.utils import get_json_schema

    Env = environment_factory(name)
    env = Env()
    declared = {t["function"]["name"]: t["function"] for t in env._env.unwrapped.tools}
    public = sorted(m for m in dir(Env) if not m.startswith("_"))
    assert public == sorted([*declared, "reset", "get_reward"])  # TRL exposes every public method as a tool
    for tool, spec in declared.items():
        got = get_json_schema(getattr(env, tool))["function"]
        assert got["name"] == tool and got["description"] == spec["description"]
        want = spec["parameters"]["properties"]
        assert {k: v["type"] for k, v in got["parameters"]["properties"].items()} == {k: v["type"] for k, v in want.items()}
        assert set(got["parameters"].get("required", [])) == set(spec["parameters"].get("required", []))
        for k, v in want.items():
            assert got["parameters"]["properties"][k]["description"] == (v.get("description") or k)


@pytest.mark.parametrize("name", ["python_debug_env", "bash_exec_env", "git_repo_env"])
def test_expert_solution_through_the_tool_methods_scores_like_the_environment(name):
    episodes = []
    env = environment_factory(name, on_episode=episodes.append)()
    task_id = f"{name}:train:00003"
    instruction = env.reset(task_id=task_id)
    task = envs.find_task(name, task_id)
    assert instruction == task.instruction
    for call in task.solution:
        assert isinstance(getattr(env, call["name"])(**call["arguments"]), str)
    assert env.get_reward() == 1.0  # the model stopped calling tools: the adapter submits, the grader scores
    assert episodes == [{"env": name, "task_id": task_id, "reward": 1.0, "success": True,
                         "tool_calls": len(task.solution), "submitted": True}]
    assert env.get_reward() == 1.0 and len(episodes) == 1  # scored once
    first = task.solution[0]
    assert getattr(env, first["name"])(**first["arguments"]) == EPISODE_OVER  # no step after the end


def test_submit_tool_ends_the_episode_and_a_new_reset_starts_clean(task_file):
    env = environment_factory("shell", tasks=task_file)()  # an alias works like the name
    assert env.reset(task_id="to-do") == "Create out.txt."
    env.run(command="touch out.txt")
    assert "reward 1.00" in env.submit()
    assert env.get_reward() == 1.0
    env.reset(task_id="to-do")  # the pooled instance is reused by TRL: nothing carries over
    assert env.get_reward() == 0.0


def test_dataset_rows_and_errors(task_file):
    ds = grpo_dataset("bash_exec_env", tasks=task_file, environment=True)
    assert ds["task_id"] == ["already-done", "to-do"] and set(ds["environment"]) == {"bash_exec_env"}
    assert ds[0]["prompt"][0]["role"] == "system" and ds[0]["prompt"][-1] == {"role": "user", "content": ""}
    assert len(grpo_dataset("git", rows=3, split="test")) == 3
    with pytest.raises(envs.UnknownEnvironmentError):
        environment_factory("no_such_env")
    with pytest.raises(TrainerInputError, match="no test tasks"):
        grpo_dataset("bash_exec_env", tasks=task_file, split="test")


def test_grpo_trainer_runs_two_steps_with_environment_rewards(tiny_dir, task_file, tmp_path):
    set_threads()
    from trl import GRPOConfig, GRPOTrainer

    from trainers.runtime.device import cpu_defaults
    from trainers.modeling.models import load_tokenizer

    episodes = []
    Env = environment_factory("bash_exec_env", tasks=task_file, on_episode=episodes.append)
    tok = hermes_tool_parser(load_tokenizer(str(tiny_dir), None))
    args = GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=4, num_generations=2,
                      max_completion_length=16, max_tool_calling_iterations=2, logging_steps=1, save_strategy="no",
                      seed=0, disable_tqdm=True, **cpu_defaults())
    trainer = GRPOTrainer(model=str(tiny_dir), args=args, train_dataset=grpo_dataset("bash_exec_env", tasks=task_file),
                          processing_class=tok, environment_factory=Env)
    trainer.train()
    logged = [h for h in trainer.state.log_history if "rewards/BashExecEnv/mean" in h]
    assert [h["step"] for h in logged] == [1, 2]
    assert len(episodes) == 8  # 2 steps x 2 prompts x 2 generations, each graded by the environment
    want = {"already-done": 1.0, "to-do": 0.0}
    assert all(e["reward"] == want[e["task_id"]] and e["submitted"] for e in episodes)
    for i, h in enumerate(logged):
        rewards = [e["reward"] for e in episodes[4 * i: 4 * i + 4]]
        assert h["rewards/BashExecEnv/mean"] == pytest.approx(sum(rewards) / 4)
        assert h["reward"] == pytest.approx(sum(rewards) / 4)
    assert {h["rewards/BashExecEnv/mean"] for h in logged} == {0.5}  # both tasks in each step: 1.0 and 0.0 graded


def test_tool_parser_needs_a_hermes_template(tiny_dir):
    from trainers.modeling.models import load_tokenizer

    tok = load_tokenizer(str(tiny_dir), None)
    assert hermes_tool_parser(tok).response_template["fields"]["tool_calls"]["open"] == "<tool_call>"
    tok.response_template, tok.chat_template = None, "{{ messages[0].content }}"
    with pytest.raises(TrainerInputError, match="Hermes"):
        hermes_tool_parser(tok)
