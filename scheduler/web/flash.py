"""One-time notices after an action ("retry of infer recorded as event 42 by olga").

A notice comes from the server only, never from the URL: a link such as
`/tasks/X?error=call+this+number` would otherwise show anyone's text as the
node's own. The POST that acted sets a short-lived cookie, signed with a key of
this process (HMAC-SHA256) and bound to the page it is for; that page shows it
once and clears it. It works the same with or without sessions (an open
loopback node has none). Other pages on the same host (cookies ignore the port)
can set our cookie but cannot sign one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import Request, Response

TTL_S = 60  # from the POST to its redirect's page: seconds
MAX_TEXT = 1000  # an engine error can be long; a cookie has ~4 KB


@dataclass(frozen=True, slots=True)
class Notice:
    message: str = ""
    error: str = ""

    def __bool__(self) -> bool:
        return bool(self.message or self.error)


class Flash:
    def __init__(
        self,
        *,
        cookie: str,
        tls: bool,
        key: bytes | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cookie = cookie
        self.tls = tls
        self._key = key if key is not None else secrets.token_bytes(32)
        self._clock = clock

    def set(self, response: Response, path: str, notice: Notice) -> None:
        """Show `notice` on the next load of `path` (within TTL_S)."""
        body = json.dumps(
            [path, notice.message[:MAX_TEXT], notice.error[:MAX_TEXT], self._clock() + TTL_S]
        ).encode()
        value = f"{_b64(body)}.{_b64(self._sign(body))}"
        response.set_cookie(
            self.cookie,
            value,
            max_age=TTL_S,
            path="/",
            httponly=True,
            samesite="strict",
            secure=self.tls,
        )

    def take(self, request: Request, path: str) -> Notice | None:
        """The notice for the page at `path`; None when there is no cookie to clear
        (none, or one for another page). Clear it on the page's response."""
        raw = request.cookies.get(self.cookie)
        return self._read(raw, path) if raw else None

    def clear(self, response: Response) -> None:
        response.delete_cookie(
            self.cookie, path="/", httponly=True, samesite="strict", secure=self.tls
        )

    def _read(self, raw: str, path: str) -> Notice | None:
        """None when the cookie is not for this page (left for its own); a forged,
        garbled or expired one reads as an empty notice (and is cleared)."""
        body_b64, _, sig_b64 = raw.partition(".")
        try:
            body = _unb64(body_b64)
            good = hmac.compare_digest(_unb64(sig_b64), self._sign(body))
            for_path, message, error, expires = json.loads(body) if good else ("", "", "", 0)
        except (ValueError, TypeError):
            return Notice()
        if not good or not isinstance(expires, int | float) or self._clock() >= expires:
            return Notice()
        if for_path != path:
            return None
        return Notice(message=str(message), error=str(error))

    def _sign(self, body: bytes) -> bytes:
        return hmac.new(self._key, body, hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
