"""The GRPO update (trainers/rl/grpo.py): the shared prompt prefix computed once gives the gradients of whole sequences
(within 1e-5 relative), the truncated importance-sampling weight is 1 for rollouts of the trainer's own float32
model and min(ratio, cap) otherwise, and the bf16 rollout copy's log-probs stay close to float32."""
from __future__ import annotations

import pytest

import train_helpers as th
from train_helpers import tiny_dir  # noqa: F401  (session fixture)

ENV = "bash_exec_env"


@pytest.fixture(scope="module")
def played(tiny_dir):  # noqa: F811
    """A full fine-tuning tiny policy and 2 tasks x 3 sampled rollouts of it (multi-turn, log-probs recorded)."""
    import envs
    import torch

    from trainers.eval.config import EvalSettings
    from trainers.generation.episodes import play
    from trainers.generation.generate import Generation, Sampling, Turns
    from trainers.rl.grpo import group_advantages
    from trainers.rl.rollout import Rollout
    from trainers.modeling.models import load_model, load_tokenizer

    th.set_threads()
    torch.manual_seed(0)
    tok = load_tokenizer(str(tiny_dir))
    model = load_model(str(tiny_dir))
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    call = tok.encode(envs.format_tool_call("run", {"command": "ls"}), add_special_tokens=False)
    tasks = envs.load_tasks(ENV, "train")[:2]
    eps = [Rollout(envs.make(ENV, max_steps=2, split="train"), t.task_id, 10 * b + g, tok, group=b)
           for b, t in enumerate(tasks) for g in range(3)]
    gen = Turns(model.eval(), tok, Sampling(max_new_tokens=12, temperature=1.0),
                generator=torch.Generator().manual_seed(3))

    def with_a_call(prompts, chunk):  # a tool call after turn 1's sampled tokens: two sampled spans per episode
        gens = gen(prompts, chunk)
        return [Generation(g.token_ids + call + [eos], g.logprobs + [float("nan")] * (len(call) + 1))
                if e.turns == 0 else g for g, e in zip(gens, chunk)]

    try:
        play(eps, with_a_call, tok, 8, EvalSettings().max_context, forget=gen.forget)
    finally:
        for e in eps:
            e.env.close()
    # returns differ within each group (the env's rewards are all 0 for this untrained policy): set a spread
    for e, a in zip(eps, group_advantages([float(i % 3) for i in range(len(eps))], [e.group for e in eps])):
        e.advantage = a
    return model, tok, eps


def _grads(model, eps, pad, **kw):
    from trainers.rl.grpo import backward_policy_loss

    model.train()
    model.zero_grad(set_to_none=True)
    stats = backward_policy_loss(model, eps, pad, micro_batch=3, **kw)
    grads = [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    return stats, grads


def _rel(a, b) -> float:
    import torch

    num = torch.sqrt(sum(((x - y) ** 2).sum() for x, y in zip(a, b)))
    return float(num / torch.sqrt(sum((y ** 2).sum() for y in b)))


def test_the_shared_prefix_gives_the_gradients_of_whole_sequences(played):
    model, tok, eps = played
    assert all(e.generated_tokens > 0 for e in eps) and all(len(e.spans) == 2 for e in eps)
    shared, g_shared = _grads(model, eps, tok.pad_token_id, share_prefix=True)
    whole, g_whole = _grads(model, eps, tok.pad_token_id, share_prefix=False)
    assert shared.shared_tokens > 100 and whole.shared_tokens == 0  # the prefix really ran once per micro-batch
    # the loss is a sum of advantage-weighted terms whose group-normalised advantages cancel (here ~0.008 from terms
    # of order 1), so its relative error is float32's rounding magnified: 1.4e-5 on an Intel Xeon (1.1e-7 absolute)
    # where the gradients agree to 4.5e-7. An absolute bound on the loss; the 1e-5 holds for the gradients.
    assert shared.loss == pytest.approx(whole.loss, abs=1e-6) and shared.tokens == whole.tokens
    assert len(g_shared) == len(g_whole) and _rel(g_shared, g_whole) < 1e-5


def test_importance_weights_are_one_on_policy_and_capped_off_policy(played):
    model, tok, eps = played
    on, g_on = _grads(model, eps, tok.pad_token_id)
    # the rollouts came from this float32 model: the trainer's log-probs are the recorded ones
    assert on.logprob_drift < 1e-4 and on.tis_weight == pytest.approx(1.0, abs=1e-4)
    _, g_off = _grads(model, eps, tok.pad_token_id, tis_cap=0.0)
    assert _rel(g_on, g_off) < 1e-4
    saved = [list(e.logps) for e in eps]
    try:
        for e in eps:  # as if the rollout engine had given every token 1 nat less: ratio e > cap 2
            e.logps = [lp - 1.0 for lp in e.logps]
        far, _ = _grads(model, eps, tok.pad_token_id, tis_cap=2.0)
        for e in eps:  # every token (the scripted call's too, which recorded none) far more likely to the trainer
            e.logps = [-50.0] * len(e.logps)
        _, g_far = _grads(model, eps, tok.pad_token_id, tis_cap=2.0)
    finally:
        for e, lp in zip(eps, saved):
            e.logps = lp
    assert far.logprob_drift == pytest.approx(1.0, abs=1e-3) and far.tis_weight == pytest.approx(2.0, abs=1e-4)
    assert _rel([2 * g for g in g_off], g_far) < 1e-5  # every token weighted by the cap


def test_loss_types_weigh_tokens_or_episodes(played):
    """dapo: the batch gradient is the episodes' own gradients weighted by their share of the sampled tokens;
    grpo: their plain mean (every episode weighs the same, however long)."""
    import copy

    model, tok, eps = played
    eps = list(eps)
    for i in (0, 4):  # two episodes trained on their first turn only: the weightings differ when lengths do
        (a, b), short = eps[i].spans[0], copy.copy(eps[i])
        short.spans, short.logps = short.spans[:1], short.logps[: b - a]
        eps[i] = short
    lengths = [e.generated_tokens for e in eps]
    assert len(set(lengths)) > 1
    _, like = _grads(model, eps, tok.pad_token_id)
    # an episode with a zero advantage has no gradient of its own (it is skipped): zeros
    alone = [_grads(model, [e], tok.pad_token_id)[1] or [g * 0 for g in like] for e in eps]
    assert sum(1 for e in eps if e.advantage == 0) < len(eps) - 2
    total = sum(lengths)
    for loss_type, weights in (("dapo", [n / total for n in lengths]), ("grpo", [1 / len(eps)] * len(eps))):
        _, batch = _grads(model, eps, tok.pad_token_id, loss_type=loss_type)
        mixed = [sum(w * g[i] for w, g in zip(weights, alone)) for i in range(len(batch))]
        assert _rel(batch, mixed) < 1e-5, loss_type
    _, dapo = _grads(model, eps, tok.pad_token_id, loss_type="dapo")
    _, grpo = _grads(model, eps, tok.pad_token_id, loss_type="grpo")
    assert _rel(dapo, grpo) > 1e-3


def test_the_bf16_copy_generates_close_to_float32(played):
    """The merged bf16 rollout copy: a snapshot (training the policy does not change it), log-probs of its greedy
    tokens within a small drift of float32's, and the float32 model untouched."""
    import torch

    from trainers.generation.generate import Sampling, generate, rollout_model

    model, tok, eps = played
    prompts = [e.ids[: e.spans[0][0]] for e in eps[:3]]
    before = [p.detach().clone() for p in model.parameters()]
    copy = rollout_model(model, True)
    assert all(p.dtype == torch.bfloat16 and not p.requires_grad for p in copy.parameters())
    assert all(p.dtype == torch.float32 and torch.equal(p, b) for p, b in zip(model.parameters(), before))
    fast = generate(copy, tok, prompts, Sampling(max_new_tokens=8))
    # float32 log-probs of the same tokens, teacher-forced
    drift = []
    for p, g in zip(prompts, fast):
        with torch.no_grad():
            logits = model.eval()(input_ids=torch.tensor([p + g.token_ids])).logits[0, len(p) - 1 : -1].float()
        ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(g.token_ids).unsqueeze(-1)).squeeze(-1)
        drift += (ref - torch.tensor(g.logprobs)).abs().tolist()
    assert 0 < sum(drift) / len(drift) < 0.1, drift
    assert rollout_model(model, False) is model
