"""The real Hermes Agent (hermes-agent 0.19.0, in its own venv: `just hermes-venv`) runs one conversation through
`lake serve-model --model tiny` (issue 25, Must show): docs/agents.md's config.yaml and command, a harmless toolset
(todo: no terminal, no files), and the conversation lands in the lake as one trajectory carrying the served
version; a reward for it goes back through `lake serve`'s /v1/rewards. The tiny model's replies are gibberish:
Hermes only has to finish its turn (it asks again with a larger max_tokens when a reply stops at the limit, so
one conversation can be several calls, joined into one trajectory by prefix matching).

Slow (a server start and Hermes' ~3,000-token system prompt on a CPU); skipped where the Hermes venv is missing
($HERMES_VENV, default /tmp/hermes-venv)."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from ingest_helpers import ServerProcess, lake_cmd
from serve_model_helpers import lake_rows
from train_helpers import REPO, tiny_dir  # noqa: F401  (the session's tiny model: LACHESIS_CACHE for the servers)

HERMES = Path(os.environ.get("HERMES_VENV", "/tmp/hermes-venv")) / "bin" / "hermes"
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not HERMES.is_file(), reason=f"no Hermes Agent at {HERMES}: run `just hermes-venv`")]

TOKEN = "hermes-test-token"
PROMPT = "Plan one thing to do today."
# What docs/agents.md's "Use your trained model with Hermes Agent" puts in $HERMES_HOME/config.yaml (the page's
# model and max_tokens: smollm2, 256; tests/test_hermes_loop.py uses it too). context_length:
# Hermes refuses a model whose window is under 64K tokens; the server still answers a prompt longer than the model's
# real window with a 400.
CONFIG = """\
model:
  provider: custom
  base_url: http://127.0.0.1:{port}/v1
  api_key: {token}
  default: {model}
  max_tokens: {max_tokens}
  context_length: 65536
"""


def test_hermes_agent_conversation_lands_in_the_lake_with_the_served_version(tiny_dir, tmp_path):
    lake = tmp_path / "lake"
    home = tmp_path / "hermes-home"
    home.mkdir()
    with ServerProcess(lake, token=TOKEN, log_path=tmp_path / "serve.log") as ingest, \
            ServerProcess(lake, token=TOKEN, command="serve-model", extra=["--model", "tiny", "--threads", "1"],
                          log_path=tmp_path / "serve-model.log").start(timeout=300) as served:
        (home / "config.yaml").write_text(CONFIG.format(port=served.port, token=TOKEN, model="tiny", max_tokens=32))
        models = httpx.get(f"{served.url}/v1/models", headers={"Authorization": f"Bearer {TOKEN}"}).json()["data"]
        version = models[-1]["id"]
        assert version == "tiny@base"

        r = subprocess.run([str(HERMES), "-z", PROMPT, "--toolsets", "todo", "--ignore-rules"], capture_output=True,
                           text=True, timeout=600, cwd=tmp_path, env={**os.environ, "HERMES_HOME": str(home)})
        assert r.returncode == 0, (r.stdout[-500:], r.stderr[-2000:])
        assert r.stdout.strip()  # Hermes printed the model's (gibberish) final reply

        rows = lake_rows(lake)
        assert rows, (tmp_path / "serve-model.log").read_text()[-2000:]
        assert {row["trajectory_id"] for row in rows} == {rows[0]["trajectory_id"]}  # one conversation, one trajectory
        assert {row["policy_version"] for row in rows} == {version}
        first = json.loads(rows[0]["messages"]) if isinstance(rows[0]["messages"], str) else rows[0]["messages"]
        assert first[0]["role"] == "system" and "Hermes Agent" in first[0]["content"]
        assert first[1] == {**first[1], "role": "user", "content": PROMPT}
        assert rows[0]["metadata"]["tools"][0]["function"]["name"] == "todo"

        # the page's way back: the trajectory id from `lake sql`, the reward to lake serve's /v1/rewards
        q = subprocess.run([*lake_cmd(), "sql", "SELECT trajectory_id, policy_version FROM trajectories "
                            "ORDER BY occurred_at DESC LIMIT 1", "--lake", str(lake), "--format", "json"],
                           capture_output=True, text=True, timeout=120, cwd=REPO)
        assert q.returncode == 0, q.stderr
        newest = json.loads(q.stdout)[0]
        assert newest == {"trajectory_id": rows[0]["trajectory_id"], "policy_version": version}
        posted = httpx.post(f"{ingest.url}/v1/rewards", json={"trajectory_id": newest["trajectory_id"], "reward": 1.0},
                            headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        assert posted.status_code == 200, posted.text
    from lake import Lake

    with Lake.open(lake).snapshot() as snap:
        assert snap.sql("SELECT trajectory_id, reward FROM rewards").fetchall() == [(newest["trajectory_id"], 1.0)]
