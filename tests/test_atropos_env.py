"""lachesis/integrations/atropos_env.py: a registered environment served as an Atropos BaseEnv.

End to end with the real atroposlib 0.4.0 (its `serve` CLI, BaseEnv's registration, polling and gzip posts,
its example trainer's /batch loop) against `lake serve`: the environment's scored groups reach the trainer,
and the lake holds every group the trainer got, with the environment's name, scores and token masks.

atroposlib is not in the shared venv (lachesis/integrations/__init__.py): the end-to-end test runs it with
$ATROPOS_PYTHON (default /tmp/atropos-venv/bin/python, made by tests/data/make_atropos_venv.sh) and is skipped
with that reason when it is absent. The check that nothing else imports the integration runs everywhere.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from lake import Lake
from tests.ingest_helpers import ServerProcess
from train_helpers import REPO, tiny_dir  # noqa: F401  (session fixture)

PY = os.environ.get("ATROPOS_PYTHON", "/tmp/atropos-venv/bin/python")
PULL = Path(__file__).parent / "data" / "atropos_pull.py"
PACKAGES = ["transcript", "lake", "views", "ingest", "envs", "trainers", "lachesis"]


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_nothing_else_imports_the_integrations_or_atroposlib():
    """The shared venv has no atroposlib: a module outside lachesis/integrations that imported one would break
    `lake` and every console script there."""
    offenders = []
    for pkg in PACKAGES:
        for path in (REPO / pkg).rglob("*.py"):
            if "integrations" in path.relative_to(REPO).parts:
                continue
            bad = {n for n in _imports(path) if n.split(".")[0] == "atroposlib" or n.startswith("lachesis.integrations")}
            offenders += [f"{path.relative_to(REPO)}: {n}" for n in sorted(bad)]
    assert offenders == []
    assert "atroposlib.envs.base" in _imports(REPO / "lachesis" / "integrations" / "atropos_env.py")


def _has_atroposlib() -> bool:
    if not Path(PY).exists():
        return False
    r = subprocess.run([PY, "-c", "import atroposlib, importlib.metadata as m; "
                                  "assert m.version('atroposlib') == '0.4.0'"], capture_output=True, timeout=120)
    return r.returncode == 0


@pytest.mark.slow
def test_environment_posts_scored_groups_to_lake_serve_and_a_trainer_pulls_them(tmp_path, tiny_dir):
    if not _has_atroposlib():
        pytest.skip(f"atroposlib==0.4.0 not importable with {PY}: build it with tests/data/make_atropos_venv.sh "
                    "or point $ATROPOS_PYTHON at a Python that has it")
    Lake.init(tmp_path / "lake")
    received, log_path = tmp_path / "received.jsonl", tmp_path / "atropos.log"
    env_vars = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    log = open(log_path, "wb")
    srv = ServerProcess(tmp_path / "lake", log_path=tmp_path / "serve.log").start()
    # 2 batches of 8 sequences = 4 groups of 4 episodes
    trainer = subprocess.Popen([PY, str(PULL), srv.url, str(received), "2", "8", "4096"], stdout=log, stderr=log,
                               env=env_vars)
    env = subprocess.Popen(
        [PY, "-m", "lachesis.integrations.atropos_env", "serve", "--env.environment", "shell", "--env.policy", "noisy",
         "--env.tokenizer_name", str(tiny_dir), "--env.rollout_server_url", srv.url, "--env.use_wandb", "false",
         "--env.group_size", "4", "--env.total_steps", "2", "--env.include_messages", "true",
         "--env.ensure_scores_are_not_same", "false", "--env.max_token_length", "4096", "--env.steps_per_eval", "-1",
         "--env.max_num_workers", "2", "--env.max_batches_offpolicy", "2"],
        stdout=log, stderr=log, env=env_vars, cwd=str(tmp_path))
    try:
        trainer.wait(timeout=240)
        env.wait(timeout=120)
    finally:
        for p in (trainer, env):
            if p.poll() is None:
                p.kill()
        srv.kill()
    text = log_path.read_text(errors="replace")
    assert trainer.returncode == 0 and env.returncode == 0, text[-4000:]

    got = [json.loads(x) for x in received.read_text().splitlines()]
    assert len(got) == 4 and all(len(g["scores"]) == 4 for g in got)
    with Lake(tmp_path / "lake").snapshot() as snap:
        rows = snap.arrow("SELECT group_id, env, reward, messages, tokens, masks FROM trajectories "
                          "WHERE event_type = 'atropos.group'").to_pylist()
    assert {r["env"] for r in rows} == {"bash_exec_env"}  # the environment's name, from --env.environment's alias

    def key(tokens):
        return tuple(tokens)

    in_lake = {key(r["tokens"]): r for r in rows}
    for g in got:
        for i, tokens in enumerate(g["tokens"]):
            row = in_lake[key(tokens)]  # every sequence the trainer got is in the lake
            assert row["reward"] == g["scores"][i] and row["masks"] == g["masks"][i]
            msgs = g["messages"][i]
            assert [m["role"] for m in msgs[:2]] == ["system", "user"] and msgs[2]["role"] == "assistant"
            assert row["messages"][1]["content"] == msgs[1]["content"]
    # scores are the environment's graded returns: the noisy policy both solves and fails tasks
    scores = [s for g in got for s in g["scores"]]
    assert set(scores) <= {0.0, 1.0} and 0.0 in scores and 1.0 in scores, scores

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_dir))
    g = got[0]
    trained = tok.decode([t for t, m in zip(g["tokens"][0], g["masks"][0]) if m != -100])
    untrained = tok.decode([t for t, m in zip(g["tokens"][0], g["masks"][0]) if m == -100])
    assert '<tool_call>' in trained and '"name": "run"' in trained  # the assistant's turns are trained
    assert g["messages"][0][1]["content"] in untrained and "<tool_response>" in untrained  # prompt, tool output not
    assert "<tool_response>" not in trained
