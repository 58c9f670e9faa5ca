"""One run protocol: SFT and DPO runs write the same folder layout, the same summary fields and a runs event whose
kind, run id, metrics and paths are the summary's."""
from __future__ import annotations

import json

import pytest

import train_helpers as th
from train_helpers import tiny_dir  # noqa: F401  (session fixture)

PROTOCOL_FILES = {"config.json", "manifest.json", "train_log.jsonl", "loss.png", "summary.json"}
SUMMARY_FIELDS = {"run_id", "kind", "command", "method", "status", "model", "model_path", "adapter_path", "run_dir",
                  "full", "data", "loss_plot", "steps", "warmup_steps", "first_loss", "final_loss", "train_s", "lr",
                  "trainable_params", "conversations", "warnings", "lake_version"}


def _preference_rows(n: int) -> list[dict]:
    rows = []
    for i, chat in enumerate(th.tool_chats(n, seed=7)):
        good = chat["messages"][2]
        bad = {"role": "assistant", "content": f"I will not do task {i}."}
        rows.append({"prompt": chat["messages"][:2], "chosen": [good], "rejected": [bad], "tools": chat["tools"],
                     "split": "train"})
    return rows


def test_sft_and_dpo_write_the_same_protocol(tiny_dir, tmp_path):
    from lake import Lake
    from trainers.sft.config import InstructConfig, SFTConfig
    from trainers.sft.dpo import run_dpo
    from trainers.sft.sft import run_sft

    lake = Lake.init(tmp_path / "lake")
    common = dict(model=str(tiny_dir), lake_root=str(lake.root), progress=False, max_steps=3, batch_size=4, full=False)
    sft = run_sft(SFTConfig(data=str(th.write_jsonl(tmp_path / "chats.jsonl", th.tool_chats(8))),
                            output=str(tmp_path / "sft"), **common))
    dpo = run_dpo(InstructConfig(method="dpo", data=str(th.write_jsonl(tmp_path / "prefs.jsonl", _preference_rows(8))),
                                 output=str(tmp_path / "dpo"), **common))
    events = {r["run_id"]: r for r in Lake(lake.root).snapshot().arrow(
        "SELECT run_id, kind, status, adapter_path, metrics, metadata FROM runs").to_pylist()}
    for name, summary, method in (("sft", sft, "sft"), ("dpo", dpo, "dpo")):
        folder = tmp_path / name
        assert PROTOCOL_FILES <= {p.name for p in folder.iterdir()}, name
        assert (folder / "adapter" / "adapter_config.json").exists() and (folder / "adapter" / "tokenizer_config.json").exists()
        assert SUMMARY_FIELDS <= set(summary), (name, SUMMARY_FIELDS - set(summary))
        assert json.loads((folder / "summary.json").read_text()) == json.loads(json.dumps(summary, default=str))
        assert (summary["kind"], summary["method"], summary["steps"]) == ("train", method, 3)
        ev = events[summary["run_id"]]
        meta, metrics = json.loads(ev["metadata"]), json.loads(ev["metrics"])
        assert (ev["kind"], ev["status"], meta["method"], meta["command"]) == ("train", "completed", method, summary["command"])
        assert ev["adapter_path"] == str((folder / "adapter").resolve())
        assert metrics["steps"] == summary["steps"] and metrics["final_loss"] == summary["final_loss"]
        config = json.loads((folder / "config.json").read_text())
        assert (config["full"], config["method"], config["model_path"]) == (False, method, str(tiny_dir))
        log = [json.loads(l) for l in (folder / "train_log.jsonl").read_text().splitlines()]
        assert log[-1]["summary"] and [r["step"] for r in log if "step" in r][-1] == 3  # the last step is logged
    assert sft["command"] == "rl_finetune_supervised" and dpo["command"] == "llm_finetune"


@pytest.mark.parametrize("checkpointing", [False, True])
def test_dpo_hands_gradient_checkpointing_to_trl(tiny_dir, tmp_path, monkeypatch, checkpointing):
    """llm_finetune --method dpo --gradient-checkpointing: TRL's trainer turns it on for the model (and leaves it
    off without the option, our default on a CPU)."""
    from transformers import PreTrainedModel

    from trainers.sft.config import InstructConfig
    from trainers.sft.dpo import run_dpo

    enabled, original = [], PreTrainedModel.activation_checkpointing_enable

    def spy(self, *args, **kwargs):
        enabled.append(type(self).__name__)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(PreTrainedModel, "activation_checkpointing_enable", spy)
    summary = run_dpo(InstructConfig(method="dpo", model=str(tiny_dir), full=False, max_steps=2, batch_size=4,
                                     data=str(th.write_jsonl(tmp_path / "prefs.jsonl", _preference_rows(8))),
                                     gradient_checkpointing=checkpointing, output=str(tmp_path / "dpo"),
                                     record_in_lake=False, progress=False))
    assert summary["steps"] == 2 and bool(enabled) is checkpointing
