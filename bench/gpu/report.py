"""The report: the machine and versions it ran on, its card name, gpu_check.json and gpu_check.md."""
from __future__ import annotations

import json
import platform
import re
import sys
from pathlib import Path

import torch
import transformers

from gpu.frame import FORBIDDEN, Run, version


def environment(run: Run) -> dict:
    env = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "transformers": transformers.__version__,
           **{k: version(k) for k in ("peft", "accelerate", "trl", "datasets", "tokenizers", "safetensors")},
           "device": str(run.dev), "dtype": str(run.dtype).removeprefix("torch."), "threads": torch.get_num_threads()}
    if run.gpu:
        p = torch.cuda.get_device_properties(run.dev)
        env.update(gpu=p.name, gpu_memory_gib=round(p.total_memory / 2**30, 1), capability=f"{p.major}.{p.minor}")
    else:
        env["cpu"] = platform.processor() or platform.machine()
    return env


def card(env: dict) -> str:
    name = env.get("gpu") or "cpu"
    return re.sub(r"[^a-z0-9]+", "-", name.lower().replace("nvidia", "")).strip("-") or "gpu"


def imports_check() -> dict:
    loaded = sorted({k.split(".")[0] for k in sys.modules if k.split(".")[0] in FORBIDDEN and sys.modules[k]})
    ours = sorted(k for k in sys.modules if k.startswith("trainers.") and sys.modules[k] is not None)
    return {"forbidden_loaded": loaded, "product_modules": ours}


def fmt(x) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


def mem(d: dict) -> str:
    if d.get("peak_memory_mib") is not None:
        return f"{d['peak_memory_mib'] / 1024:.2f} GiB"
    return f"RSS {d['rss_mib'] / 1024:.2f} GiB" if d.get("rss_mib") else "n/a"


def cell(d: dict, label: str) -> str:
    if "skipped" in d:
        return f"{label}: skipped ({d['skipped']})"
    if "error" in d:
        return f"{label}: error ({d['error'][:80]})"
    return f"{label} {fmt(d.get('tokens_per_s'))}"


def markdown(report: dict) -> str:
    env = report["environment"]
    where = env.get("gpu") or f"CPU ({env.get('cpu')}, {env['threads']} threads)"
    lines = [f"# GPU check: {where}, {report['date']}", "",
             f"`python bench/gpu_check.py {' '.join(report['argv'])}`: {report['wall_s']:.0f} s in all. torch "
             f"{env['torch']} (CUDA {env['cuda']}), transformers {env['transformers']}, peft {env['peft']}, trl "
             f"{env['trl'] or 'absent'}{'' if report['trl_baseline'] == 'run' else ' (TRL baseline not run)'}; "
             f"{env['dtype']}. Each ratio is ours / the baseline measured in the same run (higher is better); peak "
             "memory is torch.cuda.max_memory_allocated (on a CPU the resident memory after the measurement).", "",
             "| model | workload | ours | baseline | ratio | peak memory ours / baseline |",
             "|---|---|---|---|---|---|"]
    for m in report["models"]:
        label = f"{m['name']} ({m['weights']} weights)"
        if "error" in m or "skipped" in m:
            lines.append(f"| {label} | all | {m.get('error') or m.get('skipped')} | | | |")
            continue
        s, g, n = m.get("sft", {}), m.get("grpo", {}), m.get("generation", {})
        rows = [
            ("SFT step (LoRA), tokens/s", s, "ours", "trl", "ours", "TRL SFTTrainer"),
            ("GRPO update, tokens/s", g, "shared_prefix", "whole_sequences", "shared prefix", "whole sequences"),
            ("generation, " + (f"{n['workload']['episodes']} episodes x {n['workload']['turns']} turns, " if n else "")
             + "generated tokens/s" + (f" ({n['identical_episodes']} identical)" if n.get("identical_episodes") else ""),
             n, "ours", "plain", "shared prefix + KV across turns", "transformers generate per turn"),
        ]
        for what, d, a, b, la, lb in rows:
            if not d:
                continue
            r = d.get("ratio")
            lines.append(f"| {label} | {what} | {cell(d.get(a, {}), la)} | {cell(d.get(b, {}), lb)} | "
                         f"{f'**{r:.2f}x**' if r else 'n/a'} | {mem(d.get(a, {}))} / {mem(d.get(b, {}))} |")
    lines.append("")
    for m in report["models"]:
        lines.append(f"- {m['name']}: {m['kind']}")
    if report["skipped"]:
        lines += ["", "Skipped: " + "; ".join(report["skipped"]) + "."]
    if report["errors"]:
        lines += ["", "Errors: " + "; ".join(report["errors"]) + "."]
    return "\n".join(lines) + "\n"


def write(report: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "gpu_check.md").write_text(markdown(report))


