"""bench/gpu_check.py (issue 40) at toy sizes on the CPU, as a subprocess with one thread: every measurement runs
with positive throughput and its ratio, the report names the models it built, and the JSON and the Markdown table
land in the folder given. The GPU machine has no deltalake, duckdb or gymnasium, so the run here makes lake/,
views/, ingest/, envs/, deltalake and duckdb unimportable, and a separate process imports the script and finds none
of them loaded."""
from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "gpu_check.py"
OURS = ("lake", "views", "ingest", "envs")
BARRED = OURS + ("deltalake", "duckdb")  # what the GPU image lacks: any import of them fails in the run below
MODELS = ("smollm2-135m", "qwen2.5-1.5b")


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "LACHESIS_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
            "PYTHONPATH": str(ROOT)}


def _run_barred(args: list[str], timeout: int) -> subprocess.CompletedProcess:
    """The script as `python bench/gpu_check.py ARGS` with BARRED unimportable (None in sys.modules)."""
    code = (f"import runpy, sys\nfor n in {BARRED!r}: sys.modules[n] = None\n"
            f"sys.argv = [{str(SCRIPT)!r}] + {args!r}\nrunpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=timeout)


def test_the_quick_cpu_run_measures_everything_against_its_baseline(tmp_path):
    res = _run_barred(["--device", "cpu", "--quick", "--threads", "1", "--out", str(tmp_path)], timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    trl = importlib.util.find_spec("trl") is not None
    assert report["quick"] and not report["errors"], report["errors"]
    assert report["environment"]["device"] == "cpu"
    assert [m["name"] for m in report["models"]] == list(MODELS)
    for m in report["models"]:
        assert m["weights"] == "random" and m["kind"].startswith("random weights, ")
        assert ("SmolLM2-135M" if m["name"] == MODELS[0] else "Qwen2.5-1.5B") in m["kind"]
        sft, grpo, gen = m["sft"], m["grpo"], m["generation"]
        assert sft["ours"]["tokens_per_s"] > 0 and sft["ours"]["rss_mib"] > 0
        if trl:
            assert sft["trl"]["tokens_per_s"] > 0 and sft["ratio"] > 0
            assert sft["trl"]["batches"] == "the same batches in the same order"
            assert sft["trl"]["tokens"] == sft["ours"]["tokens"]  # the same rows in the timed steps
            assert abs(sft["trl"]["loss_step1"] - sft["ours"]["loss_step1"]) < 1e-3  # the same first batch, same loss
        else:
            assert "trl not importable" in sft["trl"]["skipped"]
        assert grpo["shared_prefix"]["tokens_per_s"] > 0 and grpo["whole_sequences"]["tokens_per_s"] > 0
        assert grpo["shared_prefix"]["tokens"] == grpo["whole_sequences"]["tokens"]
        assert grpo["shared_prefix"]["shared_prefix_tokens"] > 0 == grpo["whole_sequences"]["shared_prefix_tokens"]
        assert grpo["ratio"] > 0
        assert gen["ours"]["tokens_per_s"] > 0 and gen["plain"]["tokens_per_s"] > 0 and gen["ratio"] > 0
        assert gen["identical_episodes"] == "4/4"  # float32 greedy: ours is token for token transformers' generate
        assert set(report["ratios"][m["name"]]) == {"sft_ours_vs_trl", "grpo_shared_prefix_vs_whole",
                                                    "generation_ours_vs_plain"}
    assert report["imports"]["forbidden_loaded"] == []
    assert {"trainers.sft.loop", "trainers.rl.grpo", "trainers.generation.generate"} <= set(
        report["imports"]["product_modules"])
    md = (tmp_path / "gpu_check.md").read_text()
    assert "| model | workload | ours | baseline | ratio | peak memory ours / baseline |" in md
    for name in MODELS:
        rows = [line for line in md.splitlines() if line.startswith(f"| {name} (random weights) |")]
        assert [r.split(" | ")[1].split(",")[0] for r in rows] == ["SFT step (LoRA)", "GRPO update", "generation"]
        assert all("x** |" in r for r in rows) == trl
    assert "random weights, SmolLM2-135M's architecture toy-scaled" in md


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """One process: `import gpu_check` (what is loaded then), then its main() with a deadline already passed."""
    out = tmp_path_factory.mktemp("deadline")
    code = ("import json, sys\nsys.path.insert(0, 'bench')\nimport gpu_check\n"
            f"loaded = sorted({{k.split('.')[0] for k in sys.modules}} & set({BARRED!r}))\n"
            "ours = sorted(k for k in sys.modules if k.startswith('trainers.'))\n"
            "old = [gpu_check.too_old(v) for v in ('5.17.0', '5.22.9', '5.23.0', '5.24.0', '6.0.0.dev0')]\n"
            f"rc = gpu_check.main(['--device', 'cpu', '--quick', '--no-trl', '--deadline', '0', '--out', {str(out)!r}])\n"
            "print(json.dumps({'loaded': loaded, 'ours': ours, 'old': old, 'rc': rc}))\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(), capture_output=True, text=True,
                         timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1]), out


def test_the_script_imports_nothing_of_the_lake_ingest_views_or_envs(imported):
    got, _ = imported
    assert got["loaded"] == []
    assert {"trainers.sft.loop", "trainers.sft.config", "trainers.rl.grpo", "trainers.generation.generate"} <= set(
        got["ours"])
    assert got["old"] == [True, True, False, False, False]  # the trainers need transformers >= 5.23


def test_a_passed_deadline_skips_the_rest_and_says_so(imported):
    got, out = imported
    assert got["rc"] == 0
    report = json.loads((out / "gpu_check.json").read_text())
    assert [m.get("skipped") for m in report["models"]] == ["deadline", "deadline"]
    assert len(report["skipped"]) == 2 and "deadline" in report["skipped"][0]
    assert "Skipped: smollm2-135m: the 0 s deadline had passed" in (out / "gpu_check.md").read_text()


def test_the_import_contract_covers_every_module_the_script_imports():
    """pyproject.toml's model-code-without-lake contract (checked by lint-imports, tests/test_layering.py) lists each
    trainers module bench/gpu_check.py and its parts (bench/gpu/*.py) import, and forbids all four packages."""
    used = {n.module for path in (SCRIPT, *sorted((ROOT / "bench" / "gpu").glob("*.py")))
            for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("trainers")}
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    contract = next(c for c in contracts if c["id"] == "model-code-without-lake")
    assert used and used <= set(contract["source_modules"]), used - set(contract["source_modules"])
    assert set(OURS) <= set(contract["forbidden_modules"])
