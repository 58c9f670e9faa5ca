"""hermes_eval's settings: which model, which tasks, how long episodes may run, where they are recorded.

Kept apart from trainers/eval/evaluate.py so that a command line can be built and checked without importing the
environments, the lake or the generation loop (every `lake` and `hermes_eval` start imports this module); the
environment registry is read only when a setting names an environment.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from placement.ray_cluster import ADDRESS_HELP, check_address
from trainers.generation.generate import BF16_HELP, STOP_REPETITION, check_bf16, check_stop_repetition
from trainers.runtime.device import check_device
from trainers.runtime.errors import TrainerInputError
from trainers.runtime.options import DEFAULT_SEED, DEVICE_HELP, LAKE_HELP, THREADS_HELP, at_least
from trainers.runtime.options import helped as _help


@dataclass
class EvalSettings:
    """hermes_eval: which model, which tasks, how long episodes may run, where they are recorded."""

    model: str | None = field(default=None, **_help(
        "tiny | smollm2 | hermes-3 | a local model folder | a hub id (default: the model the --adapter run was "
        "trained from, else tiny)"))
    task: str = field(default="shell", **_help("an environment name or alias: debug-python | shell | git | a "
                                               "registered environment"))
    split: str = field(default="test", **_help(
        "the task split to evaluate on (test: held-out names; test_families: whole task families held out of training)"))
    adapter: str | None = field(default=None, **_help("a run folder (its adapter/ or, for --full runs, model/)"))
    limit: int | None = field(default=None, **_help("evaluate only the first N tasks"))
    offset: int = field(default=0, **_help("skip the first N tasks"))
    seed: int = field(default=DEFAULT_SEED, **_help("seed of episode i is seed + i"))
    max_new_tokens: int | None = field(default=None, **_help(
        "tokens generated per turn at most (default: what the environment's replies need: 128, web forms 384)"))
    max_turns: int = field(default=6, **_help("turns per episode at most (the environment's step limit)"))
    stop_repetition: int = field(default=STOP_REPETITION, **_help(
        "end a reply whose last N tokens are one span of <= 16 tokens repeated (a loop) instead of running to "
        "--max-new-tokens; 0: off"))
    max_context: int = field(default=2048, **_help("an episode ends once its prompt reaches this many tokens"))
    batch_size: int = field(default=64, **_help("episodes generated together"))
    lake_root: str | None = field(default=None, **_help(LAKE_HELP))
    record_in_lake: bool = field(default=True, **_help("record the episodes and a runs event in the lake"))
    threads: int | None = field(default=None, **_help(THREADS_HELP))
    device: str = field(default="auto", **_help(DEVICE_HELP))
    chat_template: str | None = field(default=None, **_help("chatml (ours, Hermes-style) or a .jinja file"))
    tasks_file: str | None = field(default=None, **_help("a tasks .jsonl file instead of the built-in suite"))
    progress: bool = field(default=True, **_help("show a progress bar"))
    bf16: str = field(default="auto", **_help(BF16_HELP))
    reuse_kv: bool = field(default=True, **_help(
        "keep each episode's KV cache across its turns and compute the prompts' shared system/tools prefix once "
        "(exact: the same greedy outputs, ~2x fewer CPU-seconds)"))
    ray: str | None = field(default=None, **_help(
        ADDRESS_HELP + "; each worker loads --model (and --adapter) on its node, the episodes and the summary are "
        "those of one process, recorded here"))
    workers: int = field(default=1, **_help("with --ray: the Ray workers, each playing its share of the tasks"))

    def __post_init__(self):
        import envs  # the registry, when settings are made: not when a command line is built

        self.task = resolve_env_name(self.task)
        if self.max_new_tokens is None:
            self.max_new_tokens = envs.reply_tokens(self.task)
        self.bf16 = check_bf16(self.bf16)
        if self.split not in envs.SPLITS:
            raise TrainerInputError(f"unknown --split {self.split!r}: use {' or '.join(envs.SPLITS)}")
        at_least(self, 0, "offset", "stop_repetition")
        check_stop_repetition(self.stop_repetition, "--stop-repetition")
        at_least(self, 1, "limit", "max_new_tokens", "max_turns", "max_context", "batch_size", "threads", "workers")
        if self.ray is not None:
            self.ray = check_address(self.ray)
        self.device = check_device(self.device)


def resolve_env_name(task: str) -> str:
    """The registered environment for a --task name or alias (envs.core.registry holds the one alias table)."""
    import envs

    try:
        return envs.resolve_name(task)
    except envs.UnknownEnvironmentError as exc:
        raise TrainerInputError(f"unknown task/environment {task!r}: use one of {', '.join(exc.known)}") from None
