"""Scripted policies: expert (the task's reference solution), noisy (realistic mistakes), recover (a failing
first try, then the reference solution), random.

Every policy has the same three methods (`Policy`): `reset(info)` with the ResetInfo that the
environment's reset() returned (the policy finds its task by `info["task_id"]`: built-in, loaded from
a file, or given to the environment), `act(observation, history)` with the chat messages so far (the
episode recorder's, transcript/recorder.py) returning the next assistant message, and `notes()`, what a
trajectory record keeps about the policy's episode. The turn is the number of assistant messages in
`history`, so an empty history always means a new episode.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Protocol

from envs.core.contract import ResetInfo
from envs.core.suites import find_task
from envs.core.tasks import Task
from transcript.toolcalls import format_tool_call

SUBMIT = {"name": "submit", "arguments": {}}
KINDS = ("expert", "noisy", "recover", "random")


class Policy(Protocol):
    kind: str

    def reset(self, info: ResetInfo) -> None: ...

    def act(self, observation: str, history: list[dict]) -> str: ...

    def notes(self) -> dict: ...


def _turn(history: list[dict]) -> int:
    return sum(1 for m in history if m["role"] == "assistant")


@dataclass
class ExpertPolicy:
    env_name: str
    seed: int = 0
    kind: str = "expert"
    plan: list[dict] = field(default_factory=list)

    def reset(self, info: ResetInfo) -> None:
        self.plan = self.make_plan(find_task(info["env"], info["task_id"]))

    def make_plan(self, task: Task) -> list[dict]:
        return [dict(c) for c in task.solution] + [SUBMIT]

    def act(self, observation: str, history: list[dict]) -> str:
        if not self.plan:
            raise RuntimeError("call policy.reset(info) before act()")
        call = self.plan[min(_turn(history), len(self.plan) - 1)]
        return format_tool_call(call["name"], call["arguments"])

    def notes(self) -> dict:
        return {"policy": self.kind}


# Wrong flags and operators people actually type: (what the expert writes, the mistake).
WRONG = {
    "bash_exec_env": [("wc -l", "wc -w"), ("tail -n", "head -n"), ("mkdir -p", "touch"), ("sed -i", "sed"),
                      ("cp ", "mv "), ("grep -c", "grep"), ("find ", "ls "), ("tar czf", "tar tzf"),
                      ("echo ", "echo -n x"), ("rm ", "ls ")],
    "git_repo_env": [("--theirs", "--ours"), ("HEAD@{1}", "HEAD"), ("git branch ", "git checkout -b "),
                     ("checkout -qb", "branch"), ("merge -q --no-edit", "merge --squash"), ("cherry-pick", "revert"),
                     ("revert --no-edit", "reset --hard"), ("git tag ", "git branch "), ("--amend -qm", "-qm"),
                     ("git add ", "git rm --cached "), ("refs/bisect/bad", "HEAD")],
    "python_debug_env": [("+= ", "-= "), ("*= ", "+= "), ("== ", "!= "), (" + 1", " - 1"), ("[-", "["),
                         ("reversed(", "sorted("), ("len(", "max("), (" * ", " ** "), ("% 2 == 0", "% 2"),
                         ("[0]", "[1]"), ("max(", "min(")],
}


def _typo(rng: random.Random, word: str) -> str:
    if len(word) < 3:
        return word + word[-1]
    i = rng.randrange(1, len(word) - 1)
    op = rng.choice(("drop", "swap", "double"))
    if op == "drop":
        return word[:i] + word[i + 1:]
    if op == "swap" and word[i] != word[i + 1]:
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    return word[:i] + word[i] + word[i:]


@dataclass
class NoisyPolicy(ExpertPolicy):
    """The expert plan with one realistic mistake in about half the episodes, chosen by (seed, task_id)."""

    kind: str = "noisy"
    p_correct: float = 0.45
    mistake: str = ""

    def make_plan(self, task: Task) -> list[dict]:
        rng = random.Random(f"{self.seed}:{task.task_id}")
        plan = [json.loads(json.dumps(c)) for c in task.solution]
        r = rng.random()
        self.mistake = "none"
        # The step that changes the workspace (the fix in python_debug, the command elsewhere).
        key = next((i for i, c in enumerate(plan) if c["name"] in ("run", "replace_in_file", "write_file")), None)
        if r >= self.p_correct and key is not None:
            r2 = rng.random()
            if r2 < 0.3:
                self.mistake = "forgot step"
                plan.pop(key)
            elif r2 < 0.65 and self._wrong_flag(rng, plan[key]):
                self.mistake = "wrong flag"
            else:
                self.mistake = "typo"
                self._typo_in(rng, plan[key], task)
        return plan + [SUBMIT]

    def notes(self) -> dict:
        return {"policy": self.kind, "mistake": self.mistake}

    def _field(self, call: dict) -> str:
        return "command" if "command" in call["arguments"] else "new"

    def _wrong_flag(self, rng: random.Random, call: dict) -> bool:
        fld = self._field(call)
        text = call["arguments"].get(fld, "")
        options = [(a, b) for a, b in WRONG.get(self.env_name, []) if a in text]
        if not options:
            return False
        a, b = rng.choice(options)
        call["arguments"][fld] = text.replace(a, b, 1)
        return True

    def _typo_in(self, rng: random.Random, call: dict, task: Task) -> None:
        fld = self._field(call)
        text = call["arguments"].get(fld, "")
        values = sorted({v for v in task.slots.values() if v and v in text}, key=len, reverse=True)
        if values:
            v = rng.choice(values)
            call["arguments"][fld] = text.replace(v, _typo(rng, v), 1)
        else:
            words = text.split() or ["x"]
            w = rng.choice(words)
            call["arguments"][fld] = text.replace(w, _typo(rng, w), 1)


@dataclass
class RecoverPolicy(ExpertPolicy):
    """The expert that recovers from an error: in about half the episodes (chosen by seed and task_id) its first
    try of the step that does the work fails harmlessly (a mistyped command name, a snippet that is not in the
    file), the error comes back, and it then runs the reference solution. Its episodes teach what expert
    episodes cannot: read the error, then correct the call (issue 24: models never retried). It succeeds
    wherever the expert does (tests/test_envs_families.py)."""

    kind: str = "recover"
    p_mistake: float = 0.5
    mistake: str = ""

    def make_plan(self, task: Task) -> list[dict]:
        rng = random.Random(f"recover:{self.seed}:{task.task_id}")
        plan = [json.loads(json.dumps(c)) for c in task.solution]
        key = next((i for i, c in enumerate(plan) if c["name"] in ("run", "replace_in_file")), None)
        self.mistake = "none"
        if key is not None and rng.random() < self.p_mistake:
            wrong = json.loads(json.dumps(plan[key]))
            if wrong["name"] == "run":  # a command name that does not exist: "command not found", nothing runs
                head, _, rest = wrong["arguments"]["command"].partition(" ")
                wrong["arguments"]["command"] = f"{_misspelt(rng, head)} {rest}".rstrip()
            else:  # an `old` snippet that is not in the file: "the snippet occurs 0 times"
                wrong["arguments"]["old"] = wrong["arguments"]["old"] + "  # " + _typo(rng, "fixme")
            self.mistake = "failed first try"
            plan.insert(key, wrong)
        return plan + [SUBMIT]

    def notes(self) -> dict:
        return {"policy": self.kind, "mistake": self.mistake}


def _misspelt(rng: random.Random, word: str) -> str:
    """A typo of a command name that is no command (a swap or a doubled letter could spell another one)."""
    return word[:1] + "q" + word[1:] if len(word) < 3 else _typo(rng, word) + "q"


JUNK_COMMANDS = ["ls", "pwd", "echo done", "cat *", "ls -la", "true", "date", "whoami", "echo {w}", "touch {w}",
                 "git status", "git log --oneline", "head -n 1 *"]


@dataclass
class RandomPolicy:
    """Random tool calls with random arguments, a malformed call or plain text now and then."""

    env_name: str
    seed: int = 0
    kind: str = "random"
    _rng: random.Random = field(default_factory=random.Random)
    _tools: list[dict] = field(default_factory=list)

    def reset(self, info: ResetInfo) -> None:
        self._rng = random.Random(f"{self.seed}:{info['task_id']}")
        self._tools = [t["function"] for t in info["tools"]]

    def notes(self) -> dict:
        return {"policy": self.kind}

    def act(self, observation: str, history: list[dict]) -> str:
        rng = self._rng
        r = rng.random()
        if r < 0.08:
            return "I think the task is done."
        if r < 0.16:
            return '<tool_call>{"name": "run", "arguments": {"command": </tool_call>'
        tool = rng.choice(self._tools) if self._tools else {"name": "submit", "parameters": {"properties": {}}}
        word = "".join(rng.choice("abcdefghij") for _ in range(rng.randint(3, 7)))
        args = {}
        for name in tool.get("parameters", {}).get("properties", {}):
            if name == "command":
                args[name] = rng.choice(JUNK_COMMANDS).format(w=word)
            elif name == "path":
                args[name] = rng.choice([f"{word}.py", f"{word}.txt", "README"])
            elif name == "answer":
                continue
            else:
                args[name] = word
        return format_tool_call(tool["name"], args)


def make_policy(env_name: str, kind: str, seed: int = 0) -> Policy:
    if kind == "expert":
        return ExpertPolicy(env_name, seed)
    if kind == "noisy":
        return NoisyPolicy(env_name, seed)
    if kind == "recover":
        return RecoverPolicy(env_name, seed)
    if kind == "random":
        return RandomPolicy(env_name, seed)
    raise ValueError(f"unknown policy {kind!r}; policies: {', '.join(KINDS)}")
