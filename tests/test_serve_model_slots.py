"""LoRA swaps in the embedded engine copy new weights into a spare adapter slot instead of building new LoRA modules
(serving/engine.py): a version served from a reused slot answers exactly as the same adapter loaded fresh, the slots
built stay bounded however many versions come, and an adapter of another LoRA shape still loads (into a new slot)."""
from __future__ import annotations

import asyncio

import pytest
import torch

from train_helpers import tiny_dir  # noqa: F401  (the session's tiny model)

from serving.config import ServeModelConfig
from serving.engine import EmbeddedEngine
from trainers.generation.generate import Sampling, generate
from trainers.modeling.models import load_model, load_tokenizer


def _adapter(tiny_dir, folder, seed: int, r: int = 8):
    """A LoRA adapter on the tiny model with random (non-zero) A and B: each seed answers differently."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    model = get_peft_model(load_model(str(tiny_dir), device=torch.device("cpu")),
                           LoraConfig(r=r, lora_alpha=16, target_modules="all-linear", init_lora_weights=False))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.mul_(4.0)  # far enough from the base that two seeds' greedy answers differ
    model.save_pretrained(folder)
    return str(folder)


def _fresh_answer(tiny_dir, adapter: str, prompt: list[int], sampling: Sampling):
    from peft import PeftModel

    model = PeftModel.from_pretrained(load_model(str(tiny_dir), device=torch.device("cpu")), adapter).eval()
    return generate(model, load_tokenizer(str(tiny_dir)), [prompt], [sampling])[0]


@pytest.fixture(scope="module")
def adapters(tiny_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    same = [_adapter(tiny_dir, root / f"a{i}", seed=i) for i in range(1, 6)]
    return same, _adapter(tiny_dir, root / "wide", seed=9, r=16)


def test_a_swap_into_a_spare_slot_answers_as_the_adapter_loaded_fresh(tiny_dir, adapters):
    same, wide = adapters
    engine = EmbeddedEngine(ServeModelConfig(model="tiny", threads=1, keep_versions=2))
    tok = engine.tokenizer
    prompt = tok.apply_chat_template([{"role": "user", "content": "List the files."}], add_generation_prompt=True,
                                     tokenize=True, return_dict=False)
    sampling = Sampling(max_new_tokens=12)

    async def ask(version):
        return await engine.generate(prompt, sampling, version)

    engine.load_initial(None, ("1", same[0]))
    engine.start()
    try:
        answers = {}
        for step, path in enumerate(same[1:], start=2):
            v = engine.add_version(str(step), path)
            answers[step] = asyncio.run(ask(v))
        # slot_1 (step 1) and its spare: every later version is a copy into a slot freed by --keep-versions 2
        assert engine._slots == 3, engine._slots
        assert len(engine._peft.peft_config) == 3
        for step, path in enumerate(same[1:], start=2):
            fresh = _fresh_answer(tiny_dir, path, prompt, sampling)
            assert answers[step].token_ids == fresh.token_ids, step
            assert answers[step].logprobs == pytest.approx(fresh.logprobs, abs=1e-5)
        assert len({tuple(a.token_ids) for a in answers.values()}) > 1  # the versions do differ
        # another LoRA shape cannot take a slot's weights: it gets a slot of its own, and answers as loaded fresh
        v = engine.add_version("6", wide)
        assert engine._slots == 4
        got = asyncio.run(ask(v))
        fresh = _fresh_answer(tiny_dir, wide, prompt, sampling)
        assert got.token_ids == fresh.token_ids
        assert [x.name for x in engine.versions()] == ["tiny@5", "tiny@6"]
    finally:
        engine.close()
