"""The index: every task, found by id, idempotency key, event key and page.

`State` holds the tasks in memory and reaches the rest through a `TaskStore`
(the archive, state/archive.py): `task` faults one back in, `peek` reads one
without, `list_summaries` pages both newest first. It also keeps what the fold
derives to answer quickly: idempotency keys, the external events by key, and
which tasks wait on which key (`reindex` rebuilds that after a snapshot).

Below the fold (state/fold.py), above the model (state/model.py).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from apollo11.scheduler import retention as _retention
from apollo11.scheduler import waits as _waits
from apollo11.scheduler.state.model import DURATION_HISTORY, TERMINAL, TaskState
from apollo11.scheduler.state.occupancy import Occupancy
from apollo11.scheduler.state.schedule import ScheduleState
from apollo11.scheduler.state.tasktable import TaskTable
from apollo11.scheduler.taskstatus import StepStatus as StepStatus
from apollo11.scheduler.taskstatus import TaskStatus


class Summary(NamedTuple):
    """A task in one line, for listings."""

    task_id: str
    workflow: str
    status: TaskStatus
    submitted_ms: int
    updated_ms: int
    done: int
    total: int


def summarize(t: TaskState) -> Summary:
    return Summary(
        t.task_id, t.workflow, t.status, t.submitted_ms, t.updated_ms, t.done, len(t.steps)
    )


class TaskStore:
    """Where tasks that are not in memory live (the snapshot archive).

    Replay only needs `get`: a task evicted from memory comes back when an
    event names it again. The store is immutable derived data, so reading it
    does not break determinism.
    """

    def get(self, task_id: str) -> TaskState | None:
        raise NotImplementedError

    def __contains__(self, task_id: str) -> bool:
        raise NotImplementedError

    def iter_tasks(self) -> Iterator[TaskState]:
        raise NotImplementedError

    def task_for_key(self, key: str) -> TaskState | None:
        """The newest archived task submitted with idempotency key `key`."""
        raise NotImplementedError

    def summaries_before(self, before: str | None) -> Iterator[tuple[str, int, Summary]]:
        """(task_id, -rank, summary), newest task id first; ranks from 1, newest copy
        first; a task may come several times (see State.list_summaries)."""
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError


LIST_SCAN_LIMIT = 20_000  # tasks one listing call looks at, at most (~40 ms on the loop)


def _row_key(row: tuple[str, int, Summary]) -> tuple[str, int]:
    return row[0], row[1]


@dataclass(slots=True)
class State:
    """Everything the log says, as of `last_event_id`."""

    tasks: TaskTable = field(default_factory=TaskTable)  # in memory, ids kept sorted
    last_event_id: int = 0
    term: int = 0
    terms: list[tuple[int, int]] = field(default_factory=list)  # (term, its first event id)
    # idempotency key -> task id, for the tasks in memory (the archive indexes the rest)
    idempotency: dict[str, str] = field(default_factory=dict)
    # workflow -> step -> recent durations in ms, newest last (what timeout="auto" reads)
    durations: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    anomalies: list[str] = field(default_factory=list)  # about events naming no known task
    archive: TaskStore | None = None
    # External events (EVENT records): key -> [(event_id, payload)] in log order, and
    # idempotency key -> the event it recorded (a duplicate is recorded once).
    events: dict[str, list[tuple[int, Any]]] = field(default_factory=dict)
    event_keys: dict[str, int] = field(default_factory=dict)
    # an event idempotency key's end (ms, the log's clock: the EVENT's time plus the TTL it
    # recorded); gone from event_keys then, at the next EVENT. None: kept (older logs).
    event_key_expires: dict[str, int] = field(default_factory=dict)
    # Derived (rebuilt by load_events): (expires, key), earliest first
    event_key_heap: list[tuple[int, str]] = field(default_factory=list, compare=False)
    # Derived (not serialized; `reindex` rebuilds it): event key -> the tasks waiting on it.
    waits: dict[str, set[str]] = field(default_factory=dict)
    # Schedules (state/schedule.py), by id: the ones deleted are gone.
    schedules: dict[str, ScheduleState] = field(default_factory=dict)
    # Flow control (state/occupancy.py): who holds which limit, rates' arrival times,
    # the operators' runtime limits and weights.
    occupancy: Occupancy = field(default_factory=Occupancy)
    # Redacted tasks (scheduler/log/redact.py): task id -> its TASK_REDACTED's event id,
    # so that a read of the log's events knows which payloads to hide.
    redacted: dict[str, int] = field(default_factory=dict)
    # ... and the ids of its records before that event, the ones each member (and the
    # bucket) rewrites: kept here, not looked up on the task, which a purge drops.
    # Absent for a task from a snapshot older than per-task event ids.
    redacted_records: dict[str, list[int]] = field(default_factory=dict)
    # The record ids of the tasks retention purged (the last PURGED_REMEMBERED, oldest
    # first): their records stay in the segments and the bucket, so an erasure request
    # for one is still carried out (a TASK_REDACTED of a purged task).
    purged_records: dict[str, list[int]] = field(default_factory=dict)
    # Retention (docs/retention.md). Legal holds: task id -> {"by", "reason", "at_ms",
    # "event_id"}; a held task is never purged.
    holds: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The last PURGED_REMEMBERED tasks purged: task id -> its TASK_PURGED's id, oldest
    # first, so that asking for one answers "purged by retention", not "no task".
    purged: dict[str, int] = field(default_factory=dict)
    # Purged tasks an archive chunk may still hold: hidden from every read until the
    # next snapshot rewrites those chunks without them (state/snapshot.py), then
    # forgotten. Storage, not logic: not in `to_dict`.
    tombstones: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if not isinstance(self.tasks, TaskTable):  # a plain dict handed in
            self.tasks = TaskTable(self.tasks)

    def retention_dict(self) -> dict[str, Any]:
        """Holds and purges as JSON (snapshots); {} when there are none."""
        out: dict[str, Any] = {}
        if self.holds:
            out["holds"] = dict(sorted(self.holds.items()))
        if self.purged:
            out["purged"] = [[k, v] for k, v in self.purged.items()]  # in purge order
        if self.tombstones:
            out["tombstones"] = sorted(self.tombstones)
        return out

    def load_retention(self, d: Mapping[str, Any]) -> None:
        """Restore what `retention_dict` wrote (the snapshot's state document)."""
        self.holds = {k: dict(v) for k, v in (d.get("holds") or {}).items()}
        self.purged = {str(k): int(v) for k, v in d.get("purged") or ()}
        self.tombstones = set(d.get("tombstones") or ())

    def not_found(self, task_id: str, as_of: int = 0) -> str:
        """What to answer for a task that is not here (or was not, `as_of` an event id):
        purged by retention, when this node remembers it (its history went with it),
        else no such task."""
        at = self.purged.get(task_id)
        if at is not None:
            return f"task {task_id!r} was purged by retention (event {at})"
        return f"no task {task_id!r}" + (f" as of event {as_of}" if as_of else "")

    def purge_refused(self, task_id: str) -> str | None:
        """Why retention may not purge this task now (None: it may; "unknown" when it is
        not here): the one test the sweep asks before writing a TASK_PURGED and the fold
        applies when it reads one (retention.refusal)."""
        task = self.peek(task_id)
        return "unknown" if task is None else self.purge_refusal(task)

    def purge_refusal(self, task: TaskState) -> str | None:
        """`purge_refused` of a task already read."""
        parent_id = (task.parent or {}).get("task_id")
        parent = self.peek(str(parent_id)) if parent_id else None
        return _retention.refusal(task, parent, held=task.task_id in self.holds)

    def first_event(self, key: str, since: int) -> tuple[int, Any] | None:
        """The first event with `key` at or after event id `since`: (event_id, payload)."""
        refs = self.events.get(key)
        if not refs:
            return None
        i = bisect.bisect_left(refs, since, key=_ref_id)
        return refs[i] if i < len(refs) else None

    def events_dict(self) -> dict[str, Any]:
        """The event index as JSON (snapshots, `to_dict`); {} when there is none."""
        if not self.events:
            return {}
        out: dict[str, Any] = {
            "by_key": {k: [list(r) for r in v] for k, v in sorted(self.events.items())},
            "keys": dict(sorted(self.event_keys.items())),
        }
        if self.event_key_expires:
            out["expires"] = dict(sorted(self.event_key_expires.items()))
        return {"events": out}

    def redacted_dict(self) -> dict[str, Any]:
        """The redacted tasks as JSON (snapshots, `to_dict`); {} when there are none."""
        out: dict[str, Any] = {}
        if self.redacted:
            out["redacted"] = dict(sorted(self.redacted.items()))
        if self.redacted_records:
            out["redacted_records"] = dict(sorted(self.redacted_records.items()))
        if self.purged_records:
            out["purged_records"] = [[k, v] for k, v in self.purged_records.items()]  # in order
        return out

    def load_redacted(self, d: Mapping[str, Any]) -> None:
        """Restore what `redacted_dict` wrote. A snapshot from before the records were
        kept (only "redacted") takes them from the task, when it is still here."""
        self.redacted = {k: int(v) for k, v in (d.get("redacted") or {}).items()}
        records = {k: [int(i) for i in v] for k, v in (d.get("redacted_records") or {}).items()}
        for task_id, rid in self.redacted.items():
            if task_id in records:
                continue
            task = self.peek(task_id)
            if task is not None and task.event_ids is not None:
                records[task_id] = [i for i in task.event_ids if i < rid]
        self.redacted_records = records
        self.purged_records = {
            str(k): [int(i) for i in v] for k, v in d.get("purged_records") or ()
        }

    def schedules_dict(self) -> dict[str, Any]:
        """The schedules as JSON (snapshots, `to_dict`); {} when there are none."""
        if not self.schedules:
            return {}
        return {"schedules": [s.to_dict() for _, s in sorted(self.schedules.items())]}

    def load_schedules(self, d: list[Mapping[str, Any]] | None) -> None:
        """Restore what `schedules_dict` wrote (its "schedules" entry)."""
        self.schedules = {s.schedule_id: s for s in map(ScheduleState.from_dict, d or ())}

    def load_events(self, d: Mapping[str, Any] | None) -> None:
        """Restore what `events_dict` wrote (its "events" entry)."""
        if not d:
            return
        self.events = {k: [(int(i), p) for i, p in v] for k, v in d["by_key"].items()}
        self.event_keys = {k: int(v) for k, v in d["keys"].items()}
        self.event_key_expires = {k: int(v) for k, v in (d.get("expires") or {}).items()}
        self.event_key_heap = sorted((v, k) for k, v in self.event_key_expires.items())

    def task(self, task_id: str) -> TaskState | None:
        """The task, from memory or (faulted back in) from the archive."""
        t = self.tasks.get(task_id)
        if t is None and self.archive is not None and task_id not in self.tombstones:
            t = self.archive.get(task_id)
            if t is not None:
                self.tasks[task_id] = t
        return t

    def peek(self, task_id: str) -> TaskState | None:
        """Read a task without bringing it back into memory."""
        t = self.tasks.get(task_id)
        if t is None and self.archive is not None and task_id not in self.tombstones:
            t = self.archive.get(task_id)
        return t

    def iter_tasks(self) -> Iterator[TaskState]:
        """Every task once, memory first (memory is newer than the archive)."""
        yield from self.tasks.values()
        if self.archive is not None:
            gone = self.tombstones
            for t in self.archive.iter_tasks():
                if t.task_id not in self.tasks and t.task_id not in gone:
                    yield t

    def list_summaries(
        self,
        match: Callable[[Summary], bool] | None = None,
        before: str | None = None,
        limit: int = 50,
        scan_limit: int = LIST_SCAN_LIMIT,
        archived: bool = True,
    ) -> tuple[list[Summary], str | None]:
        """Up to `limit` tasks that `match`, newest first, with task ids below `before`;
        and where the next page starts (None: nothing more).

        Task ids sort by submission time, and the archive keeps its summaries in
        that order, so a page reads about `limit` summaries, not the history. A
        filter that matches rarely would read far: at most `scan_limit` tasks are
        looked at, and the page then ends early (maybe empty) with a position to
        go on from. `archived=False` leaves the archive out: what is there is
        finished (a task that changed since is in memory), so a filter on PENDING or
        RUNNING need not read it.
        """
        # Each task summarized only when the page reaches it (a page of 50 summarized
        # every task in memory), its id read from the ids kept sorted (sorting them
        # here cost 4.6 ms a page at 100,000 tasks in memory).
        tasks = self.tasks
        rows: Iterator[tuple[str, int, Summary]] = (
            (i, 0, summarize(tasks[i])) for i in tasks.ids_below(before)
        )
        if self.archive is not None and archived:
            rows = heapq.merge(
                rows, self.archive.summaries_before(before), key=_row_key, reverse=True
            )
        out: list[Summary] = []
        last: str | None = None
        scanned = 0
        gone = self.tombstones
        for task_id, rank, s in rows:
            if task_id == last:
                continue  # an older copy of a task already seen (memory, newer chunks first)
            last = task_id
            if rank and task_id in gone:
                continue  # purged; an archive chunk still holds it until the next snapshot
            if match is None or match(s):
                if len(out) == limit:
                    return out, out[-1].task_id
                out.append(s)
            scanned += 1
            if scanned >= scan_limit:
                return out, task_id
        return out, None

    def list_filtered(
        self,
        status: str | None,
        workflow: str,
        before: str | None,
        limit: int,
        *,
        prefix: str = "",
        since_ms: int | None = None,
        until_ms: int | None = None,
    ) -> tuple[list[Summary], str | None]:
        """list_summaries by task state (a TaskStatus value), workflow, task id prefix
        and submission time (since inclusive, until exclusive), each empty or None for
        any: what ListTasks and the tasks page show."""
        return self.list_summaries(
            _matcher(status, workflow, prefix, since_ms, until_ms),
            before,
            limit,
            archived=not status or TaskStatus(status) in TERMINAL,
        )

    def list_named(
        self,
        task_ids: Iterable[str],
        status: str | None,
        workflow: str,
        before: str | None,
        limit: int,
        scan_limit: int = LIST_SCAN_LIMIT,
    ) -> tuple[list[Summary], str | None]:
        """As list_filtered, over the tasks named (a schedule's fired occurrences):
        newest first, each read where it lives; at most `scan_limit` looked at."""
        match = _matcher(status, workflow, "", None, None)
        ids = sorted({i for i in task_ids if before is None or i < before}, reverse=True)
        out: list[Summary] = []
        for scanned, task_id in enumerate(ids, 1):
            t = self.peek(task_id)
            row = None if t is None else summarize(t)
            if row is not None and (match is None or match(row)):
                if len(out) == limit:
                    return out, out[-1].task_id
                out.append(row)
            if scanned >= scan_limit and scanned < len(ids):
                return out, task_id
        return out, None

    def task_for_key(self, key: str) -> TaskState | None:
        """The newest task submitted with idempotency key `key`, wherever it lives."""
        task_id = self.idempotency.get(key)
        if task_id is not None:
            return self.peek(task_id)
        t = self.archive.task_for_key(key) if self.archive is not None else None
        if t is not None and t.task_id in self.tombstones:
            return None  # purged: the key went with its task
        return None if t is None else self.tasks.get(t.task_id, t)

    def all_keys(self) -> dict[str, str]:
        """Every idempotency key and its newest task (memory and archive; for audits
        and tests: it reads the whole archive)."""
        newest: dict[str, TaskState] = {}
        for t in self.iter_tasks():
            k = t.idempotency_key
            if k and (k not in newest or newest[k].first_event_id < t.first_event_id):
                newest[k] = t
        out = {k: t.task_id for k, t in newest.items()}
        out.update(self.idempotency)
        return out

    def count_tasks(self) -> int:
        if self.archive is None:
            return len(self.tasks)
        return sum(1 for _ in self.iter_tasks())

    def to_dict(self) -> dict[str, Any]:
        """The logical state: equal for equal logs, wherever the tasks live."""
        return {
            "last_event_id": self.last_event_id,
            "term": self.term,
            "terms": [list(t) for t in self.terms],
            "idempotency": dict(sorted(self.all_keys().items())),
            "durations": {
                wf: {st: h[-DURATION_HISTORY:] for st, h in sorted(per.items())}
                for wf, per in sorted(self.durations.items())
            },
            "anomalies": list(self.anomalies),
            "tasks": {t.task_id: t.to_dict() for t in sorted(self.iter_tasks(), key=_by_id)},
            **self.events_dict(),
            **self.schedules_dict(),
            **self.occupancy.to_dict(),
            # the record ids kept at a purge are for a redaction still to come, not
            # part of what the state shows (snapshots keep them; tests compare them)
            **{k: v for k, v in self.redacted_dict().items() if k != "purged_records"},
            **{k: v for k, v in self.retention_dict().items() if k != "tombstones"},
        }


def held_by(hold: Mapping[str, Any]) -> str:
    """A legal hold (an entry of `State.holds`) in words, for a refusal."""
    return f"held by {hold.get('by') or '?'} ({hold.get('reason') or 'no reason given'})"


def _matcher(
    status: str | None,
    workflow: str,
    prefix: str,
    since_ms: int | None,
    until_ms: int | None,
) -> Callable[[Summary], bool] | None:
    """The listing filters as one test; None when none is set (every task matches)."""
    if not (status or workflow or prefix or since_ms is not None or until_ms is not None):
        return None

    def match(s: Summary) -> bool:
        return (
            (not status or s.status.value == status)
            and (not workflow or s.workflow == workflow)
            and (not prefix or s.task_id.startswith(prefix))
            and (since_ms is None or s.submitted_ms >= since_ms)
            and (until_ms is None or s.submitted_ms < until_ms)
        )

    return match


def _by_id(t: TaskState) -> str:
    return t.task_id


def _ref_id(ref: tuple[int, Any]) -> int:
    return ref[0]


def reindex(state: State) -> State:
    """Rebuild what replay derives and snapshots do not carry: which tasks wait on
    which event key, and the event each such wait has matched; who holds which
    flow-control limit."""
    state.waits = {}
    for task in state.tasks.values():
        d = task.durable
        if d is None:
            continue
        d.matched = None
        w = d.wait
        if w is not None and task.cancelled is None:
            index_wait(state, task, w)
    state.occupancy.rebuild(state.tasks.values())
    return state


def index_wait(state: State, task: TaskState, w: Mapping[str, Any]) -> None:
    """Index a wait by the event keys it may take, and note the first event recorded
    already that one of them matches (`matched`)."""
    assert task.durable is not None
    task.durable.matched = None
    for key, since in _waits.event_keys(w):
        waiting = state.waits.get(key)
        if waiting is None:
            waiting = state.waits[key] = set()
        waiting.add(task.task_id)
        found = state.first_event(key, since)
        if found is not None and (task.durable.matched is None or found[0] < task.durable.matched):
            task.durable.matched = found[0]


def unindex_wait(state: State, task: TaskState) -> None:
    d = task.durable
    if d is None or d.wait is None:
        return
    d.matched = None
    for key, _ in _waits.event_keys(d.wait):
        waiting = state.waits.get(key)
        if waiting is not None:
            waiting.discard(task.task_id)
            if not waiting:
                del state.waits[key]
