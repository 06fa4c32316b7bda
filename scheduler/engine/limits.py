"""Limits at runtime (docs/flow-control.md): what operators see (`apollo11 limits
show`) and change (`apollo11 limits set`) without a restart.

A change is a LIMIT event with the authenticated principal: a standby, a replay and
the next primary hold the same limits, and the primary's gate reads the new value as
soon as the event is folded (its queues are re-examined in the next pass).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from apollo11.scheduler.errors import InvalidArgumentError, NotFoundError
from apollo11.scheduler.flow import Concurrency, Rate, format_ms
from apollo11.scheduler.log import Event, EventType
from apollo11.scheduler.state import Store
from apollo11.scheduler.workflow import Registry

TOP_VALUES = 20  # key values a limit shows by default (the busiest)
WEIGHT_MAX = 1000.0


@dataclass(frozen=True, slots=True)
class KeyLoad:
    value: str
    running: int
    queued: int


@dataclass(frozen=True, slots=True)
class LimitView:
    limit_id: str
    kind: str  # "concurrency" | "rate"
    scope: str  # "workflow" | "global"
    declared: str  # "max 2", "10 per 1s, burst 20"; "" when no loaded workflow declares it
    effective: str  # the same, with an operator's override
    overridden: bool
    on_full: str  # concurrency: queue | reject_new | cancel_running
    keys: tuple[KeyLoad, ...]  # busiest first
    values: int  # key values with anything running or queued


@dataclass(frozen=True, slots=True)
class LimitsView:
    limits: tuple[LimitView, ...]
    weights: Mapping[str, float] = field(default_factory=dict)


class Host(Protocol):
    @property
    def store(self) -> Store: ...

    @property
    def registry(self) -> Registry: ...

    def declared(self) -> Mapping[str, Concurrency | Rate]:
        """Every limit the loaded workflows declare, by id."""

    def running(self, limit_id: str, value: str) -> int: ...

    def queued(self) -> Mapping[tuple[str, str], int]: ...

    def check_leading(self) -> None: ...

    async def wait_commit(self, event_id: int) -> None: ...


class Limits:
    def __init__(self, host: Host) -> None:
        self._host = host

    async def set(
        self,
        limit_id: str | None,
        *,
        max: int | None = None,
        rate: tuple[int, int] | None = None,
        burst: int | None = None,
        weights: Mapping[str, float] | None = None,
        reset: bool = False,
        operator: str,
        reason: str = "",
    ) -> Event:
        """Change a limit (`max`; `rate` as (limit, per_ms) with `burst`), reset it to its
        declaration, or set fairness weights; an event with who did it."""
        h = self._host
        h.check_leading()
        payload = change(h.declared(), limit_id, max, rate, burst, weights, reset)
        payload["by"] = operator
        if reason:
            payload["reason"] = reason[:1024]
        event = await h.store.log.append(EventType.LIMIT, "", payload=payload)
        await h.wait_commit(event.event_id)
        return event

    def view(self, *, top: int | None = TOP_VALUES) -> LimitsView:
        h = self._host
        occupancy = h.store.state.occupancy
        declared = h.declared()
        queued: dict[str, dict[str, int]] = {}
        for (lid, value), n in h.queued().items():
            queued.setdefault(lid, {})[value] = n
        out = []
        for lid in sorted(set(declared) | set(occupancy.limits) | set(occupancy.holders)):
            d = declared.get(lid)
            override = occupancy.limits.get(lid, {})
            values = set(occupancy.holders.get(lid, {})) | set(queued.get(lid, {}))
            loads = sorted(
                (KeyLoad(v, h.running(lid, v), queued.get(lid, {}).get(v, 0)) for v in values),
                key=lambda k: (-k.queued, -k.running, k.value),
            )
            kind = "rate" if isinstance(d, Rate) or "limit" in override else "concurrency"
            out.append(
                LimitView(
                    limit_id=lid,
                    kind=kind,
                    scope="global" if "/" not in lid else "workflow",
                    declared=_shown(d, {}) if d is not None else "",
                    effective=_shown(d, override),
                    overridden=bool(override),
                    on_full=d.on_full if isinstance(d, Concurrency) else "",
                    keys=tuple(loads if top is None else loads[:top]),
                    values=len(loads),
                )
            )
        return LimitsView(tuple(out), dict(occupancy.weights))


def change(
    declared: Mapping[str, Concurrency | Rate],
    limit_id: str | None,
    max: int | None,
    rate: tuple[int, int] | None,
    burst: int | None,
    weights: Mapping[str, float] | None,
    reset: bool,
) -> dict[str, Any]:
    """The LIMIT payload for an operator's request, or InvalidArgumentError /
    NotFoundError naming what is wrong (pure)."""
    payload: dict[str, Any] = {}
    if weights:
        for value, w in weights.items():
            if not 0 < float(w) <= WEIGHT_MAX:
                raise InvalidArgumentError(
                    f"weight of {value!r} must be above 0 and at most {WEIGHT_MAX:g}, got {w}"
                )
        payload["weights"] = {str(v): float(w) for v, w in weights.items()}
    if limit_id is None:
        if not weights:
            raise InvalidArgumentError("name a limit id, or give weights")
        return payload
    d = declared.get(limit_id)
    if d is None:
        known = ", ".join(sorted(declared)) or "none"
        raise NotFoundError(
            f"no limit {limit_id!r} is declared by a loaded workflow (known: {known})"
        )
    payload["id"] = limit_id
    if reset:
        if max is not None or rate is not None or burst is not None:
            raise InvalidArgumentError("reset takes no max, rate or burst")
        payload["reset"] = True
        return payload
    if isinstance(d, Concurrency):
        if rate is not None or burst is not None:
            raise InvalidArgumentError(f"{limit_id} is a concurrency limit: give max, not rate")
        if max is None:
            raise InvalidArgumentError(f"{limit_id} is a concurrency limit: give max")
        if max < 1:
            raise InvalidArgumentError(f"max must be at least 1, got {max}")
        payload["max"] = max
        return payload
    if max is not None:
        raise InvalidArgumentError(f"{limit_id} is a rate: give rate (and burst), not max")
    if rate is None and burst is None:
        raise InvalidArgumentError(f"{limit_id} is a rate: give rate or burst")
    if rate is not None:
        limit, per_ms = rate
        if limit < 1:
            raise InvalidArgumentError(f"rate limit must be at least 1, got {limit}")
        if per_ms < 1:
            raise InvalidArgumentError(f"rate per must be at least 1 ms, got {per_ms}")
        payload["limit"], payload["per_ms"] = limit, per_ms
    if burst is not None:
        if burst < 1:
            raise InvalidArgumentError(f"burst must be at least 1, got {burst}")
        payload["burst"] = burst
    return payload


def _shown(d: Concurrency | Rate | None, override: Mapping[str, Any]) -> str:
    if isinstance(d, Rate) or "limit" in override:
        limit = override.get("limit", d.limit if isinstance(d, Rate) else 1)
        per_ms = override.get("per_ms", d.per_ms if isinstance(d, Rate) else 1000)
        burst = override.get("burst", d.burst if isinstance(d, Rate) else 1)
        return f"{limit} per {format_ms(int(per_ms))}, burst {burst}"
    top = override.get("max", d.max if d is not None else None)
    return f"max {top}" if top is not None else ""
