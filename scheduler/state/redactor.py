"""The bytes of a redaction: each member rewrites its own copy of a redacted task's
records (scheduler/log/expunge.py) once it has applied the TASK_REDACTED.

Every answer hides the data at once (Store.shown); this removes it from the disk, off
the event loop, on a thread of its own. Each member does it to its own segments, as
each one folds the same event, so the primary, every standby and a node restored
from a snapshot taken after the redaction (the pass at start) end with the same
bytes. Before the bytes are rewritten, a standby catching up is shipped the old ones
and rewrites them itself when it applies the event; after, the new ones, which a
second rewrite leaves as they are.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from apollo11.scheduler.errors import ApolloError
from apollo11.scheduler.log import Event, EventLog, EventType, expunge
from apollo11.scheduler.state.index import State

log = logging.getLogger(__name__)


class Redactor:
    def __init__(self, log_: EventLog, state: State) -> None:
        self._log = log_
        self._state = state
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="apollo11-redact")
        self.pending: list[Future[int]] = []
        self.done: dict[str, float] = {}  # task id -> seconds its last rewrite took
        # a TASK_REDACTED came since the store last looked: its snapshots are rewritten
        # too (Store, Snapshots.redact), without a second pass over every batch
        self.arrived = False

    def observe(self, events: Sequence[Event]) -> None:
        """After the state applied a durable batch: a TASK_REDACTED in it is rewritten;
        a task the state forgot (a TASK_PURGED's "forget") is forgotten here too."""
        for e in events:
            if e.event_type is EventType.TASK_REDACTED:
                self.arrived = True
                self.rewrite(e.task_id, e.event_id)
            elif e.event_type is EventType.TASK_PURGED:
                for task_id in e.payload.get("forget") or ():
                    if task_id not in self._state.redacted:
                        self.done.pop(task_id, None)

    def rewritten(self, task_id: str) -> bool:
        """Has a rewrite of the task's records on this member's disk completed?"""
        return task_id in self.done

    def catch_up(self) -> None:
        """At start: every redacted task once more (records a crash left, or a copy
        restored from the bucket, still hold); a rewritten record stays as it is."""
        for task_id, rid in sorted(self._state.redacted.items(), key=lambda kv: kv[1]):
            self.rewrite(task_id, rid)

    def rewrite(self, task_id: str, rid: int) -> None:
        # the ids the fold kept with the redaction: the task itself may be purged
        ids = self._state.redacted_records.get(task_id)
        if ids is None and task_id in self._state.purged_records:
            # forgotten in the batch that brought the redaction (a standby catching up,
            # fold.py `_forget_redacted`): the ids the purge kept are the same ones
            ids = [i for i in self._state.purged_records[task_id] if i < rid]
        if ids is None:
            # a task from a snapshot older than per-task event ids: its answers hide
            # the data; its bytes wait for retention
            log.warning("redaction of %s: its events are not indexed; not rewritten", task_id)
            return
        self.pending = [f for f in self.pending if not f.done()]
        self.pending.append(self._io.submit(self._expunge, task_id, ids, rid))

    def _expunge(self, task_id: str, ids: list[int], rid: int) -> int:
        began = time.perf_counter()
        try:
            n = expunge(self._log.segments, ids, rid)
        except (ApolloError, OSError) as e:
            log.error("redaction of %s: its records were not rewritten: %s", task_id, e)
            raise
        took = time.perf_counter() - began
        self.done[task_id] = took
        if n:
            log.info("redaction of %s: %d records rewritten in %.1f ms", task_id, n, took * 1000)
        return n

    def drain(self) -> None:
        """Wait for the rewrites asked for so far (tests, a clean close)."""
        for f in list(self.pending):
            f.exception()

    def close(self) -> None:
        self._io.shutdown(wait=True)
