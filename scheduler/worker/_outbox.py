"""Results kept until the primary acknowledges them.

A result is sent once on the stream it was made for and kept: a stream can break
after the send and before the primary wrote the result down. After every
reconnect, everything not yet acknowledged goes again (the primary applies a
result only if its token is the step's current attempt, so a repeat is harmless).
An acknowledgement, accepted or refused, is the end of it.
"""

from __future__ import annotations

from apollo11.scheduler.worker._records import Result, Token


class Outbox:
    def __init__(self) -> None:
        self._kept: dict[Token, Result] = {}  # not yet acknowledged, oldest first
        self._unsent: list[Token] = []

    def put(self, result: Result) -> None:
        self._kept[result.token] = result
        self._unsent.append(result.token)

    def take_unsent(self) -> list[Result]:
        """Everything finished since the last send, for one Results message."""
        batch = [self._kept[t] for t in dict.fromkeys(self._unsent) if t in self._kept]
        self._unsent.clear()
        return batch

    def take_all(self) -> list[Result]:
        """Everything not acknowledged, to send again on a new stream."""
        self._unsent.clear()
        return list(self._kept.values())

    def acknowledge(self, token: Token) -> Result | None:
        return self._kept.pop(token, None)

    def forget(self, token: Token) -> None:
        self._kept.pop(token, None)

    def holds(self, token: Token) -> bool:
        return token in self._kept

    def __len__(self) -> int:
        return len(self._kept)
