"""bench/harness.py's resume key: a command is reused only when its argv and the contents of the files it reads its
setting from (--config, --spec) are those of the finished run (a transfer arm's lr lives in its project file, so
the argv alone is the same at any lr)."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _harness():
    sys.path.insert(0, str(ROOT / "bench"))
    import harness  # noqa: E402  (bench/harness.py)

    return harness


def test_the_settings_digest_follows_the_config_file_contents(tmp_path):
    h = _harness()
    cfg = tmp_path / "transfer-seed0.toml"
    argv = ["rl_train_transfer", "--method", "sft", "--config", str(cfg), "--max_steps", "3"]
    cfg.write_text("learning_rate = 0.002\n")
    at_2e3 = h.settings_digest(argv)
    cfg.write_text("learning_rate = 0.001\n")
    at_1e3 = h.settings_digest(argv)
    assert at_2e3.startswith("  # settings sha256:") and at_2e3 != at_1e3
    assert h.settings_digest(argv) == at_1e3  # the same contents: the same key, so resume reuses the run
    spec = tmp_path / "spec.json"
    spec.write_text('{"freeze_spec": "0-8"}')
    with_spec = [*argv, "--spec", str(spec)]
    before = h.settings_digest(with_spec)
    spec.write_text('{"freeze_spec": ""}')
    assert h.settings_digest(with_spec) != before


def test_a_command_without_setting_files_keys_on_its_argv_alone():
    h = _harness()
    assert h.settings_digest(["hermes_eval", "--model", "tiny", "--limit", "4"]) == ""
    assert h.settings_digest(["rl_train_online", "--config"]) == ""  # an option with no value names no file
