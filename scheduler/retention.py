"""Retention: which finished tasks are due to be purged, as a pure decision.

    --retention "FAILED=90d,SUCCEEDED=7d,etl:*=30d,etl:FAILED=365d"
    --retention-from finish        # or submit

A rule is `KEY=DURATION`. KEY is a terminal status (SUCCEEDED, FAILED,
CANCELLED, COMPENSATED, NONDETERMINISTIC), `WORKFLOW:STATUS`, `WORKFLOW:*`
or `*`. The most specific rule of a task wins: its workflow and status, then
its workflow, then its status, then `*`. A task no rule names is kept for
ever: nothing is purged unless configured, since a purge cannot be undone.

Only finished tasks are ever due (a running task's history is still being
written), and never a held one (a legal hold, TASK_HELD). Finished means
quiescent, as the fold says it: a cancelled task still owing compensation or
with a step still running is not; nor is a child whose parent has not finished
(the parent may yet await it, and a purged child would leave it waiting for
ever). `refusal` is that test, and the fold (state/fold.py) refuses a
TASK_PURGED by the same one, so a primary never writes a purge a standby or a
replay would refuse. The age is counted
from the task's finish (its updated time, which for a finished task is the event
that finished it: the fold moves it for neither TASK_REDACTED nor TASK_HELD) or
from its submission, and compared with the
caller's `now_ms`: the log's clock on the primary, a fake one in the tests.

No I/O and no clock here: the sweep (scheduler/engine/retention.py) reads the
tasks and the time, asks `due`, and writes what it answers as TASK_PURGED; and
`forgettable`, which purged redacted tasks the state may stop remembering (written
in a TASK_PURGED's "forget").
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal, Protocol

from apollo11.scheduler.schedules import format_duration, parse_duration
from apollo11.scheduler.taskstatus import TaskStatus

From = Literal["finish", "submit"]
FROM: tuple[From, ...] = ("finish", "submit")
ANY = "*"
FINISHED = frozenset(
    {
        TaskStatus.SUCCEEDED,
        TaskStatus.FAILED,
        TaskStatus.CANCELLED,
        TaskStatus.NONDETERMINISTIC,
        TaskStatus.COMPENSATED,
    }
)
MAX_RULES = 1000
EXAMPLE = "FAILED=90d,SUCCEEDED=7d,etl:*=30d,etl:FAILED=365d"


class Finished(Protocol):
    """What the decision reads of a task (a listing's Summary has it all)."""

    @property
    def task_id(self) -> str: ...
    @property
    def workflow(self) -> str: ...
    @property
    def status(self) -> TaskStatus: ...
    @property
    def submitted_ms(self) -> int: ...
    @property
    def updated_ms(self) -> int: ...


class Resting(Protocol):
    """What the quiescence test reads of a task (state/model.py's TaskState has it)."""

    @property
    def task_id(self) -> str: ...
    @property
    def status(self) -> TaskStatus: ...
    @property
    def busy(self) -> int: ...
    @property
    def owed(self) -> int: ...


def refusal(task: Resting, parent: Resting | None, *, held: bool) -> str | None:
    """Why `task` may not be purged now (None: it may). `parent` is the task that spawned
    it, if that one is still known (a purged parent awaits nothing)."""
    if held:
        return "held"
    status = task.status.value
    if task.status not in FINISHED:
        return f"{status}, not finished"
    if task.busy:
        return f"{status}, a step still running"
    if task.owed:
        return f"{status}, still owing compensation"
    if parent is not None and (parent.status not in FINISHED or parent.busy or parent.owed):
        return f"its parent {parent.task_id!r} has not finished ({parent.status.value})"
    return None


def forgettable(
    redacted: Mapping[str, int],
    present: Callable[[str], bool],
    settled: Callable[[str, int], bool],
    limit: int | None = None,
) -> list[str]:
    """The redacted tasks (`redacted`: task id -> its TASK_REDACTED) whose entries may
    leave the state, oldest redaction first, at most `limit`: those retention purged
    (no longer `present`) whose records are `settled`, rewritten on this primary's disk
    and in the bucket. Their bytes carry the markers then, so nothing reads the entry
    again; a task still in the state keeps it (its answers hide the data from it)."""
    out: list[str] = []
    for task_id, rid in sorted(redacted.items(), key=lambda kv: kv[1]):
        if limit is not None and len(out) >= limit:
            break
        if not present(task_id) and settled(task_id, rid):
            out.append(task_id)
    return out


@dataclass(frozen=True, slots=True)
class Rules:
    """Parsed retention rules: (workflow or ANY, status or ANY) -> kept for, in ms."""

    keep_ms: tuple[tuple[tuple[str, str], int], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.keep_ms)

    def keep_for(self, workflow: str, status: TaskStatus) -> int | None:
        """How long a task of `workflow` that ended `status` is kept (ms); None: for ever."""
        if status not in FINISHED:
            return None
        table = dict(self.keep_ms)
        for key in ((workflow, status.value), (workflow, ANY), (ANY, status.value), (ANY, ANY)):
            found = table.get(key)
            if found is not None:
                return found
        return None

    def text(self) -> str:
        """The canonical spelling (what `parse` reads back to the same Rules)."""
        return ",".join(
            f"{_key_text(wf, st)}={format_duration(timedelta(milliseconds=ms))}"
            for (wf, st), ms in self.keep_ms
        )


def _key_text(workflow: str, status: str) -> str:
    if workflow == ANY:
        return status
    return f"{workflow}:{status}"


def parse(text: str) -> Rules:
    """`text` as rules; ValueError names the rule that is wrong and why."""
    found: dict[tuple[str, str], int] = {}
    parts = [p.strip() for p in text.split(",")] if text.strip() else []
    if len(parts) > MAX_RULES:
        raise ValueError(f"at most {MAX_RULES} rules, got {len(parts)}")
    for part in parts:
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise ValueError(f"rule {part!r} is not KEY=DURATION (like {EXAMPLE})")
        workflow, colon, status = key.rpartition(":")
        if not colon:
            workflow, status = ANY, key
        elif not workflow:
            raise ValueError(f"rule {part!r} names no workflow before ':'")
        if status != ANY and status not in {s.value for s in FINISHED}:
            raise ValueError(
                f"rule {part!r}: {status!r} is not a finished status "
                f"({', '.join(sorted(s.value for s in FINISHED))} or *)"
            )
        try:
            seconds = int(parse_duration(value).total_seconds())
        except ValueError as e:
            raise ValueError(f"rule {part!r}: {e}") from None
        if seconds <= 0:
            raise ValueError(f"rule {part!r}: a retention must be longer than 0s")
        if (workflow, status) in found:
            raise ValueError(f"rule {part!r}: {key!r} is named twice")
        found[(workflow, status)] = seconds * 1000
    return Rules(tuple(sorted(found.items())))


def age_ms(task: Finished, now_ms: int, counted_from: From) -> int:
    """How old the task is, counted from its finish or its submission."""
    start = task.updated_ms if counted_from == "finish" else task.submitted_ms
    return now_ms - start


def is_due(rules: Rules, task: Finished, now_ms: int, counted_from: From = "finish") -> bool:
    """Whether `task` is past its retention at `now_ms` (a held task: ask `due`)."""
    keep = rules.keep_for(task.workflow, task.status)
    return keep is not None and age_ms(task, now_ms, counted_from) >= keep


def due(
    rules: Rules,
    tasks: Iterable[Finished],
    now_ms: int,
    *,
    held: Container[str] = frozenset(),
    counted_from: From = "finish",
    limit: int | None = None,
    refused: Callable[[str], str | None] | None = None,
) -> list[str]:
    """The ids of `tasks` to purge now, in the order given, at most `limit`: those past
    their retention, not held, and not `refused` (asked only of a task otherwise due: the
    caller's `refusal` of it, which reads the task and its parent)."""
    out: list[str] = []
    if not rules:
        return out
    for t in tasks:
        if limit is not None and len(out) >= limit:
            break
        if t.task_id in held or not is_due(rules, t, now_ms, counted_from):
            continue
        if refused is None or refused(t.task_id) is None:
            out.append(t.task_id)
    return out
