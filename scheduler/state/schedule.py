"""A schedule as the fold leaves it: its rules, whether it is paused, and what
became of every nominal time it has come to (issue 30: log-native schedules).

Every field comes from the log: SCHEDULE events (created, updated, paused,
unpaused, deleted), OCCURRENCE events (a time missed, skipped or buffered,
with its reason), and TASK_SUBMITTED events that carry a schedule (a time
fired). So a standby holds the same schedules as its primary, and a new primary
resumes from `watermark_ms`, the last nominal time decided.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from apollo11.scheduler.schedules import ScheduleSpec

FIRED, MISSED, SKIPPED, BUFFERED = "fired", "missed", "skipped", "buffered"


@dataclass(slots=True)
class OccurrenceRecord:
    """One nominal time's outcome. A buffered one becomes fired when it starts."""

    nominal_ms: int
    outcome: str
    reason: str
    task_id: str | None
    event_id: int
    triggered: bool = False  # fired by hand, at a time of its own: no nominal time

    def to_dict(self) -> dict[str, Any]:
        return {
            "nominal_ms": self.nominal_ms,
            "outcome": self.outcome,
            "reason": self.reason,
            "task_id": self.task_id,
            "event_id": self.event_id,
            **({"triggered": True} if self.triggered else {}),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> OccurrenceRecord:
        return cls(
            int(d["nominal_ms"]),
            str(d["outcome"]),
            str(d["reason"]),
            d["task_id"],
            d["event_id"],
            bool(d.get("triggered")),
        )


@dataclass(slots=True)
class Backfill:
    """An operator's backfill: the nominal times in [from_ms, to_ms], fired at a capped
    rate (engine/schedules.py) under `overlap`; `event_id` names it."""

    event_id: int
    from_ms: int
    to_ms: int
    overlap: str
    by: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "from_ms": self.from_ms,
            "to_ms": self.to_ms,
            "overlap": self.overlap,
            "by": self.by,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Backfill:
        return cls(
            int(d["event_id"]), int(d["from_ms"]), int(d["to_ms"]), str(d["overlap"]), str(d["by"])
        )


@dataclass(slots=True)
class ScheduleState:
    schedule_id: str
    workflow: str
    spec: ScheduleSpec
    input: Any
    paused: bool = False
    note: str = ""
    created_ms: int = 0
    updated_ms: int = 0
    by: str = ""  # the authenticated principal of the last change
    source: str = "api"  # or "code": declared in a workflow module, reconciled at start
    watermark_ms: int | None = None  # the last nominal time decided
    occurrences: list[OccurrenceRecord] = field(default_factory=list)  # by nominal time
    # backfills asked for and not yet done, by the id of the event that asked
    backfills: dict[int, Backfill] = field(default_factory=dict)
    # Derived (record() keeps them; not serialized): nominal time -> its record (a
    # buffered one is found again there), the buffered ones by nominal time, and the
    # last one fired in log order (the occurrence "running" for overlap).
    _at: dict[int, OccurrenceRecord] = field(default_factory=dict, repr=False, compare=False)
    _buffered: dict[int, OccurrenceRecord] = field(default_factory=dict, repr=False, compare=False)
    _last_fired: OccurrenceRecord | None = field(default=None, repr=False, compare=False)

    def last(self) -> OccurrenceRecord | None:
        return self.occurrences[-1] if self.occurrences else None

    def last_fired(self) -> OccurrenceRecord | None:
        """The occurrence fired last (in the log's order)."""
        return self._last_fired

    def buffered(self) -> list[OccurrenceRecord]:
        """The occurrences waiting for the one running, oldest first."""
        return sorted(self._buffered.values(), key=_nominal)

    def record(self, o: OccurrenceRecord, *, advance: bool = True) -> None:
        """An outcome for a nominal time: a new one, or a buffered one that started.
        A trigger's time is no nominal time: one on the same millisecond as a nominal
        time must not take that time's place."""
        keyed = not o.triggered
        known = self._at.get(o.nominal_ms) if keyed else None
        if known is not None:
            i = self.occurrences.index(known)
            self.occurrences[i] = o
        elif not self.occurrences or o.nominal_ms > self.occurrences[-1].nominal_ms:
            self.occurrences.append(o)  # the usual case: the next time
        else:  # a backfilled time, before the others
            bisect.insort(self.occurrences, o, key=_nominal)
        if keyed:
            self._at[o.nominal_ms] = o
        if o.outcome == BUFFERED:
            self._buffered[o.nominal_ms] = o
        else:
            self._buffered.pop(o.nominal_ms, None)
        if o.outcome == FIRED and (
            self._last_fired is None or o.event_id >= self._last_fired.event_id
        ):
            self._last_fired = o
        if advance and (self.watermark_ms is None or o.nominal_ms > self.watermark_ms):
            self.watermark_ms = o.nominal_ms

    def to_dict(self) -> dict[str, Any]:
        return {
            "schedule_id": self.schedule_id,
            "workflow": self.workflow,
            "spec": spec_dict(self.spec),
            "input": self.input,
            "paused": self.paused,
            "note": self.note,
            "created_ms": self.created_ms,
            "updated_ms": self.updated_ms,
            "by": self.by,
            "source": self.source,
            "watermark_ms": self.watermark_ms,
            "occurrences": [o.to_dict() for o in self.occurrences],
            **(
                {"backfills": [b.to_dict() for _, b in sorted(self.backfills.items())]}
                if self.backfills
                else {}
            ),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ScheduleState:
        s = cls(
            schedule_id=d["schedule_id"],
            workflow=d["workflow"],
            spec=spec_from(d["spec"]),
            input=d.get("input"),
            paused=bool(d.get("paused")),
            note=str(d.get("note") or ""),
            created_ms=int(d.get("created_ms") or 0),
            updated_ms=int(d.get("updated_ms") or 0),
            by=str(d.get("by") or ""),
            source=str(d.get("source") or "api"),
        )
        for o in d.get("occurrences") or ():
            s.record(OccurrenceRecord.from_dict(o))
        for b in d.get("backfills") or ():
            s.backfills[int(b["event_id"])] = Backfill.from_dict(b)
        s.watermark_ms = d.get("watermark_ms")
        return s


def spec_dict(spec: ScheduleSpec) -> dict[str, Any]:
    """The spec as an event's payload holds it: its stored JSON, as an object."""
    out: dict[str, Any] = orjson.loads(spec.to_json())
    return out


def spec_from(d: Mapping[str, Any]) -> ScheduleSpec:
    return ScheduleSpec.from_json(orjson.dumps(dict(d)))


def _nominal(o: OccurrenceRecord) -> int:
    return o.nominal_ms
