"""Where to connect next after a stream ends, and when: one decision, one sentence.

* A standby refuses the stream FAILED_PRECONDITION and names the primary in the
  `apollo11-leader` trailer: follow it at once.
* UNAVAILABLE (no primary yet, a node down) and anything else: the next endpoint.
  Each endpoint is tried in turn without waiting; after a whole round, wait about
  0.2 s, doubling to a cap of 1 s, with jitter. A new primary is then reached
  within about a second of it accepting writes, forever.
* A primary that fell silent (frozen: its socket open, nothing on it): it is
  passed over, and so are redirects to it, for SUSPECT_TRIES decisions, while the
  standbys elect another (a frozen primary is still the leader in etcd until its
  lease runs out); an answer saying an election is under way (the
  `apollo11-election` trailer) does not count, as the silent one is no longer the
  leader then. After that it is tried again, in case it was only slow, with a
  short wait for its answer (DOUBT_WAIT_S, doubling while it stays silent).
* ALREADY_EXISTS: another instance with this worker's name is connected. It may be
  this worker's own ghost (a stream the primary has not yet timed out), so retry,
  slowly, on the same primary.
* INVALID_ARGUMENT, PERMISSION_DENIED, UNAUTHENTICATED: the configuration is wrong
  (a bad label, a token without the worker role, a --name the credential may not
  use); retrying cannot help: stop.

`Reconnect.after` is pure but for the jitter source, and tested without a network.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import grpc

BASE_DELAY_S = 0.2
MAX_DELAY_S = 1.0
DUPLICATE_DELAY_S = 3.0
# Redirects in a row without a registration: two standbys naming each other (an
# election in progress) must not spin.
MAX_REDIRECTS = 3
# Decisions for which a silent primary is passed over: about three rounds of the
# other endpoints (0.2 + 0.4 + 0.8 s of waits), longer than an election takes.
SUSPECT_TRIES = 6
# The first wait for a Registered from it then (a live primary answers in far less),
# doubling each time it stays silent, up to the worker's connect timeout.
DOUBT_WAIT_S = 1.0

FATAL = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
    }
)


@dataclass(frozen=True, slots=True)
class Ended:
    """How a stream (or an attempt to open one) ended. `code` None: without a status
    (the primary sent nothing in time, or something this worker cannot read)."""

    endpoint: str
    code: grpc.StatusCode | None
    details: str
    leader: str | None = None
    registered: bool = False  # it got as far as Registered
    silent: bool = False  # the primary stopped talking (frozen), the stream still open
    election: bool = False  # the node said no primary is known: an election under way

    def describe(self) -> str:
        what = self.code.name if self.code is not None else "no status"
        return f"{what}: {self.details}" if self.details else what


@dataclass(frozen=True, slots=True)
class Next:
    """Connect to `endpoint` after `delay_s`; `sentence` says why (the log line)."""

    endpoint: str
    delay_s: float
    sentence: str
    # how long to wait for its Registered; None: the worker's connect timeout
    wait_s: float | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class GiveUp:
    """A configuration error: log `sentence` and exit non-zero."""

    sentence: str


class Reconnect:
    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        name: str,
        base_delay_s: float = BASE_DELAY_S,
        max_delay_s: float = MAX_DELAY_S,
        duplicate_delay_s: float = DUPLICATE_DELAY_S,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.endpoints = list(endpoints)
        self._name = name
        self._base = base_delay_s
        self._max = max_delay_s
        self._duplicate = duplicate_delay_s
        self._jitter = jitter
        self._cursor = 0  # the endpoint of the list tried last
        self._failures = 0  # in a row, since the last registration
        self._redirects = 0
        self._suspect: str | None = None  # a primary that fell silent: passed over
        self._suspect_tries = 0
        # ...and once the passes run out, tried with a short wait, doubling
        self._doubted: str | None = None
        self._doubts = 0

    def first(self) -> str:
        return self.endpoints[self._cursor]

    def _jittered(self, delay: float) -> float:
        return delay * (0.75 + 0.5 * self._jitter())  # +/- 25 %

    def after(self, ended: Ended) -> Next | GiveUp:
        ep = ended.endpoint
        if ended.registered:
            self._failures = 0
            self._redirects = 0
            self._suspect = None
            self._doubted, self._doubts = None, 0
        if ended.silent:
            self._suspect, self._suspect_tries = ep, SUSPECT_TRIES
            self._doubted, self._doubts = ep, 0
        elif ep == self._doubted and ended.code is None:
            # tried again and still no answer: passed over again, then a longer wait
            self._suspect, self._suspect_tries = ep, SUSPECT_TRIES
            self._doubts += 1
        elif ep == self._doubted:
            self._doubted, self._doubts = None, 0  # it answered (a status): alive
        elif self._suspect is not None and not ended.election:
            # (an election under way: the silent one's lease lapsed, it is not the
            # primary whatever else happens; the passes are kept for what follows)
            self._suspect_tries -= 1
            if self._suspect_tries <= 0:
                self._suspect = None  # perhaps it was only slow: it may be tried again
        if ended.code in FATAL:
            return GiveUp(
                f"{ep} refused this worker ({ended.describe()}): a configuration error "
                f"(labels, name, token or certificate); not retrying"
            )
        if ended.code is grpc.StatusCode.ALREADY_EXISTS:
            delay = self._jittered(self._duplicate)
            return Next(
                ep,
                delay,
                f"{ep} refused the name {self._name!r}: another worker instance with this name "
                f"is connected (if it is this worker's old stream it times out soon; otherwise "
                f"give each worker its own --name); retrying in {delay:.1f} s",
            )
        if (
            ended.code is grpc.StatusCode.FAILED_PRECONDITION
            and ended.leader
            and ended.leader != ep
            and ended.leader != self._suspect
            and self._redirects < MAX_REDIRECTS
        ):
            self._redirects += 1
            return self._next(
                ended.leader, 0.0, f"{ep} is not the primary: following it to {ended.leader}"
            )
        self._redirects = 0
        self._failures += 1
        if ep in self.endpoints:
            self._cursor = self.endpoints.index(ep)
        self._cursor = (self._cursor + 1) % len(self.endpoints)
        if self.endpoints[self._cursor] == self._suspect and len(self.endpoints) > 1:
            self._cursor = (self._cursor + 1) % len(self.endpoints)
        rounds, within = divmod(self._failures, len(self.endpoints))
        delay = 0.0
        if within == 0:  # a whole round failed: wait before the next
            delay = self._jittered(min(self._max, self._base * 2 ** max(0, rounds - 1)))
        nxt = self.endpoints[self._cursor]
        lost = "stream lost" if ended.registered else f"cannot connect to {ep}"
        return self._next(nxt, delay, f"{lost}: {ended.describe()}, reconnecting to {nxt}")

    def _next(self, endpoint: str, delay_s: float, sentence: str) -> Next:
        """A primary that fell silent and is tried again gets a short wait for its
        Registered: a frozen one would hold the worker for its whole connect timeout,
        past the new primary's wait for its workers (it adopts their running
        attempts for --worker-heartbeat-timeout, then runs them again)."""
        if endpoint != self._doubted:
            return Next(endpoint, delay_s, sentence)
        return Next(endpoint, delay_s, sentence, DOUBT_WAIT_S * 2**self._doubts)
