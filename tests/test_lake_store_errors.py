"""Roots and pins that fail in one line (issue 26, items 11-13): an --as-of version that is no whole number in
range (`1e999` was an OverflowError traceback), a root with credentials in its URL (never printed: lake.store.
redact), and an object store that never answers (`lake serve` printed a 28-line traceback after minutes; now
one line naming the root, in seconds: lake.store.CONNECT_TIMEOUT_S and Store.check_reachable)."""
from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lachesis.cli import app
from lake import Lake, LakeError
from lake.as_of import AsOfError, parse_as_of
from lake.store import Store, redact
from tests.lake_helpers import trajectory

LAKE_CLI = str(Path(sys.executable).with_name("lake"))
runner = CliRunner()
SECRET = "wJalrXUtnFEMI-K7MDENG-SECRET"


def invoke(*args):
    return runner.invoke(app, list(map(str, args)))


def refused_in_one_line(res, *words: str) -> str:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1, res.output
    for w in words:
        assert w in res.output, res.output
    return res.output


# ------------------------------------------------------------------------------------------------ item 11
@pytest.mark.attack
@pytest.mark.parametrize("pin", ['{"trajectories": 1e999}', '{"trajectories": -1e999}', '{"trajectories": 7.5}',
                                 '{"trajectories": true}', '{"trajectories": [1]}', '{"trajectories": -3}',
                                 str(10**30), f"trajectories={10**30}", '{"trajectories": "1e999"}'])
def test_an_as_of_version_that_is_no_whole_number_in_range_is_one_line(pin, tmp_path):
    root = tmp_path / "lake"
    Lake.init(root).append("trajectories", [trajectory(0)])
    with pytest.raises(AsOfError):
        parse_as_of(pin)
    refused_in_one_line(invoke("sql", "SELECT count(*) FROM trajectories", "--as-of", pin, "--lake", root),
                        "--as-of")
    res = invoke("export", "trajectories", "--output", tmp_path / "out", "--as-of", pin, "--lake", root)
    refused_in_one_line(res, "--as-of")
    assert not (tmp_path / "out").exists()


@pytest.mark.attack
def test_a_manifest_pin_of_1e999_is_one_line(tmp_path):
    root = tmp_path / "lake"
    Lake.init(root)
    folder = tmp_path / "dataset"
    folder.mkdir()
    (folder / "manifest.json").write_text('{"lake_versions": {"trajectories": 1e999}}')
    refused_in_one_line(invoke("sql", "SELECT 1", "--as-of", folder, "--lake", root), "lake_versions")


def test_good_pins_still_parse():
    assert parse_as_of('{"trajectories": 7.0, "skills": "2"}') == {"trajectories": 7, "skills": 2}
    assert parse_as_of("trajectories=3,skills=0") == {"trajectories": 3, "skills": 0}
    assert parse_as_of(5) == 5 and parse_as_of("5") == 5 and parse_as_of(None) is None


def test_a_time_pins_each_table_at_its_newest_commit_by_then(tmp_path):
    """`--as-of 2026-12-01T10:00:00Z` (an ISO 8601 time; UTC without an offset): each table as committed then."""
    import datetime as dt

    utc = dt.timezone.utc
    assert parse_as_of("2026-12-01") == dt.datetime(2026, 12, 1, tzinfo=utc)
    assert parse_as_of("2026-12-01T10:00:00+02:00") == dt.datetime(2026, 12, 1, 8, tzinfo=utc)
    with pytest.raises(AsOfError):
        parse_as_of("2026-13-01")
    root = tmp_path / "lake"
    lk = Lake.init(root)
    lk.append("trajectories", [trajectory(0)])
    between = dt.datetime.now(utc)
    lk.append("trajectories", [trajectory(1)])
    assert lk.resolve_versions(between)["trajectories"] == 1
    with lk.snapshot(between.isoformat()) as snap:
        assert snap.sql("SELECT count(*) FROM trajectories").fetchall() == [(1,)]
    res = invoke("sql", "SELECT count(*) AS n FROM trajectories", "--as-of", between.isoformat(), "--lake", root,
                 "--json")
    assert res.exit_code == 0 and '"n": 1' in res.output, res.output
    refused_in_one_line(invoke("sql", "SELECT count(*) FROM trajectories", "--as-of", "2000-01-01", "--lake", root),
                        "no version")


# ------------------------------------------------------------------------------------------------ item 12
@pytest.mark.attack
def test_credentials_in_a_root_url_are_never_printed(tmp_path):
    root = f"s3://AKIAEXAMPLE:{SECRET}@bucket/lake"
    assert redact(root) == "s3://bucket/lake" and redact("/data/u:p@x/lake") == "/data/u:p@x/lake"
    assert redact("s3://bucket/key@with-at") == "s3://bucket/key@with-at"
    for args in (["init"], ["tables"], ["sql", "SELECT 1"]):
        res = invoke(*args, "--lake", root)
        out = refused_in_one_line(res, "s3://bucket/lake")
        assert SECRET not in out and "AKIAEXAMPLE" not in out
    with pytest.raises(LakeError) as exc:
        Store(f"gs://user:{SECRET}@bucket/lake")
    assert SECRET not in str(exc.value)


# ------------------------------------------------------------------------------------------------ item 13
@pytest.fixture
def black_hole(monkeypatch, tmp_path):
    """An S3 endpoint that never answers: a listening socket that never accepts (its backlog of one fills, later
    connection attempts get no answer), with the AWS_* variables pointing at it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(0)
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{sock.getsockname()[1]}", "AWS_ACCESS_KEY_ID": "k",
           "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true",
           "LACHESIS_LOCK_DIR": str(tmp_path / "locks")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    yield env
    sock.close()


@pytest.mark.attack
def test_lake_serve_on_an_unreachable_store_is_one_line_within_seconds(black_hole, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    out = subprocess.run([LAKE_CLI, "serve", "--port", str(port), "--lake", "s3://bucket/lake"],
                         capture_output=True, text=True, timeout=120)
    took = time.monotonic() - t0
    text = out.stdout + out.stderr
    assert out.returncode == 2, text
    assert "Traceback" not in text and len(text.strip().splitlines()) == 1, text
    assert "lake at s3://bucket/lake" in text
    assert took < 40, f"{took:.1f} s"  # was 89-184 s (delta-rs retries); ~7 s here with a loaded machine's start-up


@pytest.mark.attack
def test_opening_or_creating_a_lake_on_an_unreachable_store_fails_fast(black_hole):
    for call in (Lake.init, Lake.open):
        t0 = time.monotonic()
        with pytest.raises(LakeError, match="lake at s3://bucket/lake") as exc:
            call("s3://bucket/lake")
        assert "\n" not in str(exc.value) and time.monotonic() - t0 < 15
