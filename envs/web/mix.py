"""web_mix_env: web_form_env's MiniWoB tasks with web_gen_env's generated forms mixed into the train split.

Why: online RL trains on one environment (`rl_train_online --env`), and issue 45 asks for generated tasks in its
mix, to teach reading labels rather than the layouts of 25 fixed pages. So this environment's train split cycles
through the 25 MiniWoB train tasks and the 4 generated train layouts (task i has family i % 29, as every suite's
built-in tasks do), while its test and test_families splits are web_form_env's own, task for task (the same pages,
seeds and data mode): what a run scores on them reads as web_form_env's figures.

Each task keeps its own kind's checker (MiniWoB's `miniwob`/`seed`/`mode`, or the generator's `generator`/`seed`/
`split`) and is played with that kind's page hooks; the observation, the tools, the episode's end and the rewards
are WebFormEnv's for both. A task file may hold either kind. The scripted policies pick the expert of each episode's
kind.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from envs.core.contract import ResetInfo
from envs.core.task_suite import Suite, builtin_id
from envs.core.tasks import FAMILY_SPLIT, Task
from envs.web import suite as form
from envs.web.env import WebFormEnv
from envs.web.generated import env as gen

ENV = "web_mix_env"
PER_FAMILY = form.TRAIN_TASKS // len(form.TRAIN_FAMILIES)  # train tasks of each family, as web_form_env's


def families(split: str) -> tuple[str, ...]:
    """The families a split's built-in tasks cycle through: the generated layouts are in the train split alone."""
    if split == FAMILY_SPLIT:
        return form.HELD_OUT
    return form.TRAIN_FAMILIES + (gen.LAYOUTS if split == "train" else ())


class MixSuite(Suite):
    """A Suite whose splits cycle through `families(split)`."""

    def templates_of(self, split: str) -> tuple[str, ...]:
        return families(split)


def is_layout(template: str) -> bool:
    """Whether a task's template (ResetInfo's `template`) names a generated form's layout, not a MiniWoB page."""
    return template in gen.LAYOUTS + gen.HELD_OUT_LAYOUTS


def is_generated(task: Task) -> bool:
    """A generated form task (web_gen_env's checker), else a MiniWoB one."""
    return task.checker.get("generator") == "form" or is_layout(task.template)


def generate(split: str, index: int, template: str) -> Task:
    """Built-in task `index` of a split: the task of that kind whose own index is the same slice of its family."""
    q = index // len(families(split))
    if template in gen.LAYOUTS:
        task = gen.generate(split, q * len(gen.LAYOUTS) + gen.LAYOUTS.index(template), template)
    else:
        own = form.TRAIN_FAMILIES if split != FAMILY_SPLIT else form.HELD_OUT
        task = form.generate(split, q * len(own) + own.index(template), template)
    return replace(task, task_id=builtin_id(ENV, split, index), env=ENV)


def suite() -> MixSuite:
    counts = {"train": PER_FAMILY * len(families("train")), "test": form.TEST_TASKS, FAMILY_SPLIT: form.FAMILY_TASKS}
    return MixSuite(ENV, counts, generate, template_names=families("train") + form.HELD_OUT, held_out=form.HELD_OUT)


def validate_task(task: Task) -> tuple[str, str] | None:
    return gen.validate_task(task) if is_generated(task) else form.validate_task(task)


class WebMixEnv(gen.WebGenEnv):
    """MiniWoB and generated form tasks in one environment (see the module docstring): each page hook is the one
    of the task's kind."""

    env_name = ENV

    @classmethod
    def builtin_suite(cls) -> Suite:
        return suite()

    def validate_task(self, task: Task) -> tuple[str, str] | None:
        return validate_task(task)

    def _page_url(self, task: Task) -> str:
        return gen.WebGenEnv._page_url(self, task) if is_generated(task) else WebFormEnv._page_url(self, task)

    def _load(self, task: Task) -> None:
        self.spec = None  # set by the generated kind's loader only: the hooks below read the episode's kind from it
        if is_generated(task):
            gen.WebGenEnv._load(self, task)
        else:
            WebFormEnv._load(self, task)

    def _task_fields(self, task: Task, utterance: str) -> dict[str, str]:
        if is_generated(task):
            return gen.WebGenEnv._task_fields(self, task, utterance)
        return WebFormEnv._task_fields(self, task, utterance)

    def _fill_keys(self) -> list[str]:
        return gen.WebGenEnv._fill_keys(self) if self.spec is not None else WebFormEnv._fill_keys(self)

    def _detail(self) -> dict:
        return gen.WebGenEnv._detail(self) if self.spec is not None else WebFormEnv._detail(self)


@dataclass
class MixPolicy:
    """A scripted policy of web_mix_env: each episode played by the policy of its task's kind (`make(env_name,
    kind, seed)` gives web_form_env's or web_gen_env's)."""

    make: object  # (env_name, kind, seed) -> Policy
    kind: str = "expert"
    seed: int = 0
    current: object = None
    policies: dict = field(default_factory=dict)

    def reset(self, info: ResetInfo) -> None:
        name = gen.ENV if is_layout(info.get("template", "")) else form.ENV
        if name not in self.policies:
            self.policies[name] = self.make(name, self.kind, self.seed)
        self.current = self.policies[name]
        self.current.reset(info)

    def act(self, observation: str, history: list[dict]) -> str:
        return self.current.act(observation, history)

    def notes(self) -> dict:
        return self.current.notes() if self.current is not None else {"policy": self.kind}
