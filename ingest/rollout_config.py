"""`lake rollout`'s configuration: which episodes of which environment and scripted policy.

A module of its own, without imports of the environments or the lake at the top, because the `lake`
CLI reads the options' defaults and help from it when it starts (lachesis/rollout_cli.py), and
`lake sql` must not pay for gymnasium.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ground.errors import UserError
from ground.options import helped
from ground.ranges import at_least
from placement.ray_cluster import ADDRESS_HELP, check_address


class RolloutInputError(UserError, ValueError):
    """A bad rollout option; one line, the CLI prints it and exits 2."""


@dataclass(frozen=True)
class RolloutSpec:
    """`lake rollout`: which episodes of which environment and scripted policy."""

    env: str = field(**helped("Environment name or alias (see rl_list_environments), e.g. bash_exec_env, shell."))
    policy: str = field(default="expert", **helped("Scripted policy: expert, noisy or random."))
    episodes: int = field(default=10, **helped("Number of episodes."))
    split: str = field(default="train", **helped("Task split: train, test or test_families (held-out families)."))
    seed: int = field(default=0, **helped("First task index and seed (episode i plays task seed+i with seed+i)."))
    tasks_file: str | None = field(default=None, **helped("Your own tasks (JSONL) instead of the built-in suite."))
    max_steps: int = field(default=6, **helped("Steps before an episode is cut off."))
    templates: tuple[str, ...] = field(default=(), **helped("Only these task templates (default: all)."))
    workers: int = field(default=1, **helped(
        "Episodes played at once, each in its own environment (a web environment's workers share one pool of "
        "that many browsers; with --ray, the Ray workers, each with its own environment and browser)."))
    commit_every: int = field(default=25, **helped(
        "Finished episodes per lake commit (also committed every 10 s and when the run stops): a killed run loses "
        "at most the episodes not yet committed."))
    resume: bool = field(default=False, **helped(
        "Continue the newest rollout of the same options in this lake: play only its episodes not yet in the "
        "lake (each episode has a fixed id, so none is written twice)."))
    screenshots: str | None = field(default=None, **helped(
        "Folder for each episode's final page as a PNG, its path in the row's metadata (checks.details[0]"
        ".screenshot); environments tagged web only."))
    ray: str | None = field(default=None, **helped(
        ADDRESS_HELP + "; the episodes are the same, played by --workers Ray workers and written here"))

    def __post_init__(self):
        import envs  # here, not at the top: the `lake` CLI imports this module at start-up for the option help

        try:
            envs.resolve_name(self.env)
        except envs.UnknownEnvironmentError as exc:
            raise RolloutInputError(str(exc)) from None
        if self.policy not in envs.POLICY_KINDS:
            raise RolloutInputError(f"unknown policy {self.policy!r}; policies: {', '.join(envs.POLICY_KINDS)}")
        if self.split not in envs.SPLITS:
            raise RolloutInputError(f"unknown split {self.split!r}; splits: {', '.join(envs.SPLITS)}")
        if self.screenshots and "web" not in envs.env_info(envs.resolve_name(self.env)).tags:
            raise RolloutInputError(f"--screenshots: {self.env} has no page to take; only environments tagged "
                                    "web do")
        at_least(self, 1, "episodes", "max_steps", "workers", "commit_every", error=RolloutInputError)
        if self.ray is not None:
            object.__setattr__(self, "ray", check_address(self.ray))
            if self.screenshots:  # the pages are taken on the workers' nodes, not where the command runs
                raise RolloutInputError("--screenshots needs the pages on this machine: drop --ray or --screenshots")
