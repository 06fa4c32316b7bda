"""The web sessions, in process: expiry, revocation and role changes on reload."""

from __future__ import annotations

from pathlib import Path

import pytest

from apollo11.scheduler.security import Principals, Role, create_token
from apollo11.scheduler.security.tokens import revoke
from apollo11.scheduler.web import sessions as sessions_mod
from apollo11.scheduler.web.sessions import Sessions


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def tokens(tmp_path: Path) -> Path:
    return tmp_path / "tokens"


def test_a_session_for_a_valid_token_only(tokens: Path) -> None:
    token = create_token(tokens, "olga", Role.OPERATOR)
    s = Sessions(Principals(tokens))
    assert s.open("a11_wrong") is None and len(s) == 0
    session = s.open(token)
    assert session is not None and session.principal.name == "olga"
    assert session.sid != session.csrf and token not in (session.sid, session.csrf)
    again = s.open(token)
    assert again is not None and again.sid != session.sid, "every sign-in is a new session"
    assert s.get(session.sid) == session
    assert s.get("nope") is None


def test_sessions_expire(tokens: Path) -> None:
    token = create_token(tokens, "olga", Role.OPERATOR)
    clock = Clock()
    s = Sessions(Principals(tokens), ttl_s=60, clock=clock)
    session = s.open(token)
    assert session is not None
    clock.now += 59
    assert s.get(session.sid) is not None
    clock.now += 1
    assert s.get(session.sid) is None and len(s) == 0


def test_reload_revokes_and_changes_roles(tokens: Path) -> None:
    keep = create_token(tokens, "olga", Role.OPERATOR)
    gone = create_token(tokens, "temp", Role.OPERATOR)
    principals = Principals(tokens)
    s = Sessions(principals)
    a, b = s.open(keep), s.open(gone)
    assert a is not None and b is not None
    revoke(tokens, "temp")
    assert s.get(b.sid) is not None, "nothing changes until the file is reloaded"
    principals.reload()
    assert s.get(b.sid) is None, "a removed token ends its sessions"
    assert s.get(a.sid) is not None
    # the same token, now a reader: the session's role follows the file
    text = tokens.read_text().replace(" operator ", " reader ")
    tokens.write_text(text)
    principals.reload()
    now = s.get(a.sid)
    assert now is not None and now.principal.role is Role.READER


def test_the_number_of_sessions_is_capped(tokens: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessions_mod, "MAX_SESSIONS", 3)
    token = create_token(tokens, "olga", Role.OPERATOR)
    s = Sessions(Principals(tokens))
    opened = [s.open(token) for _ in range(5)]
    assert len(s) == 3
    assert [s.get(x.sid) is not None for x in opened if x] == [False, False, True, True, True]


def test_one_token_signing_in_in_a_loop_evicts_only_its_own_sessions(
    tokens: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Red-team: 10,000 sign-ins with a reader token evicted every other session,
    the operators' included. Each principal now has a cap of its own."""
    monkeypatch.setattr(sessions_mod, "MAX_SESSIONS", 6)
    monkeypatch.setattr(sessions_mod, "MAX_PER_PRINCIPAL", 3, raising=False)
    operator = create_token(tokens, "olga", Role.OPERATOR)
    reader = create_token(tokens, "rita", Role.READER)
    s = Sessions(Principals(tokens))
    olga = s.open(operator)
    assert olga is not None
    flood = [s.open(reader) for _ in range(20)]
    assert s.get(olga.sid) is not None, "another principal's sign-ins do not end olga's"
    alive = [x is not None and s.get(x.sid) is not None for x in flood]
    assert alive == [False] * 17 + [True] * 3, "rita's oldest go first"
    assert len(s) == 4
