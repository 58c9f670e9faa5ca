"""A reward posted to `lake serve` for a trajectory another process wrote after the server started (lake
serve-model's recorded calls, `just up --serve-model`'s loop; issue 25) is accepted: the server's id index catches
up with the lake on an unknown id before answering 404 (it answered 404 until its own next commit)."""
from __future__ import annotations

import httpx

from ingest_helpers import ServerProcess
from lake_helpers import trajectory


def test_a_reward_for_a_trajectory_written_by_another_process_after_start(tmp_path):
    from lake import Lake

    root = tmp_path / "lake"
    Lake.init(root)
    with ServerProcess(root) as server:
        other = Lake.open(root)  # another writer: its own Lake object, its own index
        other.append("trajectories", [trajectory(1, trajectory_id="written-elsewhere")])
        r = httpx.post(server.url + "/v1/rewards", json={"trajectory_id": "written-elsewhere", "reward": 0.5})
        assert r.status_code == 200, r.text
        missing = httpx.post(server.url + "/v1/rewards", json={"trajectory_id": "never-written", "reward": 1.0})
        assert missing.status_code == 404 and "never-written" in missing.text
    with Lake.open(root).snapshot() as snap:
        assert snap.sql("SELECT trajectory_id, reward FROM rewards").fetchall() == [("written-elsewhere", 0.5)]
