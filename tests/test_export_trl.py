"""Exports train with TRL's SFTTrainer as they are (no conversion): the sft view (multi-turn tool-call chats,
assistant-only loss) and the instruction view. Slow: imports trl and torch."""
from __future__ import annotations

import pytest

from tests.views_helpers import FIXTURE, ingest_skills_folder, new_lake, seeded_trajectories, trajectory
from views.export import export_view


def _train(tmp_path, data_dir, name):
    import datasets
    import torch
    from trl import SFTConfig, SFTTrainer

    from trainers.runtime.device import cpu_defaults
    from trainers.modeling.tiny import build_tiny_model, build_tokenizer

    torch.set_num_threads(1)
    ds = datasets.load_dataset("parquet", data_dir=str(data_dir))["train"]
    texts = [m["content"] or "" for row in ds for m in row["messages"]]
    tok = build_tokenizer(texts + ['{"name": "bash", "arguments": {"cmd": "run"}}'], vocab_size=400)
    args = SFTConfig(output_dir=str(tmp_path / f"run-{name}"), max_steps=2, per_device_train_batch_size=2,
                     max_length=256, assistant_only_loss=True, logging_steps=1, save_strategy="no",
                     **cpu_defaults())
    trainer = SFTTrainer(model=build_tiny_model(tok), args=args, train_dataset=ds, processing_class=tok)
    first = trainer.train_dataset[0]
    trained = sum(1 for x in first["labels"] if x != -100)
    assert 0 < trained < len(first["labels"])  # loss on assistant tokens only
    out = trainer.train()
    assert out.global_step == 2 and out.training_loss > 0


@pytest.mark.slow
def test_sft_and_instruction_exports_train_with_trl(tmp_path):
    lk = new_lake(tmp_path / "lake")
    lk.append("trajectories", seeded_trajectories(60, seed=1, n_tasks=12))
    ingest_skills_folder(lk, FIXTURE / "skills")
    export_view(lk, "sft", tmp_path / "sft")
    export_view(lk, "instruction", tmp_path / "instruction")
    _train(tmp_path, tmp_path / "sft", "sft")
    _train(tmp_path, tmp_path / "instruction", "instruction")


@pytest.mark.slow
def test_dpo_export_is_trl_preference_data(tmp_path):
    import datasets
    from trl.data_utils import apply_chat_template, is_conversational

    from trainers.modeling.tiny import build_tokenizer

    lk = new_lake(tmp_path / "lake")
    lk.append("trajectories", [trajectory(i, f"task-{i % 3}", float(i % 2), i % 2 == 1) for i in range(12)])
    export_view(lk, "dpo", tmp_path / "dpo")
    ds = datasets.load_dataset("parquet", data_dir=str(tmp_path / "dpo"))
    row = next(iter(ds.values()))[0]
    assert is_conversational(row)
    tok = build_tokenizer(["Solve task solved gave up on run bash"], vocab_size=300)
    out = apply_chat_template({k: row[k] for k in ("prompt", "chosen", "rejected")}, tok)
    assert out["prompt"].endswith("<|im_start|>assistant\n")
    assert "solved" in out["chosen"] and "gave up" in out["rejected"] and "<tool_call>" in out["chosen"]
