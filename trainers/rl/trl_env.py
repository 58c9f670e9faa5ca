"""Our registered environments as TRL GRPOTrainer `environment_factory` environments, with no change to TRL.

Why: users who train with TRL should get our environments (sandbox, seeded suites, hidden-test graders) on
TRL's own terms. trl 1.16's contract (trl/trainer/grpo_trainer.py, docs/training-notes.md section 5): the
factory returns one instance per rollout (pooled, reused); `reset(**row)` gets the dataset row and may return
text appended to the last user message; every public method of the class is a tool, its JSON schema read from
type hints and a Google docstring; `get_reward()` scores the finished rollout and is logged as
`rewards/<ClassName>/mean`.

`environment_factory(name)` builds such a class for one registered environment: one method per tool of the
environment, with the environment's own names, parameters and descriptions (so TRL renders the schema the
environment declares), each a `step()` with that Hermes tool call. `reset` picks the row's task; `get_reward`
returns the episode's return, the sum of the rewards `step()` gave. TRL ends a rollout when the model stops
calling tools, which for our environments is a submit: if the environment has not ended the episode by
then, `get_reward` steps a plain reply (the environment's submit) so the grader scores it.

    from trl import GRPOTrainer
    from trainers.rl.trl_env import environment_factory, grpo_dataset, hermes_tool_parser
    Env = environment_factory("bash_exec_env")
    GRPOTrainer(model=path, train_dataset=grpo_dataset("bash_exec_env", rows=64), environment_factory=Env,
                processing_class=hermes_tool_parser(tok), args=GRPOConfig(...)).train()

Differences from our own loop to know: TRL counts one `step()` per tool call (our loop: per assistant
message, which may hold several calls), and one rollout is capped by `max_completion_length` tokens.
"""
from __future__ import annotations

import inspect
import re
from typing import Any, Callable, ClassVar

import envs
from envs.core.base import ToolEnv
from trainers.runtime.errors import TrainerInputError
from transcript.toolcalls import format_tool_call

EpisodeHook = Callable[[dict], None]

# JSON schema type -> the Python hint transformers' get_json_schema maps back to the same type
_PY_TYPES = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list, "object": dict}
RESERVED = ("reset", "get_reward")  # TRL calls these itself: a tool of that name could not be exposed
EPISODE_OVER = "error: the episode is over; reply without a tool call"


class EnvironmentAdapter:
    """The base of the classes `environment_factory` makes; TRL sees only `reset`, `get_reward` and the tools.

    Every other member is private (a leading underscore), because TRL exposes every public method as a tool."""

    _env_name: ClassVar[str] = ""
    _env_kwargs: ClassVar[dict] = {}
    _on_episode: ClassVar[EpisodeHook | None] = None

    def __init__(self):
        self._env = envs.make(self._env_name, **self._env_kwargs)
        self._task_id = ""
        self._return = 0.0
        self._tool_calls = 0
        self._done = True

    def reset(self, task_id: str | None = None, index: int | None = None, split: str | None = None,
              seed: int | None = None, **row: Any) -> str:
        """Start an episode on the row's task (task_id, else index of split, else a seeded random task) and
        return its instruction (TRL appends it to the prompt's last user message)."""
        options: dict = {}
        if task_id:
            options["task_id"] = task_id
        elif index is not None:
            options["index"] = int(index)
        if split:
            options["split"] = split
        observation, info = self._env.reset(seed=seed, options=options)
        self._task_id, self._return, self._tool_calls, self._done = info["task_id"], 0.0, 0, False
        return observation

    def get_reward(self) -> float:
        """The episode's return; an episode the model left without submitting is submitted and graded first."""
        if not self._done:
            self._act("")
        return self._return

    def _call(self, name: str, arguments: dict) -> str:
        if self._done:
            return EPISODE_OVER
        self._tool_calls += 1
        return self._act(format_tool_call(name, {k: v for k, v in arguments.items() if v is not None}))

    def _act(self, action: str) -> str:
        observation, reward, terminated, truncated, info = self._env.step(action)
        self._return += float(reward)
        if terminated or truncated:
            self._done = True
            if self._on_episode is not None:
                type(self)._on_episode({"env": self._env_name, "task_id": self._task_id, "reward": self._return,
                                        "success": bool(info.get("success")), "tool_calls": self._tool_calls,
                                        "submitted": bool(info.get("submitted"))})
        return observation


def _tool_method(schema: dict) -> Callable:
    """A method named after the tool, whose signature and Google docstring give back the tool's JSON schema."""
    fn = schema.get("function", schema)
    name = fn["name"]
    params = fn.get("parameters") or {}
    props: dict = params.get("properties") or {}
    required = list(params.get("required", list(props)))
    if not name.isidentifier() or name.startswith("_") or name in RESERVED:
        raise TrainerInputError(f"tool {name!r} cannot be a TRL tool method: rename it (not reset, get_reward, "
                                "_private or a non-identifier)")
    bad = [p for p in props if not p.isidentifier()]
    if bad:
        raise TrainerInputError(f"tool {name!r}: parameter {bad[0]!r} is not a Python identifier")

    def tool(self, **arguments):
        return self._call(name, arguments)

    order = [p for p in props if p in required] + [p for p in props if p not in required]
    hints = {p: _PY_TYPES.get(props[p].get("type", "string"), str) for p in order}
    tool.__signature__ = inspect.Signature(
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=hints[p],
                             default=inspect.Parameter.empty if p in required else None) for p in order],
        return_annotation=str)
    tool.__annotations__ = {**hints, "return": str}
    tool.__name__ = tool.__qualname__ = name
    args = "".join(f"\n    {p}: {_one_line(props[p].get('description') or p)}" for p in order)
    tool.__doc__ = _one_line(fn.get("description") or name) + ("\n\nArgs:" + args if args else "")
    return tool


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _class_name(env_name: str) -> str:
    """bash_exec_env -> BashExecEnv: TRL logs the reward as rewards/<ClassName>/mean."""
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[^0-9A-Za-z]+", env_name) if p) or "Environment"


def _tool_env(name: str, env_kwargs: dict) -> ToolEnv:
    env = envs.make(name, **env_kwargs)
    if not isinstance(env.unwrapped, ToolEnv):
        env.close()
        raise TrainerInputError(f"{name} is not a tool environment (envs.core.base.ToolEnv): TRL needs its tools")
    return env.unwrapped


def environment_factory(name: str, *, on_episode: EpisodeHook | None = None, **env_kwargs: Any) -> type:
    """The class to pass as GRPOTrainer(environment_factory=...) for registered environment `name` (or an
    alias). `env_kwargs` go to envs.make (split, tasks=FILE.jsonl, max_steps, ...). `on_episode(record)` is
    called when an episode ends, with env, task_id, reward (the return), success, tool_calls, submitted."""
    resolved = envs.resolve_name(name)
    probe = _tool_env(resolved, env_kwargs)
    try:
        tools = {t["function"]["name"]: _tool_method(t) for t in probe.tools}
    finally:
        probe.close()
    attrs = {"_env_name": resolved, "_env_kwargs": dict(env_kwargs), "_on_episode": staticmethod(on_episode)
             if on_episode else None, "__doc__": f"{resolved} as a TRL environment (trainers/rl/trl_env.py).", **tools}
    return type(_class_name(resolved), (EnvironmentAdapter,), attrs)


def grpo_dataset(name: str, *, rows: int | None = None, split: str = "train", environment: bool = False,
                 **env_kwargs: Any):
    """A datasets.Dataset for GRPOTrainer: the first `rows` tasks of `split` (all by default), one row each:
    `prompt` (the environment's system prompt and an empty user turn that `reset` fills with the instruction)
    and `task_id`. environment=True adds the `environment` column a dict environment_factory routes by."""
    from datasets import Dataset

    env = _tool_env(envs.resolve_name(name), env_kwargs)
    try:
        n = env.suite.count(split)
        ids = [env.suite.task(split, i).task_id for i in range(n if rows is None else min(rows, n))]
        prompt = [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": ""}]
    finally:
        env.close()
    if not ids:
        raise TrainerInputError(f"{name}: no {split} tasks")
    extra = {"environment": envs.resolve_name(name)} if environment else {}
    return Dataset.from_list([{"prompt": prompt, "task_id": t, **extra} for t in ids])


def hermes_tool_parser(tok):
    """Let TRL read tool calls from a tokenizer with our Hermes ChatML template (trainers/modeling/chat.py).

    TRL knows response parsers only for chat templates it recognises byte for byte; ours writes tool calls as
    Qwen's do (`<tool_call>` JSON inside ChatML), so its qwen3 template parses them (training-notes.md pitfall 8)."""
    from trl.chat_template_utils import qwen3_template

    template = tok.chat_template or ""
    if tok.response_template is None:
        if "<tool_call>" not in template or "<|im_start|>assistant" not in template:
            raise TrainerInputError("the tokenizer's chat template does not write Hermes <tool_call> blocks in ChatML: "
                                    "set tok.response_template for it, or use --chat-template chatml")
        tok.response_template = qwen3_template
    return tok
