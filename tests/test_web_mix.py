"""web_mix_env (issue 45: generated tasks in online RL's mix): web_form_env's MiniWoB tasks with web_gen_env's
generated forms in the train split, and web_form_env's own test and held-out tasks.

Without a browser: the splits' sizes and families, test and held-out tasks identical to web_form_env's, generated
train tasks identical to web_gen_env's of the same slice, ids that find their task, a task file of both kinds
validated. With one: the experts (each episode played by the expert of its kind) solve train tasks of both
kinds, rows name web_mix_env, and no Chromium is left after the module (its last test).
"""
from __future__ import annotations

import json

import pytest

import envs
from envs.core.episode import play_retrying
from envs.web.generated.spec import LAYOUTS
from envs.web.suite import HELD_OUT, TRAIN_FAMILIES
from web_helpers import assert_no_browser_left, needs_browser


@pytest.fixture(scope="module")
def env():
    e = envs.make("web-mix", max_steps=8)
    yield e
    e.close()


def test_registered_with_web_form_env_s_test_tasks_and_generated_train_tasks():
    listed = {e["name"]: e for e in envs.list_environments(tag="web")}
    assert listed["web_mix_env"]["aliases"] == ["web-mix"]
    mix, form, gen = (envs.builtin_suite(n) for n in ("web_mix_env", "web_form_env", "web_gen_env"))
    assert listed["web_mix_env"]["tasks"] == {"train": 120 * 29, "test": form.count("test"),
                                              "test_families": form.count("test_families")}
    for split in ("test", "test_families"):  # task for task web_form_env's: the same page, seed and data mode
        for i in range(mix.count(split)):
            a, b = mix.task(split, i), form.task(split, i)
            assert (a.checker, a.template, a.split, a.env) == (b.checker, b.template, b.split, "web_mix_env")
    assert {mix.task("train", i).template for i in range(29)} == set(TRAIN_FAMILIES + LAYOUTS)
    assert not {mix.task("train", i).template for i in range(mix.count("train"))} & set(HELD_OUT)
    seen = []
    for i in range(58):
        t = mix.task("train", i)
        assert mix.find(t.task_id) == t and t.task_id == f"web_mix_env:train:{i:05d}"
        if t.template in LAYOUTS:  # the generated task of the same slice of its layout
            seen.append(t.checker["seed"])
            own = gen.task("train", (i // 29) * 4 + LAYOUTS.index(t.template))
            assert (t.checker, t.template) == (own.checker, own.template)
        else:
            own = form.task("train", (i // 29) * 25 + TRAIN_FAMILIES.index(t.template))
            assert (t.checker, t.template) == (own.checker, own.template)
    assert len(seen) == len(set(seen)) == 8  # distinct generated forms


def test_a_task_file_of_both_kinds_is_validated(tmp_path):
    path = tmp_path / "tasks.jsonl"
    rows = [{"task_id": "m1", "instruction": "x", "template": "click-button", "seed": 3},
            {"task_id": "g1", "instruction": "x", "template": "table", "generator": "form", "seed": 7}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    e = envs.make("web-mix", tasks=str(path))
    e.close()
    for bad, field in ((rows[1] | {"seed": "7"}, "seed"), ({**rows[0], "template": "book-flight"}, "miniwob")):
        path.write_text(json.dumps(bad) + "\n")
        with pytest.raises(envs.TaskFileError, match=field):
            envs.make("web-mix", tasks=str(path))
    e = envs.make("web_mix_env")
    mine = envs.Task(task_id="g2", instruction="x", checker={"generator": "form", "seed": 5}, template="grid")
    assert e.unwrapped.validate_task(mine)[0] == "template"  # a generated task names one of the layouts
    e.close()


@needs_browser
def test_the_expert_of_each_kind_solves_train_tasks_of_both_kinds(env):
    policy = envs.get_policy("web_mix_env", "expert")
    wins, failed = 0, []
    for i in (0, 1, 2, 3, 25, 26, 27, 28):  # four MiniWoB families, then the four generated layouts
        rec = play_retrying(env, policy, seed=0, options={"split": "train", "index": i})
        wins += rec.success
        if not rec.success:
            failed.append((i, rec.info["template"], rec.final["checks"]["details"][0].get("reason")))
        assert rec.info["env"] == "web_mix_env"
    assert wins >= 7, failed  # each expert solves >= 0.95 of its own kind's tasks


@needs_browser
def test_zz_no_chromium_left_after_the_tests(env):
    env.close()
    assert_no_browser_left()
