"""A reply stuck in a loop ends there instead of running to the token limit (issue 24: SmolLM2 ran 14 of 92 public
bash episodes into repetition loops): `looping` finds a short span repeated at the end, real commands never trip it,
and generate / hermes_eval stop such a row with finish_reason "repetition"."""
from __future__ import annotations

import pytest

import train_helpers as th
from train_helpers import tiny_dir  # noqa: F401  (session fixture)

SPAN = 48


@pytest.mark.parametrize("period", [1, 2, 5, 16])
def test_a_span_repeated_three_times_is_a_loop(period):
    from trainers.generation.generate import looping

    head = list(range(100, 130))
    cycle = list(range(1, period + 1))
    ids = head + cycle * (SPAN // period + 1)
    assert looping(ids, SPAN)
    assert not looping(ids + [999], SPAN)  # the loop broken at the end: no longer looping
    assert not looping(ids[-SPAN + 1:], SPAN)  # shorter than the span: not judged yet


def test_longer_periods_and_varied_text_are_not_loops():
    from trainers.generation.generate import looping

    assert not looping(list(range(1, 18)) * 4, SPAN)  # period 17: beyond LOOP_MAX_PERIOD
    assert not looping(list(range(SPAN * 2)), SPAN)


def test_no_expert_reply_of_any_environment_trips_it(tiny_dir):  # noqa: F811
    """Every prefix of the expert's replies (tool calls with quoted, piped commands; python patches) is left alone,
    for every train template of each environment (the first tasks of a split cycle through its templates; a
    template's other seeds change names and values, not the shape of its commands)."""
    import envs

    from trainers.generation.generate import looping
    from trainers.modeling.models import load_tokenizer
    from trainers.generation.rollouts import policy_rows

    tok = load_tokenizer(str(tiny_dir))
    checked = 0
    for env in ("bash_exec_env", "git_repo_env", "python_debug_env"):
        tasks = envs.load_tasks(env, "train")
        templates = {t.template for t in tasks}
        n = next(i for i in range(len(tasks)) if {t.template for t in tasks[:i + 1]} == templates) + 1
        for row in policy_rows(env, "train", n, "expert", seed=0, workers=1):
            for m in row["messages"]:
                if m["role"] != "assistant":
                    continue
                text = (m.get("content") or "") + "".join(
                    envs.format_tool_call(c["name"], c["arguments"]) for c in m.get("tool_calls") or [])
                ids = tok.encode(text, add_special_tokens=False)
                assert not any(looping(ids[:n], SPAN) for n in range(SPAN, len(ids) + 1)), text[:200]
                checked += 1
    assert checked >= 76  # 33 + 22 + 21 templates, one or more replies each


def test_generate_stops_a_looping_row_where_the_loop_is_found_and_leaves_the_others_alone(tiny_dir):  # noqa: F811
    """The untrained tiny model falls into loops under greedy decoding: with stop_repetition each such row ends as
    soon as its tail is a loop, the others are untouched (the same tokens as without it)."""
    import envs

    from trainers.generation.episodes import Episode
    from trainers.generation.generate import Sampling, generate, looping
    from trainers.modeling.models import load_model, load_tokenizer

    th.set_threads()
    tok = load_tokenizer(str(tiny_dir))
    model = load_model(str(tiny_dir)).eval()
    prompts = []
    for i, t in enumerate(envs.load_tasks("bash_exec_env", "test")[:8]):
        env = envs.make("bash_exec_env", split="test")
        prompts.append(Episode(env, t.task_id, i, tok).ids)
        env.close()
    free = generate(model, tok, prompts, Sampling(max_new_tokens=160))
    cut = generate(model, tok, prompts, Sampling(max_new_tokens=160, stop_repetition=SPAN))
    looped = 0
    for f, c in zip(free, cut):
        first = next((n for n in range(SPAN, len(f.token_ids) + 1) if looping(f.token_ids[:n], SPAN)), None)
        if first is None:
            assert (c.token_ids, c.finish_reason) == (f.token_ids, f.finish_reason)
        else:
            looped += 1
            assert c.finish_reason == "repetition" and c.token_ids == f.token_ids[:first]
            assert c.logprobs == pytest.approx(f.logprobs[:first], abs=1e-5)
    assert looped >= 1, "no row looped: the test lost its subject"


def test_hermes_eval_stops_loops_by_default_and_checks_the_setting():
    from trainers.runtime.errors import TrainerInputError
    from trainers.eval.config import EvalSettings

    assert EvalSettings(record_in_lake=False).stop_repetition == SPAN
    assert EvalSettings(record_in_lake=False, stop_repetition=0).stop_repetition == 0  # off
    with pytest.raises(TrainerInputError, match="--stop-repetition"):
        EvalSettings(record_in_lake=False, stop_repetition=3)


def test_online_rl_stops_loops_by_default_and_checks_the_setting():
    from trainers.runtime.errors import TrainerInputError
    from trainers.rl.project_config import ProjectConfig

    assert ProjectConfig().stop_repetition == SPAN and ProjectConfig(stop_repetition=0).stop_repetition == 0
    for bad in (3, -1, 1 << 21):
        with pytest.raises(TrainerInputError, match="stop_repetition"):
            ProjectConfig(stop_repetition=bad)
