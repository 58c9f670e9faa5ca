"""An S3 emulator for the tests: moto's server (PyPI `moto[server]`) in its own process on loopback.

Its own process, not moto's ThreadedMotoServer in the test's: delta-rs holds the GIL in some calls
(`DeltaTable.history()` measured) while it waits for the server's answer, and a server thread in the same
interpreter then never answers (a deadlock). Every test gets a bucket of its own; the AWS_* variables point
the lake, its worker processes, polars and Daft at the emulator.
"""
from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest

KEY = "testing"  # moto accepts any credentials


@dataclass(frozen=True)
class Emulator:
    endpoint: str

    def env(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": KEY, "AWS_ENDPOINT_URL": self.endpoint,
                "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}

    def new_bucket(self) -> str:
        name = f"lake-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=KEY, aws_secret_access_key=KEY,
                     region_name="us-east-1").create_bucket(Bucket=name)
        return name


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3_emulator():
    port = _free_port()
    server = Path(sys.executable).with_name("moto_server")
    proc = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"moto_server did not start on {endpoint}") from None
            time.sleep(0.1)
    yield Emulator(endpoint)
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(params=["local", "s3"])
def any_lake_root(request, tmp_path, monkeypatch) -> str:
    """A lake root that does not exist yet: a local folder, or a prefix in a fresh bucket of the emulator (the
    AWS_* variables set, so worker processes inherit them)."""
    if request.param == "local":
        return str(tmp_path / "lake")
    emu = request.getfixturevalue("s3_emulator")
    for key, value in emu.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("LACHESIS_LOCK_DIR", str(tmp_path / "locks"))
    return f"s3://{emu.new_bucket()}/lake"
