"""The web pages' sessions: who signed in with which token, kept in the node's memory.

A browser proves itself once, with a bearer token from the tokens file, and
gets a random session id in a cookie. Everything else stays here, server-side:
the principal, the CSRF token its forms carry and the raw token itself (a
standby forwards actions to the primary with it, so the primary records the
same principal). The cookie alone reveals nothing and outlives nothing: a node
restart ends every session.

Every lookup re-checks the token against the tokens file as it is now, so a
line removed from it (and SIGHUP) ends that token's sessions at their next
request, and a changed role takes effect at once.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from apollo11.scheduler.security import Principal, Principals

TTL_S = 8 * 3600.0  # a working day; then sign in again
MAX_SESSIONS = 10_000  # a valid token signing in in a loop must not grow memory without end
# ... nor end everyone else's sessions: past this, a principal's own oldest go first
# (a browser or two per person, with room for many tabs' re-logins).
MAX_PER_PRINCIPAL = 20


@dataclass(frozen=True, slots=True)
class Session:
    sid: str
    principal: Principal
    # The bearer token, in memory only (never in a cookie, a page or a log): a standby
    # forwards actions with it, and each request re-checks it against the tokens file.
    token: str
    csrf: str  # rendered into every form of this session, checked on every POST
    expires: float  # on the monotonic clock


class Sessions:
    def __init__(
        self,
        principals: Principals,
        *,
        ttl_s: float = TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.principals = principals
        self.ttl_s = ttl_s
        self._clock = clock
        self._by_sid: dict[str, Session] = {}

    def __len__(self) -> int:
        return len(self._by_sid)

    def open(self, token: str) -> Session | None:
        """A new session for a valid token; None when the tokens file does not know it."""
        principal = self.principals.by_token(token)
        if principal is None:
            return None
        now = self._clock()
        self._prune(now, principal.name)
        session = Session(
            sid=secrets.token_urlsafe(32),
            principal=principal,
            token=token,
            csrf=secrets.token_urlsafe(32),
            expires=now + self.ttl_s,
        )
        self._by_sid[session.sid] = session
        return session

    def get(self, sid: str) -> Session | None:
        """The live session of `sid`, with its principal as the tokens file says now."""
        session = self._by_sid.get(sid)
        if session is None:
            return None
        if self._clock() >= session.expires:
            del self._by_sid[sid]
            return None
        principal = self.principals.by_token(session.token)
        if principal is None:  # revoked: removed from the file and reloaded
            del self._by_sid[sid]
            return None
        if principal != session.principal:  # its role (or name) changed in the file
            session = dataclasses.replace(session, principal=principal)
            self._by_sid[sid] = session
        return session

    def close(self, sid: str) -> None:
        self._by_sid.pop(sid, None)

    def _prune(self, now: float, name: str) -> None:
        for sid in [s for s, v in self._by_sid.items() if now >= v.expires]:
            del self._by_sid[sid]
        # dicts keep insertion order: oldest first
        mine = [s for s, v in self._by_sid.items() if v.principal.name == name]
        for sid in mine[: max(0, len(mine) - MAX_PER_PRINCIPAL + 1)]:
            del self._by_sid[sid]
        # the last resort, once many principals each hold their share
        while len(self._by_sid) >= MAX_SESSIONS:
            del self._by_sid[next(iter(self._by_sid))]
