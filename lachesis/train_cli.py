"""Console scripts of the trainers wing: rl_finetune_supervised, llm_finetune, hermes_eval.

Each training command's options are the fields of its config dataclass (trainers/config.py): default and help
come from there (`lachesis.console.option`), and the dataclass validates them, so a bad value (`--grad-accum 0`)
is one line on stderr and exit 2, like every other bad input (empty dataset, no messages, a model without
weights, a tokenizer without chat template). The heavy imports (torch, transformers, peft, trl) happen inside
the command bodies.
"""
from __future__ import annotations

import inspect
import typing
from typing import Callable, Optional

import typer

from lachesis.console import fail, option, print_json, run
from trainers.config import InstructConfig, SFTConfig, TrainConfig
from trainers.errors import TrainerInputError

_APP_KW = dict(add_completion=False, pretty_exceptions_enable=False, no_args_is_help=False)


def _run(fn, *args, **kw):
    """Call fn, mapping user-input errors to one line on stderr + exit 2 (no traceback)."""
    try:
        return fn(*args, **kw)
    except TrainerInputError as exc:
        fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        fail("interrupted", 130)


def _console(quiet: bool):
    from rich.console import Console

    return Console(stderr=True, quiet=quiet)


# ----------------------------------------------------------------------------------------------- training commands
# (config field, flags): the options every training command has, in --help order
TRAIN_OPTIONS = [
    ("model", "--model"), ("data", "--data"), ("epochs", "--epochs"), ("max_steps", "--max-steps"),
    ("output", "--output"), ("lr", "--lr"), ("batch_size", "--batch-size"), ("grad_accum", "--grad-accum"),
    ("max_length", "--max-length"), ("full", "--full/--lora"), ("lora_r", "--lora-r"), ("lora_alpha", "--lora-alpha"),
    ("lora_dropout", "--lora-dropout"), ("target_modules", "--target-modules"), ("warmup_steps", "--warmup-steps"),
    ("seed", "--seed"), ("split", "--split"), ("lake_root", "--lake"), ("record_in_lake", "--record-in-lake/--no-lake"),
    ("threads", "--threads"), ("chat_template", "--chat-template"), ("plot", "--plot/--no-plot"),
]
INSTRUCT_OPTIONS = [("method", "--method"), *TRAIN_OPTIONS, ("beta", "--beta")]


def _train_command(config_cls: type[TrainConfig], options: list[tuple[str, str]]) -> Callable:
    """A typer command whose options are `options` of `config_cls` (plus --json, --quiet); it builds the config
    (validated there), runs its trainer and prints the summary."""
    hints = typing.get_type_hints(config_cls)
    kw = inspect.Parameter.KEYWORD_ONLY
    params = [inspect.Parameter(name, kw, default=option(config_cls, name, *flags), annotation=hints[name])
              for name, *flags in options]
    params += [inspect.Parameter("as_json", kw, default=typer.Option(False, "--json", help="print the run summary as JSON"),
                                 annotation=bool),
               inspect.Parameter("quiet", kw, default=typer.Option(False, "--quiet", "-q", help="no progress and no table"),
                                 annotation=bool)]

    def command(as_json: bool = False, quiet: bool = False, **values):
        console = _console(quiet or as_json)
        config = _run(config_cls, **values, progress=not quiet and not as_json)
        summary = _run(_trainer_for(config), config, console)
        if as_json:
            print_json(summary)
        else:
            _print_train_summary(summary, console)

    command.__signature__ = inspect.Signature(params)
    return command


def _print_train_summary(summary: dict, console):
    from rich.table import Table

    t = Table(title=f"run {summary['run_id']}", show_header=False)
    for k in ("model", "method", "full", "data", "conversations", "steps", "warmup_steps", "first_loss", "final_loss",
              "tokens_per_s", "train_s", "adapter_path", "loss_plot", "run_dir"):
        v = summary.get(k)
        t.add_row(k, f"{v:.4f}" if isinstance(v, float) else str(v))
    for w in summary.get("warnings") or []:
        t.add_row("warning", w)
    console.quiet = False
    console.print(t)


def _trainer_for(config: TrainConfig) -> Callable:
    """run_dpo for `llm_finetune --method dpo`, else run_sft."""
    if isinstance(config, InstructConfig) and config.method == "dpo":
        from trainers.dpo import run_dpo

        return run_dpo
    from trainers.sft import run_sft

    return run_sft


SFT_HELP = "Supervised fine-tuning on agent trajectories (assistant-only loss)."
sft_app = typer.Typer(help=SFT_HELP, **_APP_KW)
sft_app.command(name="rl_finetune_supervised", help=SFT_HELP)(_train_command(SFTConfig, TRAIN_OPTIONS))


def rl_finetune_supervised_main():
    run(sft_app)


LLM_HELP = ("Instruction tuning on an instruction dataset: --method sft (messages or prompt/completion) "
            "or dpo (prompt/chosen/rejected).")
llm_app = typer.Typer(help=LLM_HELP, **_APP_KW)
llm_app.command(name="llm_finetune", help=LLM_HELP)(_train_command(InstructConfig, INSTRUCT_OPTIONS))


def llm_finetune_main():
    run(llm_app)


# ----------------------------------------------------------------------------------------------- hermes_eval
eval_app = typer.Typer(help="Evaluate a model greedily on an environment's held-out tasks.", **_APP_KW)


@eval_app.command(name="hermes_eval")
def hermes_eval(
    task: str = typer.Option("shell", help="debug-python | shell | git | a registered environment name"),
    split: str = typer.Option("test", help="the task split to evaluate on (test: held out of training)"),
    model: str = option(TrainConfig, "model", "--model"),
    adapter: Optional[str] = typer.Option(None, help="a run folder (its adapter/ or, for --full runs, model/)"),
    limit: Optional[int] = typer.Option(None, help="evaluate only the first N tasks"),
    seed: int = typer.Option(0, help="seed of episode i is seed + i"),
    max_new_tokens: int = typer.Option(128, help="tokens generated per turn at most"),
    max_turns: int = typer.Option(6, help="turns per episode at most"),
    batch_size: int = typer.Option(64, help="episodes generated together"),
    tasks: Optional[str] = typer.Option(None, "--tasks", help="a tasks .jsonl file instead of the built-in suite"),
    lake: Optional[str] = typer.Option(None, "--lake", help="an existing lake for the episodes and the runs event "
                                                            "(default $LAKE_ROOT or ./data/lake)"),
    no_lake: bool = typer.Option(False, "--no-lake", help="record nothing in the lake"),
    threads: Optional[int] = option(TrainConfig, "threads", "--threads"),
    chat_template: Optional[str] = option(TrainConfig, "chat_template", "--chat-template"),
    as_json: bool = typer.Option(False, "--json", help="print the summary with per-task results as JSON"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar"),
):
    """Evaluate a model (and a run's adapter) greedily on an environment's held-out tasks."""
    from trainers.evaluate import EvalSettings, run_eval

    s = _run(EvalSettings, model=model, task=task, split=split, adapter=adapter, limit=limit, seed=seed,
                     max_new_tokens=max_new_tokens, max_turns=max_turns, batch_size=batch_size, lake_root=lake,
                     record_in_lake=not no_lake, threads=threads, chat_template=chat_template, tasks_file=tasks,
                     progress=not quiet and not as_json)
    console = _console(quiet or as_json)
    summary = _run(run_eval, s, console)
    if as_json:
        print_json(summary)
        return
    from rich.table import Table

    t = Table(title=f"{summary['env']} / {summary['split']}: {summary['model']}"
                    + (f" + {summary['adapter']}" if summary.get("adapter") else ""))
    for col in ("task_id", "success", "reward", "turns", "valid calls"):
        t.add_column(col)
    for r in summary["per_task"]:  # every task: a table that stops early hides failures
        t.add_row(str(r["task_id"]), "yes" if r["success"] else "no", f"{r['reward']:.2f}", str(r["turns"]),
                  f"{r['valid_tool_call_rate']:.2f}")
    console.quiet = False
    console.print(t)
    console.print(f"success rate [bold]{summary['success_rate']:.3f}[/]  mean reward [bold]{summary['mean_reward']:.3f}[/]  "
                  f"valid tool calls {summary['valid_tool_call_rate']:.3f}  episodes {summary['episodes']}  "
                  f"({summary['wall_s']:.1f} s)")


def hermes_eval_main():
    run(eval_app)


if __name__ == "__main__":  # pragma: no cover
    rl_finetune_supervised_main()
