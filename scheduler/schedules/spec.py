"""When a schedule fires, and what it does about lateness, overlap and DST: `ScheduleSpec`.

A frozen record, stored in the log as it is (`to_json`), so a primary that
takes over reads the same rules the old one had. Every field has one spelling
in JSON: durations as "1h30m" (durations.py), instants as ISO-8601 in UTC with
"Z"; every field that has a value is written out, defaults too: a default changed
in a later release does not change the meaning of a schedule made before it.

The fields:

* exactly one of `cron` (five fields or an alias, cron.py), `every` (a
  duration, elapsed time: times.py) or `at` (one time: with an offset it is that
  instant, without one a wall-clock time in `tz`);
* `tz`: the IANA zone the cron and a naive `at` are read in (zones.py);
* `start`, `end`: bounds on the nominal times, both included, aware datetimes
  (kept in UTC); `every` counts from `start`;
* `jitter`: each occurrence starts up to this much after its nominal time, by a
  hash (jitter.py), to spread schedules that share a minute;
* `catchup_window`: how late an occurrence may start; older ones are recorded
  missed (occurrence.py). The default is a day, `DEFAULT_CATCHUP_WINDOW`;
* `overlap`: what an occurrence does while the previous one still runs, with
  Temporal's meanings (occurrence.py);
* `nonexistent`, `ambiguous`: the DST rules (localtime.py).

A bad spec is refused with a pydantic ValidationError whose every message names
the field, the value and why (`cron "61 * * * *": minute 61 is outside 0-59`);
`explain` joins them into the one sentence an INVALID_ARGUMENT carries.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from apollo11.scheduler.schedules import zones
from apollo11.scheduler.schedules.cron import compile_cron
from apollo11.scheduler.schedules.durations import format_duration, parse_duration

# Temporal's was 60 s, and users whose nightly run vanished in a restart expected
# Airflow's catch-up (temporalio/temporal#4332); it became a year, and a long outage
# then replays every occurrence of it (inngest/inngest#3569 for the flood). A day
# covers a failover, a restart and an outage fixed before the next morning, fires a
# nightly job missed overnight, and records the rest missed (a backfill runs them).
# Overlap (`skip` by default) and the cap (occurrence.py) bound what fires at once.
DEFAULT_CATCHUP_WINDOW = timedelta(days=1)
MIN_EVERY = timedelta(seconds=1)
MIN_CATCHUP_WINDOW = timedelta(seconds=1)
_ERROR = "schedule_spec"


class Overlap(StrEnum):
    """What an occurrence does while the previous one's task still runs (Temporal's names)."""

    SKIP = "skip"  # it is skipped
    BUFFER_ONE = "buffer-one"  # it waits for the running one; one at most waits, later skip
    BUFFER_ALL = "buffer-all"  # it waits; all wait, and run one after another
    CANCEL_OTHER = "cancel-other"  # the running one is cancelled, this one starts
    ALLOW_ALL = "allow-all"  # it starts, beside the running one


class Nonexistent(StrEnum):
    """A wall-clock time that does not exist (in a spring-forward gap)."""

    NEXT = "next"  # fire at the first instant after the gap
    SKIP = "skip"  # do not fire


class Ambiguous(StrEnum):
    """A wall-clock time that occurs twice (in a fall-back fold)."""

    FIRST = "first"  # fire once, at the earlier
    LAST = "last"  # fire once, at the later
    BOTH = "both"  # fire at both


def _refuse(message: str) -> PydanticCustomError:
    # The message goes in the context: a template is formatted, and a cron may hold "{".
    return PydanticCustomError(_ERROR, "{message}", {"message": message})


def _show(value: object) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _choices(kind: type[StrEnum]) -> str:
    return ", ".join(member.value for member in kind)


class ScheduleSpec(BaseModel):
    """When a schedule fires. Build with keywords (durations and times as values or
    as text, "15m", "2025-06-01T03:00:00Z"); read back with `from_json`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    if TYPE_CHECKING:
        # What the validators below accept, for the type checker: pydantic's own
        # signature would say `every: timedelta`, and "15m" is the usual spelling.
        def __init__(
            self,
            *,
            cron: str | None = None,
            every: timedelta | str | None = None,
            at: datetime | str | None = None,
            tz: str = ...,
            start: datetime | str | None = None,
            end: datetime | str | None = None,
            jitter: timedelta | str = ...,
            catchup_window: timedelta | str = ...,
            overlap: Overlap | str = ...,
            nonexistent: Nonexistent | str = ...,
            ambiguous: Ambiguous | str = ...,
        ) -> None: ...

    cron: str | None = None
    every: timedelta | None = None
    at: datetime | None = None
    tz: str = zones.UTC_KEY
    start: datetime | None = None
    end: datetime | None = None
    jitter: timedelta = timedelta(0)
    catchup_window: timedelta = DEFAULT_CATCHUP_WINDOW
    overlap: Overlap = Overlap.SKIP
    nonexistent: Nonexistent = Nonexistent.NEXT
    ambiguous: Ambiguous = Ambiguous.FIRST

    @field_validator("cron", mode="before")
    @classmethod
    def _cron(cls, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, str):
            raise _refuse(f'cron {_show(value)}: must be a string such as "0 3 * * *"')
        try:
            compile_cron(value)
        except ValueError as e:
            raise _refuse(f'cron "{value}": {e}') from None
        return value

    @field_validator("every", "jitter", "catchup_window", mode="before")
    @classmethod
    def _duration(cls, value: Any, info: ValidationInfo) -> Any:
        name = info.field_name
        if value is None and name == "every":
            return None
        if isinstance(value, timedelta):
            parsed = value
            shown = format_duration(value) if _whole(value) else str(value)
        elif isinstance(value, str):
            try:
                parsed = parse_duration(value)
            except ValueError as e:
                raise _refuse(f'{name} "{value}": {e}') from None
            shown = value
        else:
            raise _refuse(f'{name} {_show(value)}: must be a duration such as "15m"')
        if not _whole(parsed):
            raise _refuse(f"{name} {shown}: must be a whole number of seconds, at least 0s")
        floor = {"every": MIN_EVERY, "catchup_window": MIN_CATCHUP_WINDOW}.get(str(name))
        if floor is not None and parsed < floor:
            raise _refuse(f'{name} "{shown}": must be at least {format_duration(floor)}')
        return parsed

    @field_validator("at", "start", "end", mode="before")
    @classmethod
    def _instant(cls, value: Any, info: ValidationInfo) -> Any:
        name = info.field_name
        if value is None:
            return None
        if isinstance(value, str):
            try:
                parsed = datetime.fromisoformat(value)
            except ValueError:
                raise _refuse(
                    f'{name} "{value}": not an ISO-8601 time (like 2025-06-01T03:00:00Z)'
                ) from None
        elif isinstance(value, datetime):
            parsed = value
        else:
            raise _refuse(f"{name} {_show(value)}: must be an ISO-8601 time")
        if parsed.utcoffset() is None:
            if name == "at":
                return parsed  # a wall-clock time in `tz`, read by the DST rules
            raise _refuse(f'{name} "{parsed.isoformat()}": needs a UTC offset (like Z or +02:00)')
        return parsed.astimezone(UTC)

    @field_validator("tz", mode="before")
    @classmethod
    def _tz(cls, value: Any) -> Any:
        if not isinstance(value, str):
            raise _refuse(f'tz {_show(value)}: must be an IANA zone name such as "Europe/Berlin"')
        try:
            zones.zone(value)
        except LookupError:
            raise _refuse(f'tz "{value}": unknown time zone') from None
        return value

    @field_validator("overlap", "nonexistent", "ambiguous", mode="before")
    @classmethod
    def _choice(cls, value: Any, info: ValidationInfo) -> Any:
        kind = {"overlap": Overlap, "nonexistent": Nonexistent, "ambiguous": Ambiguous}[
            str(info.field_name)
        ]
        try:
            return kind(value)
        except ValueError:
            raise _refuse(
                f"{info.field_name} {_show(value)}: must be one of {_choices(kind)}"
            ) from None

    @model_validator(mode="after")
    def _whole_spec(self) -> ScheduleSpec:
        given = [name for name in ("cron", "every", "at") if getattr(self, name) is not None]
        if len(given) != 1:
            got = " and ".join(given) or "none"
            raise _refuse(f"exactly one of cron, every or at is needed (got {got})")
        if self.start is not None and self.end is not None and self.end < self.start:
            raise _refuse(f"end before start (end {_iso(self.end)}, start {_iso(self.start)})")
        if self.at is not None and self.ambiguous is Ambiguous.BOTH:
            raise _refuse('ambiguous "both": an at time fires once (say first or last)')
        return self

    @field_serializer("every", "jitter", "catchup_window", when_used="json")
    def _write_duration(self, value: timedelta | None) -> str | None:
        return None if value is None else format_duration(value)

    @field_serializer("at", "start", "end", when_used="json")
    def _write_instant(self, value: datetime | None) -> str | None:
        return None if value is None else _iso(value)

    def to_json(self) -> str:
        """The spec as stored: every field with a value (unset ones, None, are left out)."""
        return self.model_dump_json(exclude_none=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> ScheduleSpec:
        return cls.model_validate_json(text)


def _whole(value: timedelta) -> bool:
    return value >= timedelta(0) and not value.microseconds


def _iso(value: datetime) -> str:
    """ISO-8601; in UTC with "Z" when aware, as written (a wall-clock time) when naive."""
    if value.utcoffset() is None:
        return value.isoformat()
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def explain(error: ValidationError) -> str:
    """The one sentence an INVALID_ARGUMENT carries for a refused spec."""
    sentences = []
    for item in error.errors():
        if item["type"] == _ERROR:
            sentences.append(item["msg"])
        elif item["type"] == "extra_forbidden":
            sentences.append(f'unknown field "{".".join(map(str, item["loc"]))}"')
        else:  # pydantic's own (a dict where a spec was expected): its words, with the field
            where = ".".join(map(str, item["loc"])) or "spec"
            sentences.append(f"{where}: {item['msg'][:1].lower()}{item['msg'][1:]}")
    return "; ".join(sentences)
