"""hermes_eval on a web environment (issues 45 and 46): episodes take browser tabs as they start and give them back
as they end, so any number of tasks runs with at most --batch-size tabs leased; the episodes reach the lake as they
end. The module runs in one worker (--dist loadfile)."""
from __future__ import annotations


import pytest

import train_helpers as th
from train_helpers import tiny_dir  # noqa: F401  (session fixture)
from envs.web import browser as browsers
from web_helpers import assert_no_browser_left, needs_browser

pytestmark = needs_browser


def test_a_web_evaluation_leases_at_most_batch_size_tabs_and_records_every_episode(tiny_dir, tmp_path):
    import envs
    from lake import Lake
    from trainers.eval.config import EvalSettings
    from trainers.eval.evaluate import EpisodeWriter, evaluate_model
    from trainers.modeling.models import load_model, load_tokenizer

    tok = load_tokenizer(str(tiny_dir))
    model = load_model(str(tiny_dir)).eval()
    s = EvalSettings(task="web-form", limit=9, batch_size=2, max_new_tokens=8, max_turns=2, progress=False)
    tasks = envs.load_tasks("web_form_env", "test")[:9]
    pool = browsers.pool()
    pool.peak_leased = sum(pool.leased.values())
    lake = Lake.init(tmp_path / "lake")
    writer = EpisodeWriter(lake, run_id="eval-test", model="tiny", adapter=None)
    writer.COMMIT_EVERY = 4
    summary, finished = evaluate_model(model, tok, s, tasks, run_id="eval-test", label="tiny", on_episode=writer.add)
    writer.flush()
    assert summary["episodes"] == 9 and summary["lost"] == [] and len(finished) == 9
    assert [e.task_id for e in finished] == [t.task_id for t in tasks]
    assert pool.peak_leased <= 2, pool.stats()  # 9 tabs before: one per episode, leased up front
    assert sum(pool.leased.values()) == 0  # every tab given back
    assert summary["peak_rss_mb"] > 0
    rows = lake.snapshot().arrow("SELECT trajectory_id FROM trajectories").num_rows
    assert rows == 9 and lake.version("trajectories") >= 3  # written in commits of 4 as they ended


def test_a_model_episode_whose_page_fails_mid_episode_is_played_again(tiny_dir):
    import envs
    from trainers.generation.episodes import Episode, play
    from trainers.generation.generate import Generation
    from trainers.modeling.models import load_tokenizer

    tok = load_tokenizer(str(tiny_dir))
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    names = envs.builtin_suite("web_form_env").templates_of("train")
    task = envs.load_tasks("web_form_env", "train")[names.index("enter-password")]
    env = envs.make("web-form", split="train", max_steps=6)
    expert = envs.get_policy("web_form_env", "expert")
    broken = []

    def generate(prompts, episodes):  # the expert's replies as "generated" tokens; the page breaks once
        out = []
        for e in episodes:
            if e.turns == 0:
                expert.reset(e.recorder.info)
            if not broken:
                env.unwrapped.page.run("window.getComputedStyle = undefined;")
                broken.append(True)
            text = expert.act(e.recorder.steps[-1]["result"] if e.turns else e.messages[-1]["content"], e.messages)
            out.append(Generation.scripted(tok.encode(text, add_special_tokens=False) + [eos]))
        return out

    ep = Episode(env, task.task_id, 0, tok)
    try:
        play([ep], generate, tok, 1, 4096)
    finally:
        env.close()
    assert ep.tries == 2 and ep.fault == "" and ep.recorder.success


def test_zz_no_chromium_left_after_the_tests():
    assert_no_browser_left()
