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

import pytest

from serve_model_helpers import client, running
from train_helpers import tiny_dir  # noqa: F401  (the session's tiny model)

from ingest.config import OptionError, resolve_tokens
from lake import Lake
from serving.config import ServeModelConfig

TOKENS = {"alice": "tok-alice-0123456789", "bob": "tok-bob-0123456789", "carol": "tok-carol-0123456789"}
FIRST = [{"role": "user", "content": "say something"}]


@pytest.fixture(scope="module")
def served(tiny_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("identity")
    token_file = tmp / "tokens"
    token_file.write_text("# one line per client\n" + "".join(f"{n} {t}\n" for n, t in TOKENS.items()))
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
    f.write_text("only-token\nnotes that were always ignored\n")
    assert resolve_tokens(None, f) == {"": "only-token"}
    f.write_text("a 1\n\n# b\nb 2\n")
    assert resolve_tokens(None, f) == {"a": "1", "b": "2"}
    assert resolve_tokens("x", None) == {"": "x"} and resolve_tokens("", None) == {}
    for text, match in [("a 1\nb\n", "line 2 is not `NAME TOKEN`"), ("a 1\na 2\n", "line 2 repeats"),
                        ("a 1\nb 1\n", "line 2 repeats"), ("a\x00b 1\n", "line 1 is not"), ("\n", "first line")]:
        f.write_text(text)
        with pytest.raises(OptionError, match=match):
            resolve_tokens(None, f)
    with pytest.raises(OptionError, match="one way"):
        resolve_tokens("x", f)
