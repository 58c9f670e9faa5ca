"""Console scripts of the trainers wing: rl_finetune_supervised, llm_finetune, hermes_eval.

The heavy imports (torch, transformers, peft, trl) happen inside the command bodies. Bad input (empty dataset,
no messages, model without weights, tokenizer without chat template, ...) prints one line and exits with 2.
"""
from __future__ import annotations

import sys
from typing import Optional

import typer

from lachesis.console import fail, print_json

_APP_KW = dict(add_completion=False, pretty_exceptions_enable=False, no_args_is_help=False)


def _run(fn, *args, **kw):
    """Call fn, mapping user-input errors to one line on stderr + exit 2 (no traceback)."""
    from trainers.errors import TrainerInputError

    try:
        return fn(*args, **kw)
    except TrainerInputError as exc:
        fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        fail("interrupted", 130)


def _console(quiet: bool):
    from rich.console import Console

    return Console(stderr=True, quiet=quiet)


# ----------------------------------------------------------------------------------------------- rl_finetune_supervised
sft_app = typer.Typer(help="Supervised fine-tuning on agent trajectories (assistant-only loss).", **_APP_KW)


def _sft_settings(**o):
    from trainers.sft import SFTSettings

    return SFTSettings(**o)


def _train_command(kind: str):
    def command(
        model: str = typer.Option("tiny", help="tiny | hermes-3 | a local folder | a hub id"),
        data: str = typer.Option(..., help="export folder (parquet/jsonl + manifest.json), a .jsonl file or a lake view name"),
        epochs: float = typer.Option(3.0, help="passes over the data"),
        output: Optional[str] = typer.Option(None, help="run folder (default runs/<run_id>)"),
        max_steps: Optional[int] = typer.Option(None, help="stop after this many optimizer steps"),
        time_budget: Optional[float] = typer.Option(None, help="stop after this many seconds of training"),
        lr: Optional[float] = typer.Option(None, help="peak learning rate (default 1e-3 full, 2e-4 LoRA)"),
        batch_size: int = typer.Option(16),
        grad_accum: int = typer.Option(1),
        max_length: int = typer.Option(1024, help="truncate conversations to this many tokens"),
        full: bool = typer.Option(False, "--full", help="full fine-tuning instead of LoRA"),
        lora_r: int = typer.Option(16),
        lora_alpha: int = typer.Option(32),
        lora_dropout: float = typer.Option(0.0),
        target_modules: str = typer.Option("all-linear", help="all-linear or a comma list, e.g. q_proj,v_proj"),
        warmup_steps: int = typer.Option(30),
        seed: int = typer.Option(0),
        split: str = typer.Option("train", help="train only on rows of this split (all = every row)"),
        lake: Optional[str] = typer.Option(None, "--lake", envvar="LAKE_ROOT", help="lake root for view names and the runs event"),
        no_lake: bool = typer.Option(False, "--no-lake", help="do not record the run in the lake"),
        threads: Optional[int] = typer.Option(None, help="torch threads (default 1 or $LACHESIS_THREADS)"),
        chat_template: Optional[str] = typer.Option(None, help="chatml (ours, Hermes-style) or a .jinja file"),
        as_json: bool = typer.Option(False, "--json", help="print the run summary as JSON"),
        quiet: bool = typer.Option(False, "--quiet", "-q"),
    ):
        from trainers.sft import run_sft

        s = _sft_settings(model=model, data=data, epochs=epochs, output=output, max_steps=max_steps,
                          time_budget_s=time_budget, lr=lr, batch_size=batch_size, grad_accum=grad_accum,
                          max_length=max_length, full=full, lora_r=lora_r, lora_alpha=lora_alpha,
                          lora_dropout=lora_dropout, target_modules=target_modules, warmup_steps=warmup_steps,
                          seed=seed, split=split, lake_root=lake, record_in_lake=not no_lake, threads=threads,
                          chat_template=chat_template, progress=not quiet and not as_json, kind=kind)
        console = _console(quiet or as_json)
        summary = _run(run_sft, s, console)
        if as_json:
            print_json(summary)
        else:
            _print_train_summary(summary, console)

    return command


def _print_train_summary(summary: dict, console):
    from rich.table import Table

    t = Table(title=f"run {summary['run_id']}", show_header=False)
    for k in ("model", "data", "conversations", "steps", "epochs_done", "first_loss", "final_loss", "tokens_per_s",
              "train_s", "adapter_path", "loss_plot", "run_dir"):
        v = summary.get(k)
        t.add_row(k, f"{v:.4f}" if isinstance(v, float) else str(v))
    console.quiet = False
    console.print(t)


sft_app.command(name="rl_finetune_supervised")(_train_command("train"))


def rl_finetune_supervised_main():
    sft_app()


# ----------------------------------------------------------------------------------------------- llm_finetune
llm_app = typer.Typer(help="Instruction tuning on an instruction dataset: --method sft (messages or prompt/completion) "
                           "or dpo (prompt/chosen/rejected).", **_APP_KW)


@llm_app.command(name="llm_finetune")
def llm_finetune(
    model: str = typer.Option("tiny"),
    data: str = typer.Option(..., help="instruction_dataset.jsonl, an export folder or a lake view name"),
    method: str = typer.Option("sft", help="sft | dpo"),
    epochs: float = typer.Option(3.0),
    output: Optional[str] = typer.Option(None),
    max_steps: Optional[int] = typer.Option(None),
    lr: Optional[float] = typer.Option(None),
    batch_size: int = typer.Option(8),
    max_length: int = typer.Option(1024),
    full: bool = typer.Option(False, "--full"),
    lora_r: int = typer.Option(16),
    lora_alpha: int = typer.Option(32),
    target_modules: str = typer.Option("all-linear"),
    beta: float = typer.Option(0.1, help="DPO beta"),
    seed: int = typer.Option(0),
    split: str = typer.Option("all", help="train only on rows of this split (all = every row)"),
    lake: Optional[str] = typer.Option(None, "--lake", envvar="LAKE_ROOT"),
    no_lake: bool = typer.Option(False, "--no-lake"),
    threads: Optional[int] = typer.Option(None),
    chat_template: Optional[str] = typer.Option(None),
    as_json: bool = typer.Option(False, "--json"),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
):
    console = _console(quiet or as_json)
    method = method.lower()
    if method == "sft":
        from trainers.sft import run_sft

        s = _sft_settings(model=model, data=data, epochs=epochs, output=output, max_steps=max_steps, lr=lr,
                          batch_size=batch_size, max_length=max_length, full=full, lora_r=lora_r,
                          lora_alpha=lora_alpha, target_modules=target_modules, seed=seed, split=split,
                          lake_root=lake, record_in_lake=not no_lake, threads=threads, chat_template=chat_template,
                          progress=not quiet and not as_json, kind="instruct")
        summary = _run(run_sft, s, console)
    elif method == "dpo":
        from trainers.dpo import DPOSettings, run_dpo

        s = DPOSettings(model=model, data=data, epochs=epochs, output=output, max_steps=max_steps, lr=lr,
                        batch_size=batch_size, max_length=max_length, full=full, lora_r=lora_r,
                        lora_alpha=lora_alpha, target_modules=target_modules, beta=beta, seed=seed, split=split,
                        lake_root=lake, record_in_lake=not no_lake, threads=threads, chat_template=chat_template)
        summary = _run(run_dpo, s, console)
    else:
        fail(f"unknown --method {method!r}: use sft or dpo")
    if as_json:
        print_json(summary)
    else:
        _print_train_summary(summary, console)


def llm_finetune_main():
    llm_app()


# ----------------------------------------------------------------------------------------------- hermes_eval
eval_app = typer.Typer(help="Evaluate a model greedily on an environment's held-out tasks.", **_APP_KW)


@eval_app.command(name="hermes_eval")
def hermes_eval(
    task: str = typer.Option("shell", help="debug-python | shell | git | a registered environment name"),
    split: str = typer.Option("test"),
    model: str = typer.Option("tiny"),
    adapter: Optional[str] = typer.Option(None, help="a run folder or its adapter/ (model/ for --full runs)"),
    limit: Optional[int] = typer.Option(None, help="evaluate only the first N tasks"),
    seed: int = typer.Option(0),
    max_new_tokens: int = typer.Option(128),
    max_turns: int = typer.Option(6),
    batch_size: int = typer.Option(64, help="episodes generated together"),
    tasks: Optional[str] = typer.Option(None, "--tasks", help="a tasks .jsonl file instead of the built-in suite"),
    lake: Optional[str] = typer.Option(None, "--lake", envvar="LAKE_ROOT"),
    no_lake: bool = typer.Option(False, "--no-lake"),
    threads: Optional[int] = typer.Option(None),
    chat_template: Optional[str] = typer.Option(None),
    as_json: bool = typer.Option(False, "--json", help="print the summary with per-task results as JSON"),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
):
    from trainers.evaluate import EvalSettings, run_eval

    s = EvalSettings(model=model, task=task, split=split, adapter=adapter, limit=limit, seed=seed,
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
    for r in summary["per_task"][:50]:
        t.add_row(str(r["task_id"]), "yes" if r["success"] else "no", f"{r['reward']:.2f}", str(r["turns"]),
                  f"{r['valid_tool_call_rate']:.2f}")
    console.quiet = False
    console.print(t)
    console.print(f"success rate [bold]{summary['success_rate']:.3f}[/]  mean reward [bold]{summary['mean_reward']:.3f}[/]  "
                  f"valid tool calls {summary['valid_tool_call_rate']:.3f}  episodes {summary['episodes']}  "
                  f"({summary['wall_s']:.1f} s)")


def hermes_eval_main():
    eval_app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(rl_finetune_supervised_main())
