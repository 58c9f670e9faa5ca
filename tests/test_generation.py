"""trainers/generation/generate.py, the one generation path: greedy output equals transformers' own `generate`, the exact
savings (shared prefix once, KV kept across turns) change no output, log-probs are the model's, sampling is seeded,
per-row settings and stop reasons, and bad input is a one-line error."""
from __future__ import annotations

from dataclasses import replace

import pytest

import train_helpers as th
from train_helpers import tiny_dir  # noqa: F401  (session fixture)

ENV = "bash_exec_env"


@pytest.fixture(scope="module")
def tiny(tiny_dir):  # noqa: F811
    import torch

    from trainers.modeling.models import load_model, load_tokenizer

    th.set_threads()
    torch.manual_seed(0)
    return load_model(str(tiny_dir)).eval(), load_tokenizer(str(tiny_dir))


def _prompts(tok, n: int, offset: int = 0) -> list[list[int]]:
    """The first prompts of n bash_exec_env test tasks as hermes_eval builds them (shared system prompt + tools)."""
    import envs

    from trainers.generation.episodes import Episode

    out = []
    for i, t in enumerate(envs.load_tasks(ENV, "test")[offset : offset + n]):
        env = envs.make(ENV, split="test")
        out.append(Episode(env, t.task_id, i, tok).ids)
        env.close()
    return out


def test_greedy_equals_transformers_generate_with_and_without_the_shared_prefix(tiny):
    from trainers.generation.generate import Sampling, generate, reference_generate

    model, tok = tiny
    prompts = _prompts(tok, 6)
    prompts[1] = prompts[1][:-7]  # rows of different lengths: left padding in play
    ref = reference_generate(model, tok, prompts, 24)
    plain = generate(model, tok, prompts, Sampling(max_new_tokens=24), share_prefix=False)
    shared = generate(model, tok, prompts, Sampling(max_new_tokens=24))
    assert [g.token_ids for g in plain] == ref
    assert [g.token_ids for g in shared] == ref
    assert all(len(g.logprobs) == len(g.token_ids) for g in shared)
    for g in shared:  # "length" exactly when no stop token ended it
        eos = tok.convert_tokens_to_ids("<|im_end|>")
        assert g.finish_reason == ("stop" if g.token_ids[-1] == eos else "length")
        assert g.finish_reason == "stop" or len(g.token_ids) == 24


def test_kv_kept_across_turns_gives_the_outputs_of_a_fresh_prompt_pass(tiny):
    """Turn 2 of each row = its turn-1 prompt + reply + a tool answer: with the TurnCache only the new tokens are
    computed, and the reply equals transformers' generate over the whole conversation."""
    from trainers.generation.generate import Sampling, TurnCache, generate, reference_generate

    model, tok = tiny
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    prompts = _prompts(tok, 4)
    cache, keys = TurnCache(), ["a", "b", "c", "d"]
    first = generate(model, tok, prompts, Sampling(max_new_tokens=12), cache=cache, keys=keys)
    assert len(cache) == 4 and cache.rows["a"].ids == prompts[0] + first[0].token_ids[:-1]
    answer = tok.encode("\n<|im_start|>tool\n<tool_response>\nnotes.txt\n</tool_response><|im_end|>\n"
                        "<|im_start|>assistant\n", add_special_tokens=False)
    second = [p + g.token_ids + ([] if g.token_ids[-1] == eos else [eos]) + answer[i:] for i, (p, g)
              in enumerate(zip(prompts, first))]  # answers of different lengths
    again = generate(model, tok, second, Sampling(max_new_tokens=12), cache=cache, keys=keys)
    assert [g.token_ids for g in again] == reference_generate(model, tok, second, 12)
    # rows in another batch composition (b alone, then a diverging prompt for c) still give the fresh result
    cache.forget("a")
    assert "a" not in cache.rows
    third = [second[1] + again[1].token_ids, second[2][:-3]]
    out = generate(model, tok, third, Sampling(max_new_tokens=8), cache=cache, keys=["b", "c"])
    assert [g.token_ids for g in out] == reference_generate(model, tok, third, 8)


def test_logprobs_are_the_model_s_own_and_top_logprobs_rank_them(tiny):
    import torch

    from trainers.generation.generate import Sampling, generate

    model, tok = tiny
    prompt = _prompts(tok, 1)[0]
    g = generate(model, tok, [prompt], Sampling(max_new_tokens=5, top_logprobs=3))[0]
    seq = torch.tensor([prompt + g.token_ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=seq).logits[0, len(prompt) - 1 : -1].float(), -1)
    want = [float(logp[i, t]) for i, t in enumerate(g.token_ids)]
    assert g.logprobs == pytest.approx(want, abs=1e-4)
    assert all(len(top) == 3 and top[0][0] == t and top[0][1] >= top[1][1] >= top[2][1]  # greedy: the top one
               for top, t in zip(g.top_logprobs, g.token_ids))


def test_sampling_is_seeded_per_row_settings_and_stop_tokens_apply(tiny):
    import torch

    from trainers.generation.generate import Sampling, generate

    model, tok = tiny
    prompts = _prompts(tok, 3)
    hot = Sampling(max_new_tokens=10, temperature=1.0)
    runs = [generate(model, tok, prompts, hot, generator=torch.Generator().manual_seed(7)) for _ in range(2)]
    assert [g.token_ids for g in runs[0]] == [g.token_ids for g in runs[1]]
    other = generate(model, tok, prompts, hot, generator=torch.Generator().manual_seed(8))
    assert [g.token_ids for g in other] != [g.token_ids for g in runs[0]]
    seen: list[tuple[int, int]] = []
    greedy = generate(model, tok, prompts[:1], Sampling(max_new_tokens=10))[0].token_ids
    stop_at = greedy[2]
    rows = generate(model, tok, prompts[:2], [Sampling(max_new_tokens=10, stop_token_ids=(stop_at,)),
                                              Sampling(max_new_tokens=2)],
                    on_token=lambda row, tid, lp: seen.append((row, tid)))
    cut = greedy.index(stop_at) + 1
    assert rows[0].token_ids == greedy[:cut] and rows[0].finish_reason == "stop"
    assert len(rows[1].token_ids) == 2 and rows[1].finish_reason == "length"
    assert sorted(seen) == sorted([(0, t) for t in rows[0].token_ids] + [(1, t) for t in rows[1].token_ids])


def test_bad_input_is_a_one_line_error(tiny):
    from trainers.runtime.errors import TrainerInputError
    from trainers.generation.generate import Sampling, TurnCache, generate

    model, tok = tiny
    for kw, msg in [({"max_new_tokens": 0}, "max_new_tokens"), ({"temperature": -1.0}, "temperature"),
                    ({"top_p": 0.0}, "top_p"), ({"top_logprobs": -2}, "top_logprobs")]:
        with pytest.raises(TrainerInputError, match=msg):
            Sampling(**kw)
    with pytest.raises(TrainerInputError, match="one per prompt"):
        generate(model, tok, [[1, 2], [3, 4]], [Sampling()] * 3)
    with pytest.raises(TrainerInputError, match="empty prompt"):
        generate(model, tok, [[]], Sampling())
    with pytest.raises(TrainerInputError, match="one key per prompt"):
        generate(model, tok, [[1, 2]], Sampling(), cache=TurnCache())
    assert generate(model, tok, [], Sampling()) == []


def test_eval_episodes_are_the_same_with_and_without_the_exact_levers(tiny_dir):  # noqa: F811
    """hermes_eval's greedy episodes (batches of mixed lengths, several turns) with the KV kept across turns and the
    shared prefix once are the episodes of the plain path (transformers' generate on the whole conversation every
    turn). The tiny model never calls a tool, so at turn 1 a tool call is appended to its reply (the same on both
    paths): the episodes go on, and turn 2 reuses the KV of turn 1's prompt and reply."""
    import envs

    from trainers.generation.generate import END_OF_TURN
    from trainers.eval.config import EvalSettings
    from trainers.generation.episodes import Episode, play
    from trainers.generation.generate import Generation, Sampling, Turns, reference_generate
    from trainers.modeling.models import load_model, load_tokenizer

    tok = load_tokenizer(str(tiny_dir))
    model = load_model(str(tiny_dir)).eval()
    eos = tok.convert_tokens_to_ids(END_OF_TURN)
    call = tok.encode(envs.format_tool_call("run", {"command": "ls"}), add_special_tokens=False)
    s = EvalSettings(max_new_tokens=16, max_turns=3, batch_size=4, record_in_lake=False, progress=False)

    def with_a_call(gens, episodes):
        out = []
        for g, e in zip(gens, episodes):
            reply = g.token_ids[:-1] if g.token_ids[-1] == eos else g.token_ids
            out.append(Generation(reply + call + [eos], g.logprobs) if e.turns == 0 else g)
        return out

    def episodes():
        return [Episode(envs.make(ENV, max_steps=3, split="test"), t.task_id, i, tok)
                for i, t in enumerate(envs.load_tasks(ENV, "test")[:6])]

    fast = Turns(model, tok, Sampling(max_new_tokens=16))
    def plain(prompts, eps):  # the reference path says why a row ended, as Turns does: its stop token or the limit
        return [replace(Generation.scripted(x), finish_reason="stop" if x and x[-1] == eos else "length")
                for x in reference_generate(model, tok, prompts, 16)]

    results = []
    for gen, forget in ((fast, fast.forget), (plain, None)):
        eps = episodes()
        try:
            play(eps, lambda prompts, chunk: with_a_call(gen(prompts, chunk), chunk), tok, s.batch_size, s.max_context,
                 forget=forget)
        finally:
            for e in eps:
                e.env.close()
        results.append(([e.result() for e in eps], [e.ids for e in eps]))
    assert results[0] == results[1]
    assert all(r["turns"] >= 2 for r in results[0][0])
    assert len(fast.cache) == 0  # every ended episode's KV was freed
