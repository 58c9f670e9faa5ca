"""Helpers for the tests of `lake serve-model` (tests/test_serve_model*.py): a real uvicorn server on loopback in a
thread of the test process, and a tiny model taught one tool call by a short real SFT run."""
from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from pathlib import Path

from train_helpers import TOOLS  # noqa: F401  (re-exported for the tests)

TOOL_PROMPT = [{"role": "user", "content": "List the files."}]
TOOL_REPLY = {"role": "assistant", "content": "", "tool_calls": [{"name": "run", "arguments": {"command": "ls"}}]}


@contextlib.contextmanager
def running(config, engine=None, follower=None):
    """`lake serve-model` with `config` on a free loopback port; yields (base_url, app). The model is loaded first
    (serving.app.load_engine), as `serve` does."""
    import uvicorn

    from serving.app import create_app, load_engine, server_config

    if engine is None:
        engine, follower = load_engine(config)
    app = create_app(config, engine, follower)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(server_config(app, config))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def client(base_url: str, token: str = "unused"):
    import openai

    return openai.OpenAI(base_url=base_url + "/v1", api_key=token, max_retries=0, timeout=60)


def teach_tool_call(tiny_dir: Path, out: Path, steps: int = 100) -> Path:
    """The tiny model fine-tuned (full, 100 steps, ~6 s on one thread) on one conversation whose reply is
    `run(command="ls")`, saved with save_pretrained: greedy decoding of TOOL_PROMPT with TOOLS then emits that tool
    call in the Hermes format (a random tiny model emits no tool call at all)."""
    import torch

    from trainers.sft.config import SFTConfig
    from trainers.runtime.model_folder import TINY_MARKER
    from trainers.modeling.models import load_model, load_tokenizer
    from trainers.modeling.batches import encode_all
    from trainers.sft.loop import train_loop

    tok = load_tokenizer(str(tiny_dir))
    model = load_model(str(tiny_dir), device=torch.device("cpu"))
    conv = {"messages": TOOL_PROMPT + [TOOL_REPLY], "tools": TOOLS}
    examples, _ = encode_all(tok, [conv] * 4, 512)
    s = SFTConfig(data="-", max_steps=steps, batch_size=4, learning_rate=3e-3, full=True, progress=False, warmup_steps=0,
                  seed=0)
    train_loop(model, examples, s, tok.pad_token_id)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    (out / TINY_MARKER).write_text((tiny_dir / TINY_MARKER).read_text())
    return out


def lake_rows(root, where: str = "true") -> list[dict]:
    """The trajectories rows of a lake (metadata parsed), oldest first."""
    from lake import Lake

    with Lake.open(root).snapshot() as snap:
        rows = snap.arrow(f"SELECT trajectory_id, policy_version, model, messages, tokens, masks, inference_logprobs, "
                          f"metadata, occurred_at FROM trajectories WHERE {where} ORDER BY occurred_at, event_id"
                          ).to_pylist()
    for r in rows:
        r["metadata"] = json.loads(r["metadata"])
    return rows
