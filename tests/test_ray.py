"""--ray on a two-node Ray cluster on loopback (ray.cluster_utils.Cluster: two raylets of one CPU each, one module
for every Ray test so the cluster starts once): `lake rollout --ray` and `hermes_eval --ray` play the same episodes as
one process and record each once; Daft reads the lake at a version on the cluster and gets `lake sql`'s rows;
without Ray, `--ray` is one line saying what to install; no Ray process is left once the module ends. The module
runs in one worker (--dist loadfile): one cluster for all its tests."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import train_helpers as th
from tests.fault_figures import record
from train_helpers import tiny_dir  # noqa: F401  (session fixture)

REPO = Path(__file__).resolve().parent.parent
# Ray puts a node on the machine's own address, and turns 127.0.0.1 into it; with this off every node, and every
# driver the tests start, stays on 127.0.0.1 (ray/_private/services.py get_node_ip_address)
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
STORE = 80 << 20  # bytes of object store per node: Ray's least is 75 MiB


def ray_processes(session: str) -> list[str]:
    """The processes of the cluster whose session folder is `session` (raylets, GCS, workers, agents)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if session in cmd:
            found.append(f"{pid}: {cmd[:80]}")
    return found


class on_loopback:
    """LOOPBACK for this process and the ones it starts, and for a ray already imported here (it read the variable
    when imported: a test module before this one may have imported it)."""

    def __enter__(self):
        from ray._private import ray_constants

        self.saved = {k: os.environ.get(k) for k in LOOPBACK}, ray_constants.ENABLE_RAY_CLUSTER
        os.environ.update(LOOPBACK)
        ray_constants.ENABLE_RAY_CLUSTER = False

    def __exit__(self, *exc):
        from ray._private import ray_constants

        env, ray_constants.ENABLE_RAY_CLUSTER = self.saved
        for k, v in env.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def start_cluster(nodes: int):
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": STORE,
                                                      "include_dashboard": False})
    try:
        for _ in range(nodes - 1):
            c.add_node(num_cpus=1, object_store_memory=STORE)
        c.wait_for_nodes()
        assert c.address.startswith("127.0.0.1:"), c.address  # on loopback
    except BaseException:
        c.shutdown()
        raise
    return c


@pytest.fixture(scope="module")
def cluster(tiny_dir):  # noqa: F811 - after tiny_dir: the workers inherit its LACHESIS_CACHE
    import ray

    from placement import ray_cluster

    with on_loopback():
        c = start_cluster(2)
        session = c.head_node.get_session_dir_path()
        try:
            yield c
        finally:
            if ray.is_initialized():  # a test that failed while connected: the cluster refuses to remove its
                ray_cluster.disconnect()  # driver's node
            c.shutdown()
        deadline = time.monotonic() + 20
        while ray_processes(session) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ray_processes(session) == [], "Ray processes left after the tests"


def lake_rows(root, sql: str) -> list[dict]:
    from lake import Lake

    with Lake(str(root)).snapshot() as snap:
        return snap.arrow(sql).to_pylist()


def test_workers_are_spread_over_both_nodes(cluster):
    from placement import ray_cluster

    class Where:
        def node(self) -> str:
            import ray

            return ray.get_runtime_context().get_node_id()

    with ray_cluster.connected(cluster.address, num_cpus=2) as ray:
        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        actors = ray_cluster.spread(Where, 2)
        nodes = ray.get([a.node.remote() for a in actors])
        ray_cluster.end(actors, close=None)
    assert len(alive) == 2 and set(nodes) == alive


def test_lake_rollout_on_ray_records_the_one_process_episodes_once(cluster, tmp_path):
    from ingest.rollout import run_rollout
    from ingest.rollout_config import RolloutSpec

    one = run_rollout(RolloutSpec(env="bash_exec_env", episodes=10, seed=3), tmp_path / "one")
    r = subprocess.run([sys.executable, "-c", "from lachesis.cli import main; main()", "rollout", "--env",
                        "bash_exec_env", "--episodes", "10", "--seed", "3", "--workers", "2", "--ray", cluster.address,
                        "--lake", str(tmp_path / "ray"), "--json"], capture_output=True, text=True, timeout=300,
                       cwd=REPO, env={**os.environ, **LOOPBACK})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["episodes"], out["mean_reward"], out["success_rate"], out["lost"], out["rows"]) == (
        one.recorded, one.mean_reward, one.successes / one.recorded, [], 10)
    sql = "SELECT task_id, reward, success, [s.action FOR s IN steps] AS actions FROM trajectories ORDER BY task_id"
    assert lake_rows(tmp_path / "ray", sql) == lake_rows(tmp_path / "one", sql)
    ids = lake_rows(tmp_path / "ray", "SELECT count(DISTINCT trajectory_id) AS n, count(*) AS rows FROM trajectories")
    assert ids == [{"n": 10, "rows": 10}]  # each episode once


def test_hermes_eval_on_ray_equals_the_one_process_summary(cluster, tmp_path):
    from lake import Lake
    from trainers.eval.config import EvalSettings
    from trainers.eval.evaluate import run_eval

    runs = {}
    for name, extra in (("one", {}), ("ray", {"ray": cluster.address, "workers": 2})):
        Lake.init(tmp_path / name)
        runs[name] = run_eval(EvalSettings(task="shell", split="test", limit=4, max_new_tokens=8, batch_size=2,
                                           lake_root=str(tmp_path / name), progress=False, **extra))
    timing = {"run_id", "wall_s", "generate_s", "peak_rss_mb", "lake_versions"}
    one, ray = ({k: v for k, v in runs[n].items() if k not in timing} for n in ("one", "ray"))
    assert one == ray and one["episodes"] == 4
    # the same greedy replies, token for token, each episode recorded once
    sql = "SELECT task_id, messages FROM trajectories ORDER BY task_id"
    assert lake_rows(tmp_path / "ray", sql) == lake_rows(tmp_path / "one", sql)
    assert len(lake_rows(tmp_path / "ray", "SELECT DISTINCT trajectory_id FROM trajectories")) == 4


DAFT_ON_RAY = """
import json, sys, daft, ray
from tests.test_engines import SFT_COLUMNS, daft_table, engine_views
from lake import Lake
address, root, versions = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
ray.init(address=address, log_to_driver=False)
daft.set_runner_ray(address=address)
lk = Lake(root)
con = engine_views(lk, versions, daft_table)
counts = {t: con.sql(f'SELECT count(*) FROM "{t}"').fetchall()[0][0] for t in versions}
sft = con.sql(f"SELECT {SFT_COLUMNS} FROM sft ORDER BY trajectory_id").fetchall()
print(repr((daft.get_or_create_runner().name, counts, sft)))
ray.shutdown()
"""


def test_daft_on_ray_reads_the_lake_at_a_version_as_lake_sql(cluster, tmp_path):
    """In a process of its own: Daft's runner is set once per process, and test_engines may have used the native one
    in this one."""
    from tests.test_engines import SFT_COLUMNS, make_lake

    lk = make_lake(tmp_path / "lake")
    with lk.snapshot({"trajectories": 2}) as snap:
        versions = snap.versions
        counts = {t: snap.sql(f'SELECT count(*) FROM "{t}"').fetchall()[0][0] for t in versions}
        sft = snap.sql(f"SELECT {SFT_COLUMNS} FROM sft ORDER BY trajectory_id").fetchall()
    r = subprocess.run([sys.executable, "-c", DAFT_ON_RAY, cluster.address, str(tmp_path / "lake"),
                        json.dumps(versions)],
                       capture_output=True, text=True, timeout=300, cwd=REPO, env={**os.environ, **LOOPBACK})
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == repr(("ray", counts, sft))
    assert counts["trajectories"] == 12 and len(sft) == 8


BLOCK_RAY = """
import sys
class NoRay:
    def find_spec(self, name, path=None, target=None):
        if name == "ray" or name.startswith("ray."):
            raise ModuleNotFoundError("No module named 'ray'", name=name)
sys.meta_path.insert(0, NoRay())
from lachesis.cli import main
main()
"""


def test_without_ray_rollout_works_and_ray_is_one_line_saying_what_to_install(tmp_path):
    base = [sys.executable, "-c", BLOCK_RAY, "rollout", "--env", "bash_exec_env", "--episodes", "2", "--lake",
            str(tmp_path / "lake"), "--json"]
    plain = subprocess.run(base, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert plain.returncode == 0 and json.loads(plain.stdout)["rows"] == 2, plain.stderr
    r = subprocess.run(base + ["--ray"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == ["error: --ray needs Ray, which is not installed here: pip install "
                                             "'lachesis[ray]'"]


def test_ray_options_are_checked_before_anything_runs():
    from ingest.rollout_config import RolloutInputError, RolloutSpec
    from trainers.eval.config import EvalSettings
    from trainers.runtime.errors import TrainerInputError

    with pytest.raises(RolloutInputError, match="--screenshots needs the pages on this machine"):
        RolloutSpec(env="web-form", ray="local", screenshots="shots")
    with pytest.raises(Exception, match="--ray takes local, auto or the cluster's address"):
        RolloutSpec(env="shell", ray=" ")
    with pytest.raises(TrainerInputError, match="--workers must be at least 1"):
        EvalSettings(ray="local", workers=0)


def test_ray_alone_means_a_local_cluster_and_a_given_address_stays():
    from lachesis.console import fill_bare_values

    assert fill_bare_values(["--env", "x", "--ray"]) == ["--env", "x", "--ray", "local"]
    assert fill_bare_values(["--ray", "--workers", "2"]) == ["--ray", "local", "--workers", "2"]
    assert fill_bare_values(["--ray", "auto", "--ray=10.0.0.1:6379"]) == ["--ray", "auto", "--ray=10.0.0.1:6379"]


def test_a_cluster_that_does_not_answer_is_one_line(tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = th.run_cli("hermes_eval", "--task", "shell", "--limit", "1", "--no-lake", "--ray", f"127.0.0.1:{port}")
    assert r.returncode == 1, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: no Ray cluster answers at 127.0.0.1:{port}"), r.stderr
    assert "Traceback" not in r.stderr


def test_online_rl_with_two_ray_actors_on_two_nodes_consumes_every_rollout_once(cluster, tmp_path):
    from collections import Counter

    from lake import Lake
    from test_train_online import B, G, sql, write_project, write_tasks
    from trainers.rl.config import OnlineConfig
    from trainers.rl.learner import train_online
    from trainers.runtime import checkpoint

    lake_root = tmp_path / "lake"
    Lake.init(lake_root)
    steps_n = 2
    cfg = OnlineConfig(env="shell", steps=steps_n, eval_interval=100, actors=2, ray=cluster.address,
                       config=str(write_project(tmp_path / "l.toml", max_turns=1, eval_episodes=1)),
                       tasks_file=str(write_tasks(tmp_path / "tasks.jsonl")), output=str(tmp_path / "run"),
                       lake_root=str(lake_root), progress=False, plot=False)
    summary = train_online(cfg)
    assert summary["steps"] == steps_n and summary["actor_restarts"] == 0
    nodes = {n.node_id for n in cluster.list_all_nodes()}
    assert len(nodes) == 2 and set(summary["actor_nodes"]) == nodes  # one actor on each node

    run_id, run_dir = summary["run_id"], tmp_path / "run"
    lines = [json.loads(x) for x in (run_dir / "train_log.jsonl").read_text().splitlines()]
    steps = [r for r in lines if "consumed_ids" in r]
    assert [r["step"] for r in steps] == list(range(1, steps_n + 1))
    consumed = Counter(i for r in steps for i in r["consumed_ids"])
    step_of = {i: r["step"] for r in steps for i in r["consumed_ids"]}
    rows = sql(lake_root, f"""SELECT trajectory_id, policy_version, json_extract(metadata, '$.actor')::INT AS actor
                              FROM trajectories WHERE json_extract_string(metadata, '$.train_run_id') = '{run_id}'
                              AND split = 'train'""")
    assert rows and {r["actor"] for r in rows} == {0, 1}  # both Ray actors appended to the lake
    assert Counter(r["trajectory_id"] for r in rows) == consumed and set(consumed.values()) == {1}  # exactly once
    assert all(int(r["policy_version"]) < step_of[r["trajectory_id"]] for r in rows)
    assert set(Counter((r["actor"], r["policy_version"]) for r in rows).values()) == {B * G}  # a batch per version
    # the actors played versions 0 and 1 of the policy, which reached them only through Ray's object store
    assert {r["policy_version"] for r in rows} >= {"0", "1"}
    state = checkpoint.read_state(checkpoint.latest(run_dir))
    assert state["step"] == steps_n and state["lake_offset"] == steps[-1]["lake_offset"]


def actor_pids(title: str) -> list[int]:
    """The processes whose title (Ray's `ray::Class.method`) starts with `title`."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(title.encode()):
                pids.append(int(pid))
        except OSError:
            continue
    return pids


@pytest.mark.slow  # in `just faults` and `just test-all`: the default suite keeps the 2-node RL and eval tests
@pytest.mark.fault
def test_a_rollout_worker_killed_mid_run_loses_and_duplicates_nothing(cluster, tmp_path):
    """kill -9 of a Ray worker after the first episode came back: the chunk it was playing is played by the other
    worker, every episode is recorded once under its own id, none lost."""
    import signal

    from ingest.rollout import episode_id, run_rollout
    from ingest.rollout_config import RolloutSpec

    killed: list[int] = []

    def kill_one(i, rec) -> None:
        if not killed:
            pids = actor_pids("ray::RolloutWorker")
            assert len(pids) == 2, pids
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])

    spec = RolloutSpec(env="bash_exec_env", episodes=16, seed=5, workers=2, ray=cluster.address, commit_every=4)
    result = run_rollout(spec, tmp_path / "lake", on_episode=kill_one)
    rows = lake_rows(tmp_path / "lake", "SELECT trajectory_id FROM trajectories")
    distinct = len({r["trajectory_id"] for r in rows})
    record("lake rollout --ray worker kill -9 after the first episode", tried=16, unit="episodes", lost=16 - distinct,
           duplicated=len(rows) - distinct)
    assert killed and (result.played, result.recorded, result.lost) == (16, 16, [])
    assert sorted(r["trajectory_id"] for r in rows) == sorted(episode_id(result.group_id, i) for i in range(16))


@pytest.mark.slow  # in `just faults` and `just test-all`: the default suite keeps the 2-node RL and eval tests
@pytest.mark.fault
def test_a_node_removed_mid_rollout_loses_and_duplicates_nothing(cluster, tmp_path):
    """The second node removed (its raylet and workers gone) after the first episode came back: its worker's chunk is
    played on the head node's worker, every episode recorded once; the node is added back for the tests after."""
    from ingest.rollout import episode_id, run_rollout
    from ingest.rollout_config import RolloutSpec

    (node,) = [n for n in cluster.list_all_nodes() if not n.head]
    removed: list[bool] = []

    def remove_node(i, rec) -> None:
        if not removed:
            cluster.remove_node(node)
            removed.append(True)

    spec = RolloutSpec(env="bash_exec_env", episodes=16, seed=7, workers=2, ray=cluster.address, commit_every=4)
    try:
        result = run_rollout(spec, tmp_path / "lake", on_episode=remove_node)
    finally:
        if removed:
            cluster.add_node(num_cpus=1, object_store_memory=STORE)
            cluster.wait_for_nodes()
    rows = lake_rows(tmp_path / "lake", "SELECT trajectory_id FROM trajectories")
    distinct = len({r["trajectory_id"] for r in rows})
    record("lake rollout --ray node removed after the first episode", tried=16, unit="episodes", lost=16 - distinct,
           duplicated=len(rows) - distinct)
    assert removed and (result.played, result.recorded, result.lost) == (16, 16, [])
    assert sorted(r["trajectory_id"] for r in rows) == sorted(episode_id(result.group_id, i) for i in range(16))


@pytest.mark.slow
@pytest.mark.fault
def test_a_ray_actor_killed_mid_run_is_replaced_and_every_rollout_is_consumed_once(cluster, tmp_path):
    """kill -9 of one Ray actor after the learner's first step: a new actor takes its index, the learner goes on,
    and every rollout in the lake is consumed exactly once, one batch per actor and policy version."""
    import signal
    import threading
    from collections import Counter

    from lake import Lake
    from test_train_online import B, G, sql, write_project, write_tasks
    from trainers.rl.config import OnlineConfig
    from trainers.rl.learner import train_online

    lake_root, run_dir, steps_n = tmp_path / "lake", tmp_path / "run", 4
    Lake.init(lake_root)
    cfg = OnlineConfig(env="shell", steps=steps_n, eval_interval=100, actors=2, ray=cluster.address,
                       config=str(write_project(tmp_path / "l.toml", max_turns=1, eval_episodes=1)),
                       tasks_file=str(write_tasks(tmp_path / "tasks.jsonl")), output=str(run_dir),
                       lake_root=str(lake_root), progress=False, plot=False)
    out: dict = {}
    learner = threading.Thread(target=lambda: out.update(summary=train_online(cfg)), daemon=True)
    learner.start()
    log = run_dir / "train_log.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not (log.is_file() and "consumed_ids" in log.read_text()):
        time.sleep(0.2)
    pids = actor_pids("ray::RayActor")
    assert len(pids) == 2, pids
    os.kill(pids[0], signal.SIGKILL)
    learner.join(300)
    summary = out["summary"]
    assert summary["steps"] == steps_n and summary["actor_restarts"] == 1
    steps = [json.loads(x) for x in log.read_text().splitlines() if "consumed_ids" in x]
    consumed = Counter(i for r in steps for i in r["consumed_ids"])
    rows = sql(lake_root, f"""SELECT trajectory_id, policy_version, json_extract(metadata, '$.actor')::INT AS actor
                              FROM trajectories WHERE json_extract_string(metadata, '$.train_run_id') =
                              '{summary["run_id"]}' AND split = 'train'""")
    ids = Counter(r["trajectory_id"] for r in rows)
    batches = Counter((r["actor"], r["policy_version"]) for r in rows)
    record("rl_train_online --ray actor kill -9 after step 1", tried=len(ids), unit="rollouts",
           unconsumed=sum(1 for i in ids if i not in consumed),
           consumed_twice=sum(1 for n in consumed.values() if n > 1),
           replayed_batches=sum(1 for n in batches.values() if n > B * G))
    assert ids == consumed and set(consumed.values()) == {1}
    assert set(Counter((r["actor"], r["policy_version"]) for r in rows).values()) == {B * G}


@pytest.mark.slow
@pytest.mark.fault
def test_a_cluster_that_goes_away_ends_online_rl_with_the_last_checkpoint_intact(tiny_dir, tmp_path):
    """rl_train_online --ray on a cluster of its own, shut down after the first step: the command ends (exit status
    1, no traceback) with one line saying the cluster went away and how to resume, and its newest checkpoint reads
    whole, for --resume on another cluster. (Ray's core worker ends the learner's process itself when the raylet
    beside it dies: the line is the last-word watcher's, placement/ray_cluster.py.)"""
    from lake import Lake
    from test_train_online import write_project, write_tasks
    from trainers.runtime import checkpoint

    loopback = on_loopback()
    loopback.__enter__()
    c = start_cluster(1)
    session, address = c.head_node.get_session_dir_path(), c.address
    run_dir, lake_root = tmp_path / "run", tmp_path / "lake"
    Lake.init(lake_root)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from lachesis.rl_cli import rl_train_online_main as m; m()", "--env", "shell",
             "--steps", "200", "--eval_interval", "1000", "--actors", "1", "--ray", c.address, "--config",
             str(write_project(tmp_path / "l.toml", max_turns=1, eval_episodes=1, checkpoint_every=1)),
             "--tasks", str(write_tasks(tmp_path / "tasks.jsonl")), "--output", str(run_dir), "--lake",
             str(lake_root), "--no-plot", "--quiet"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env={**os.environ, **LOOPBACK})
        log = run_dir / "train_log.jsonl"
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None and not (
                log.is_file() and "consumed_ids" in log.read_text()):
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()[1][-2000:]
    finally:
        c.shutdown()
        loopback.__exit__()
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 1 and "Traceback" not in err, err[-3000:]
    last = err.strip().splitlines()[-1]  # the last-word watcher's, after Ray's own log lines
    assert last.startswith(f"error: the Ray cluster at {address} went away mid-run") and [
        line for line in err.splitlines() if line.startswith("error:")] == [last], err[-3000:]
    assert f"rl_train_online --resume {run_dir} --ray ADDRESS" in last
    assert checkpoint.usable(run_dir) == checkpoint.latest(run_dir) is not None  # the last one reads whole
    deadline = time.monotonic() + 20
    while ray_processes(session) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray_processes(session) == []


def test_the_last_word_is_said_only_when_the_process_is_ended_from_outside():
    """The watcher connect() starts (placement/ray_cluster.py): a process ended by `_exit` (as Ray's core worker ends
    a driver whose raylet died) gets one line, naming the cluster when its head no longer answers; a process that
    disconnects or exits through Python gets none."""
    import socket

    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    alive = "127.0.0.1:%d" % listening.getsockname()[1]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        gone = "127.0.0.1:%d" % s.getsockname()[1]  # bound, not listening: nothing answers there
    try:
        for address, ending, said in (
                (gone, "os._exit(1)", f"error: the Ray cluster at {gone} went away mid-run and Ray ended the "
                                      "command's process; kept"),
                (alive, "os._exit(1)", "error: the command's process ended abruptly (killed, or ended by Ray when "
                                       "its node left the cluster); kept"),
                (gone, "sys.exit(1)", ""), (gone, "ray_cluster._LastWord.done(); os._exit(1)", "")):
            code = (f"import os, sys; from placement import ray_cluster; "
                    f"ray_cluster._LastWord.start({address!r}, 'kept'); {ending}")
            done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
            assert (done.returncode, done.stderr.strip()) == (1, said), (address, ending)
    finally:
        listening.close()
