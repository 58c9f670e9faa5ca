"""Console scripts of the trainers wing: rl_finetune_supervised, llm_finetune, hermes_eval.

Each command's options are fields of its config dataclass (SFTConfig, InstructConfig, EvalSettings): default
and help come from there (`lachesis.console.option`), and the dataclass validates them, so a bad value (`--grad-accum 0`)
is one line on stderr and exit 2, like every other bad input (empty dataset, no messages, a model without
weights, a tokenizer without chat template). The heavy imports (torch, transformers, peft, trl) happen inside
the command bodies.
"""
from __future__ import annotations

from typing import Callable

from lachesis.console import config_app, new_console, print_json, run, table
from trainers.sft.config import InstructConfig, SFTConfig, TrainConfig
from trainers.eval.config import EvalSettings


def _console(quiet: bool):
    return new_console(stderr=True, quiet=quiet)


# ----------------------------------------------------------------------------------------------- the commands
# (config field, flags): each command's options, in --help order
TRAIN_OPTIONS = [
    ("model", "--model"), ("data", "--data"), ("epochs", "--epochs"), ("max_steps", "--max-steps"),
    ("output", "--output"), ("learning_rate", "--learning-rate"), ("batch_size", "--batch-size"),
    ("grad_accum", "--grad-accum"), ("gradient_checkpointing", "--gradient-checkpointing"), ("max_length", "--max-length"),
    ("full", "--full/--lora"), ("lora_rank", "--lora-rank"), ("lora_alpha", "--lora-alpha"),
    ("lora_dropout", "--lora-dropout"), ("target_modules", "--target-modules"), ("warmup_steps", "--warmup-steps"),
    ("seed", "--seed"), ("split", "--split"), ("lake_root", "--lake"), ("record_in_lake", "--record-in-lake/--no-lake"),
    ("threads", "--threads"), ("device", "--device"), ("chat_template", "--chat-template"), ("plot", "--plot/--no-plot"),
    ("report_to", "--report-to"), ("log_every", "--log-every"),
]
# the spellings SFT's options had before they took online RL's and lachesis.toml's (learning_rate, lora_rank)
RENAMED = {"--lr": "learning_rate", "--lora-r": "lora_rank"}
INSTRUCT_OPTIONS = [("method", "--method"), *TRAIN_OPTIONS, ("beta", "--beta")]
EVAL_OPTIONS = [
    ("task", "--task"), ("split", "--split"), ("model", "--model"), ("adapter", "--adapter"), ("limit", "--limit"),
    ("offset", "--offset"), ("seed", "--seed"), ("max_new_tokens", "--max-new-tokens"), ("max_turns", "--max-turns"),
    ("stop_repetition", "--stop-repetition"), ("max_context", "--max-context"), ("batch_size", "--batch-size"),
    ("tasks_file", "--tasks"),
    ("lake_root", "--lake"), ("record_in_lake", "--record-in-lake/--no-lake"), ("threads", "--threads"),
    ("device", "--device"), ("chat_template", "--chat-template"), ("bf16", "--bf16"),
    ("reuse_kv", "--reuse-kv/--no-reuse-kv"), ("ray", "--ray"), ("workers", "--workers"),
]


def _train(config: TrainConfig, console, as_json: bool) -> None:
    from trainers.sft.distributed import is_main_process

    summary = _trainer_for(config)(config, console)
    if not is_main_process():  # under torchrun / accelerate launch, one summary: the main process's
        return
    if as_json:
        print_json(summary)
        return
    rows = [[k, f"{v:.4f}" if isinstance(v, float) else str(v)] for k in (
        "model", "method", "full", "data", "conversations", "steps", "warmup_steps", "first_loss", "final_loss",
        "tokens_per_s", "train_s", "adapter_path", "loss_plot", "run_dir") for v in [summary.get(k)]]
    rows += [["warning", w] for w in summary["warnings"]]
    console.quiet = False
    console.print(table(["key", "value"], rows, title=f"run {summary['run_id']}", show_header=False))


def _trainer_for(config: TrainConfig) -> Callable:
    """run_dpo for `llm_finetune --method dpo`, else run_sft."""
    if isinstance(config, InstructConfig) and config.method == "dpo":
        from trainers.sft.dpo import run_dpo

        return run_dpo
    from trainers.sft.sft import run_sft

    return run_sft


def _evaluate(config: EvalSettings, console, as_json: bool) -> None:
    from trainers.eval.evaluate import run_eval

    summary = run_eval(config, console)
    if as_json:
        print_json(summary)
        return
    title = (f"{summary['env']} / {summary['split']}: {summary['model']}"
             + (f" + {summary['adapter']}" if summary.get("adapter") else ""))
    # every task: a table that stops early hides failures
    rows = [[r["task_id"], "yes" if r["success"] else "no", f"{r['reward']:.2f}", r["turns"],
             f"{r['valid_tool_call_rate']:.2f}"] for r in summary["per_task"]]
    console.quiet = False
    console.print(table(["task_id", "success", "reward", "turns", "valid calls"], rows, title=title))
    console.print(f"success rate [bold]{summary['success_rate']:.3f}[/]  mean reward [bold]{summary['mean_reward']:.3f}[/]  "
                  f"valid tool calls {summary['valid_tool_call_rate']:.3f}  episodes {summary['episodes']}  "
                  f"({summary['wall_s']:.1f} s)", soft_wrap=True)  # one line, also in a log file


def _app(name: str, help_text: str, config_cls: type, options: list[tuple[str, str]], body: Callable):
    """The command of `config_cls`'s options: builds the config (a bad value is one line, exit 2) and calls
    `body(config, console, as_json)`."""

    def build_and_run(values: dict, as_json: bool, quiet: bool) -> None:
        body(config_cls(**values, progress=not quiet and not as_json), _console(quiet or as_json), as_json)

    renamed = {old: name for old, name in RENAMED.items() if any(o[0] == name for o in options)}
    return config_app(name, help_text, config_cls, options, build_and_run, renamed=renamed)


sft_app = _app("rl_finetune_supervised", "Supervised fine-tuning on agent trajectories (assistant-only loss).",
               SFTConfig, TRAIN_OPTIONS, _train)
llm_app = _app("llm_finetune", "Instruction tuning on an instruction dataset: --method sft (messages or "
               "prompt/completion) or dpo (prompt/chosen/rejected).", InstructConfig, INSTRUCT_OPTIONS, _train)
eval_app = _app("hermes_eval", "Evaluate a model (and a run's adapter) greedily on an environment's held-out tasks.",
                EvalSettings, EVAL_OPTIONS, _evaluate)


def rl_finetune_supervised_main():
    run(sft_app)


def llm_finetune_main():
    run(llm_app)


def hermes_eval_main():
    run(eval_app)


if __name__ == "__main__":  # `python -m lachesis.train_cli`: what `torchrun -m` / `accelerate launch -m` start
    rl_finetune_supervised_main()
