"""What the worker deals in, as frozen records: an assignment, an outcome, a result.

The codec turns them into protobuf messages and back; nothing else in the worker
sees a message. Heartbeat details and results travel as JSON bytes, encoded where
they are made (the step's thread, or its child process), so that a value that
cannot be encoded fails there, as the step's own error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class Token(NamedTuple):
    """An attempt's name on the wire: the term and event id of its STEP_STARTED."""

    term: int
    event_id: int

    def __str__(self) -> str:
        return f"{self.term}.{self.event_id}"


@dataclass(frozen=True, slots=True)
class Durable:
    """What a durable main's attempt replays from: its journal as the primary holds it."""

    checkpoints_json: bytes  # a JSON list, in seq order
    wait_json: bytes  # the wait registered; empty: none
    first_event_id: int
    now_ms: int  # the primary's clock as it sent the assignment


@dataclass(frozen=True, slots=True)
class Assignment:
    """One attempt the primary asked this worker to run."""

    token: Token
    task_id: str
    step: str
    attempt: int
    workflow: str
    version: int
    input_json: bytes  # empty: no input (None)
    results_json: bytes  # the dependencies' results, a JSON object; empty: {}
    timeout_s: float  # 0: none given
    last_heartbeat_json: bytes  # the previous attempt's last heartbeat; empty: none
    node_id: str
    durable: Durable | None = None  # a durable main: its journal
    traceparent: str = ""  # the primary's span of this attempt (tracing.py)

    @property
    def label(self) -> str:
        """How log lines name the attempt: TASK/STEP #A."""
        return f"{self.task_id}/{self.step} #{self.attempt}"


@dataclass(frozen=True, slots=True)
class Succeeded:
    result_json: bytes


@dataclass(frozen=True, slots=True)
class Failed:
    """The step raised (or could not run). `declared`: it raised a StepError, whose
    details are `details_json`."""

    error_type: str
    message: str
    details_json: bytes = b""
    declared: bool = False
    # the qualified names of the exception's classes, most specific first: the
    # primary's retry rules match them (scheduler/cause.py); (): a failure of no class
    mro: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Cancelled:
    """Stopped as the primary asked: nothing of the attempt runs any more."""


CANCELLED = Cancelled()
Outcome = Succeeded | Failed | Cancelled


@dataclass(frozen=True, slots=True)
class Result:
    """How an attempt ended, kept until the primary acknowledges it."""

    token: Token
    task_id: str
    step: str
    attempt: int
    outcome: Outcome
    seconds: float

    @classmethod
    def of(cls, a: Assignment, outcome: Outcome, seconds: float) -> Result:
        return cls(a.token, a.task_id, a.step, a.attempt, outcome, seconds)


@dataclass(frozen=True, slots=True)
class Running:
    """An attempt still running here, as registration and heartbeats report it."""

    token: Token
    task_id: str
    step: str
    attempt: int
    heartbeat_json: bytes  # the latest ctx.heartbeat(details); empty: none yet


@dataclass(frozen=True, slots=True)
class Registration:
    """What the primary answered the Register with."""

    node_id: str
    term: int
    heartbeat_interval_s: float
    heartbeat_timeout_s: float
    stale: frozenset[Token]
    pings: bool = False  # it writes at least every interval (a frozen one does not)
    packed_results: bool = False  # it reads succeeded results in columns (worker.proto)
    name: str = ""  # what this worker is registered as ("": the name it asked for)


@dataclass(frozen=True, slots=True)
class Ack:
    token: Token
    accepted: bool
    reason: str


@dataclass(frozen=True, slots=True)
class Cancel:
    token: Token
    reason: str


@dataclass(frozen=True, slots=True)
class Assign:
    assignments: tuple[Assignment, ...]


@dataclass(frozen=True, slots=True)
class JournalAnswer:
    """The primary's reply to a durable main's journal request."""

    id: int
    error: str  # empty: done
    retry: bool  # not answerable now: ask again
    resolution_json: bytes  # a resolve's answer; empty: not yet
    renamed_json: bytes  # a record's children the log holds under another id
    now_ms: int


@dataclass(frozen=True, slots=True)
class Acks:
    acks: tuple[Ack, ...]


# What the primary sends after Registered.
Dispatch = Assign | Cancel | Acks | JournalAnswer
