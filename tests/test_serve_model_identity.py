"""Recording integrity across clients (issue 38 item 5): a conversation is joined only within one client identity
(one named token per client in --token-file), and the session value that continues a conversation is issued by the
server (an HMAC of the trajectory id and the identity, never in the lake), so knowing a trajectory id or another
client's session value never writes into that conversation.

Before: two clients sending the same first turn at temperature 0 were one trajectory (the first client's
continuation landed under the second client's id); a third client replaying a known first turn and reply appended
its turn to that trajectory; another client's `X-Lachesis-Session` wrote into the conversation and replaced its
current row.
"""
from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from serve_model_helpers import client, running
from train_helpers import tiny_dir  # noqa: F401  (the session's tiny model)

from edge.errors import OptionError
from edge.tokens import resolve_tokens
from lake import Lake
from serving.config import ServeModelConfig
from tests.ingest_helpers import lake_cmd

TOKENS = {"alice": "tok-alice-0123456789", "bob": "tok-bob-0123456789", "carol": "tok-carol-0123456789"}
# a one-word comment first (Hardening IV item 2: it was the only token, and every client after it got a 401)
TOKEN_FILE = "#clients\n# one line per client\n" + "".join(f"{n} {t}\n" for n, t in TOKENS.items())
FIRST = [{"role": "user", "content": "say something"}]


@pytest.fixture(scope="module")
def served(tiny_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("identity")
    token_file = tmp / "tokens"
    token_file.write_text(TOKEN_FILE)
    cfg = ServeModelConfig(model="tiny", lake_root=str(tmp / "lake"), threads=1, token_file=token_file)
    with running(cfg) as (url, app):
        yield url, app, tmp / "lake"


def _ask(url: str, who: str, messages: list[dict], session: str | None = None):
    """(trajectory id, issued session, reply message) of one greedy call by `who`."""
    raw = client(url, TOKENS[who]).chat.completions.with_raw_response.create(
        model="tiny", messages=messages, max_tokens=4, temperature=0,
        extra_headers={"X-Lachesis-Session": session} if session else None)
    msg = raw.parse().choices[0].message
    return raw.headers["x-lachesis-trajectory"], raw.headers["x-lachesis-session"], \
        {"role": "assistant", "content": msg.content or ""}


def _rows(lake, tid: str) -> list[dict]:
    with Lake.open(lake).snapshot() as snap:
        rows = snap.arrow(f"SELECT messages, metadata FROM trajectories WHERE trajectory_id = '{tid}' "
                          "ORDER BY occurred_at").to_pylist()
    return [{**r, "metadata": json.loads(r["metadata"])} for r in rows]


def _current(lake, tid: str) -> list[str]:
    with Lake.open(lake).snapshot() as snap:
        (row,) = snap.arrow(f"SELECT messages FROM trajectories_current WHERE trajectory_id = '{tid}'").to_pylist()
    return [m["content"] for m in row["messages"]]


@pytest.mark.attack
def test_two_clients_with_the_same_first_turn_at_temperature_0_are_two_trajectories(served):
    url, _, lake = served
    first = [{"role": "user", "content": "the same first turn"}]
    tid_a, _, reply_a = _ask(url, "alice", first)
    tid_b, _, reply_b = _ask(url, "bob", first)
    assert reply_a == reply_b  # greedy: the same reply, so the conversations' prefixes are identical
    assert tid_a != tid_b
    on_a, _, _ = _ask(url, "alice", first + [reply_a, {"role": "user", "content": "alice goes on"}])
    on_b, _, _ = _ask(url, "bob", first + [reply_b, {"role": "user", "content": "bob goes on"}])
    assert (on_a, on_b) == (tid_a, tid_b)  # each continuation under its own client's trajectory
    assert _current(lake, tid_a)[-2] == "alice goes on" and _current(lake, tid_b)[-2] == "bob goes on"
    assert {r["metadata"]["client"] for r in _rows(lake, tid_a)} == {"alice"}


@pytest.mark.attack
def test_a_third_client_replaying_a_known_first_turn_and_reply_starts_its_own_trajectory(served):
    url, _, lake = served
    first = [{"role": "user", "content": "a first turn carol has seen"}]
    tid_a, _, reply = _ask(url, "alice", first)
    before = _current(lake, tid_a)
    tid_c, _, _ = _ask(url, "carol", first + [reply, {"role": "user", "content": "carol's own turn"}])
    assert tid_c != tid_a
    assert _current(lake, tid_a) == before and len(_rows(lake, tid_a)) == 1


@pytest.mark.attack
@pytest.mark.parametrize("value", ["issued", "trajectory_id", "forged_mac", "chosen_name"])
def test_another_clients_session_value_never_writes_into_its_conversation(served, value):
    url, _, lake = served
    tid_a, issued, reply = _ask(url, "alice", [{"role": "user", "content": f"alice's conversation {value}"}],
                                session="alice-chat" if value == "chosen_name" else None)
    session = {"issued": issued, "trajectory_id": tid_a, "forged_mac": issued[:-8] + "00000000",
               "chosen_name": "alice-chat"}[value]
    before = _current(lake, tid_a)
    tid_b, _, _ = _ask(url, "bob", [{"role": "user", "content": "bob writes"}], session=session)
    assert tid_b != tid_a
    assert _current(lake, tid_a) == before and len(_rows(lake, tid_a)) == 1


@pytest.mark.attack
def test_the_issued_session_continues_its_own_conversation_and_is_not_in_the_lake(served):
    url, _, lake = served
    tid, issued, _ = _ask(url, "alice", [{"role": "user", "content": "first"}])
    assert issued != tid and tid in issued  # a value of its own, checked with the server's secret
    again, issued2, _ = _ask(url, "alice", [{"role": "user", "content": "an unrelated second message"}],
                             session=issued)
    assert (again, issued2) == (tid, issued)
    rows = _rows(lake, tid)
    assert [r["metadata"]["call"] for r in rows] == [0, 1]
    assert all(r["metadata"]["session"] is None and issued not in str(r) for r in rows)


@pytest.mark.attack
def test_after_a_restart_conversations_are_joined_within_their_client_only(served, tmp_path):
    """The recorded calls read back at start (recent_calls.sql) carry their client: another client's replay of a
    conversation recorded before the restart does not join it; the client's own continuation does."""
    from serving.record import Conversations

    url, _, lake = served
    first = [{"role": "user", "content": "before the restart"}]
    tid_a, _, reply = _ask(url, "alice", first)
    fresh = Conversations()
    fresh.load(Lake.open(lake))
    go_on = first + [reply, {"role": "user", "content": "after it"}]
    assert fresh.join(go_on, None, identity="alice")[0] == tid_a
    assert fresh.join(go_on, None, identity="carol")[0] != tid_a


@pytest.mark.attack
def test_a_wrong_token_is_refused_with_several_clients(served):
    import httpx

    url, _, _ = served
    for auth in ("Bearer tok-alice", "Bearer " + TOKENS["alice"] + "x", "alice " + TOKENS["alice"], ""):
        r = httpx.get(url + "/v1/models", headers={"Authorization": auth} if auth else {})
        assert r.status_code == 401, auth
    assert httpx.get(url + "/v1/models", headers={"Authorization": "Bearer " + TOKENS["bob"]}).status_code == 200


def test_token_files(tmp_path):
    f = tmp_path / "t"
    f.write_text("only-token\n")
    assert resolve_tokens(None, f) == {"only-token": ""}
    f.write_text("\ufeff# clients\n\na 1\n\n  # b\nb 2\n")
    assert resolve_tokens(None, f) == {"1": "a", "2": "b"}
    f.write_text("\n   only-token   \n# that was it\n")
    assert resolve_tokens(None, f) == {"only-token": ""}
    assert resolve_tokens("x", None) == {"x": ""} and resolve_tokens("", None) == {}
    with pytest.raises(OptionError, match="one way"):
        resolve_tokens("x", f)


def test_a_token_is_looked_up_by_its_digest_whatever_the_number_of_clients(tmp_path):
    """One dict lookup per request (ingest/config.py Tokens), not one comparison per client: 20,000 clients."""
    f = tmp_path / "t"
    f.write_text("".join(f"client{i} tok-{i:06d}-abcdefgh\n" for i in range(20_000)))
    tokens = resolve_tokens(None, f)
    start = time.perf_counter()
    found = [tokens.client(f"Bearer tok-{i:06d}-abcdefgh") for i in range(20_000)]
    assert time.perf_counter() - start < 2  # one comparison per client per request: 400 million comparisons
    assert found == [f"client{i}" for i in range(20_000)]
    for wrong in ("Bearer tok-000001-abcdefg", "bearer tok-000001-abcdefgh", "tok-000001-abcdefgh", "Bearer ", ""):
        assert tokens.client(wrong) is None, wrong


# Hardening IV items 1-2: one grammar, every other file refused at start with one line naming its line
REFUSED_FILES = [
    ("all-comments", "# clients\n#\n\n   # nobody yet\n", "no token in it"),
    ("empty", "", "no token in it"),
    ("bare-name-then-named", "clients\nalice tok-a\nbob tok-b\n", "line 2 is a second token after the bare token"),
    ("named-then-bare", "alice tok-a\n  tok-b\n", "line 2 is a bare token among"),
    ("two-bare-tokens", "tok-a\ntok-b\n", "line 2 is a second token"),
    ("duplicate-token", "# c\nalice tok-a\nbob tok-a\n", "line 3 repeats a client's token"),
    ("duplicate-name", "alice tok-a\n\nalice tok-b\n", "line 3 repeats a client's name"),
    ("three-words", "alice tok-a\nbob tok b\n", "line 2 is neither"),
    ("old-style-notes", "only-token\nnotes that were always ignored\n", "line 2 is neither"),
    ("bad-name", "al/ice tok-a\n", "line 1 is neither"),
    ("nul-in-name", "a\x00b 1\n", "line 1 is neither"),
    ("control-in-token", "alice tok\x01a\n", "line 1 is neither"),
    ("non-ascii-token", "alice tok-\u00e9\n", "line 1 is neither"),
]


@pytest.mark.attack
@pytest.mark.parametrize("text, match", [c[1:] for c in REFUSED_FILES], ids=[c[0] for c in REFUSED_FILES])
def test_a_file_that_is_not_a_token_file_is_refused(tmp_path, text, match):
    f = tmp_path / "tokens"
    f.write_text(text)
    with pytest.raises(OptionError, match=match) as caught:
        resolve_tokens(None, f)
    assert "\n" not in str(caught.value) and str(f) in str(caught.value)
    with pytest.raises(OptionError, match=match):  # lake serve-model refuses it before loading a model
        ServeModelConfig(model="tiny", record="off", token_file=f)


@pytest.mark.attack
@pytest.mark.parametrize("kind", ["fifo", "device", "folder", "oversized", "binary"])
def test_a_token_file_that_is_no_regular_small_file_is_refused_before_it_is_read(tmp_path, kind):
    f = tmp_path / "tokens"
    if kind == "fifo":
        os.mkfifo(f)  # opened for reading, it would wait for a writer forever: the start would hang
    elif kind == "device":
        f = Path("/dev/zero")  # read whole, it would never end
    elif kind == "folder":
        f.mkdir()
    elif kind == "oversized":
        f.write_text("alice tok-a\n" + "#" * (2 << 20) + "\n")
    else:
        f.write_bytes(b"alice tok-\xff\xfe\n")
    why = {"fifo": "a FIFO", "device": "a character device", "folder": "a folder", "oversized": "too large",
           "binary": "not UTF-8"}[kind]
    done: list = []
    reader = threading.Thread(target=lambda: done.append(_refusal(f)), daemon=True)
    reader.start()
    reader.join(timeout=20)
    if reader.is_alive() and kind == "fifo":
        with open(f, "w"):  # let the blocked reader go
            pass
    assert done and why in done[0], done


def _refusal(path: Path) -> str:
    try:
        resolve_tokens(None, path)
    except OptionError as exc:
        return str(exc)
    return "accepted"


@pytest.mark.attack
def test_named_clients_after_a_one_word_comment_each_get_in(served):
    """`#clients` on the first line was the only token: anyone sending it got in, and alice, bob and carol got
    401s. Now it is a comment."""
    import httpx

    url, _, _ = served
    for name, token in TOKENS.items():
        assert httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {token}"}).status_code == 200, name
    for wrong in ("Bearer #clients", "Bearer clients", None):
        r = httpx.get(url + "/v1/models", headers={"Authorization": wrong} if wrong else {})
        assert r.status_code == 401, wrong


@pytest.mark.attack
@pytest.mark.parametrize("kind", ["all-comments", "fifo"])
def test_lake_serve_model_stops_at_start_on_a_file_with_no_token(tmp_path, kind):
    """An all-comment file started the server with auth off (an anonymous GET /v1/models was a 200)."""
    f = tmp_path / "tokens"
    if kind == "fifo":
        os.mkfifo(f)
    else:
        f.write_text("# the clients of this server\n#\n")
    r = subprocess.run(lake_cmd() + ["serve-model", "--model", "tiny", "--record", "off", "--port", "0",
                                     "--token-file", str(f)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"error: --token-file {f}: ") and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.stderr and "ready at" not in r.stderr
