"""`lake serve-model`'s options at start (issue 38 item 8): bounds on every option, one-line errors.

Before: `--follow` naming a file waited forever serving the base, `--served-name` with CR/LF was accepted (it goes
into every response's headers), `--threads 100000` made fork fail across the machine and then segfaulted, and
`--lake s3://` with the endpoint down was a 37-line traceback from uvicorn's startup.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from train_helpers import REPO

from serving.config import ServeModelConfig
from serving.errors import ServingError


@pytest.mark.attack
@pytest.mark.parametrize("kw, words", [
    ({"follow": "FILE"}, "not a folder"),
    ({"served_name": "tiny\r\nX-Injected: 1"}, "--served-name"),
    ({"served_name": "a@b"}, "--served-name"),
    ({"served_name": ""}, "--served-name"),
    ({"threads": 100000}, "per CPU"),
])
def test_bad_options_are_one_line(tmp_path, kw, words):
    if kw.get("follow") == "FILE":
        (tmp_path / "f").write_text("x")
        kw = {"follow": str(tmp_path / "f")}
    with pytest.raises(ServingError, match=words) as info:
        ServeModelConfig(record="off", **kw)
    assert "\n" not in str(info.value)


def test_options_within_the_bounds_pass():
    cfg = ServeModelConfig(record="off", served_name="my-model.v2", threads=os.cpu_count() or 1)
    assert cfg.served_name == "my-model.v2"


@pytest.mark.attack
@pytest.mark.parametrize("root", ["s3://bucket/lake", "s3://AKIAUSER:topsecret@bucket/lake"])
def test_an_unreachable_lake_at_start_is_one_line_without_the_secret(root):
    env = {**os.environ, "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "AKIA",
           "AWS_SECRET_ACCESS_KEY": "topsecret", "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
    r = subprocess.run([sys.executable, "-c", "from lachesis.cli import main; main()", "serve-model", "--lake", root,
                        "--port", "0", "--threads", "1"], capture_output=True, text=True, env=env, timeout=120,
                       cwd=str(REPO))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--lake" in lines[0], r.stderr
    assert "topsecret" not in r.stderr + r.stdout
