"""What a durable task waits for, and when that wait resolves: pure functions of
a WAIT payload, the log's events, its children and the time.

One module answers both questions, so they cannot disagree: the engine's
decision (`decide`: is the wait resolvable now, else when to look again) and
the woken main (`DurableContext`: what the wait resolves to, recorded as the
checkpoint at its position).

A wait is made of parts, each one condition:

* `{"kind": "sleep", "until_ms"}`: a deadline;
* `{"kind": "event", "key", "since", "until_ms"?}`: the first EVENT with `key` at
  or after event id `since`, or None once `until_ms` has passed;
* `{"kind": "child", "task_id"}`: a spawned task finishing (its result, or a
  `ChildFailed` error when it failed, was cancelled or is non-deterministic).

A plain wait (`await ctx.sleep(...)`, `await ctx.wait_for_event(...)`, `await
child`) is its own single part: its WAIT payload carries the part's fields.
`ctx.gather(...)` registers `{"kind": "all", "parts": [...]}`: it resolves when
every part has (to the list of their values), or at once when a child part
failed. `ctx.first(...)` registers `{"kind": "any", "parts": [...]}`: it resolves
when one part has, to `[index, value]` (the lowest index among those resolved
together: the log fixes the answer, so every replay gets the same one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

SLEEP = "sleep"
EVENT = "event"
CHILD = "child"
ALL = "all"
ANY = "any"

CHILD_FAILED = "ChildFailed"


class WaitView(Protocol):
    """What resolving a wait reads: the event index and the children."""

    def first_event(self, key: str, since: int) -> tuple[int, Any] | None:
        """The first EVENT with `key` at or after event id `since`: (id, payload)."""

    def child(self, task_id: str) -> Mapping[str, Any] | None:
        """A child task that has finished (nothing of it runs or is owed):
        {"status", "result", "error"}; None while it has not (or is not known yet)."""


def parts(wait: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The conditions a wait is made of."""
    if wait.get("kind") in (ALL, ANY):
        return list(wait.get("parts") or ())
    return [wait]


def event_keys(wait: Mapping[str, Any]) -> list[tuple[str, int]]:
    """(key, since) of each event the wait may take: what indexes it by event key."""
    return [
        (str(p.get("key")), int(p.get("since") or 0)) for p in parts(wait) if p["kind"] == EVENT
    ]


def children(wait: Mapping[str, Any]) -> list[str]:
    """The task ids of the children the wait may take."""
    return [str(p["task_id"]) for p in parts(wait) if p["kind"] == CHILD]


def outcome(part: Mapping[str, Any], view: WaitView, now_ms: int) -> dict[str, Any] | None:
    """What one part resolves to now: the checkpoint fields ("output" and, for an
    event, "event_id" or "timeout"; "error" for a failed child); None: not yet."""
    kind = part["kind"]
    if kind == SLEEP:
        return {"output": None} if now_ms >= int(part["until_ms"]) else None
    if kind == EVENT:
        found = view.first_event(str(part["key"]), int(part.get("since") or 0))
        if found is not None:
            return {"output": found[1], "event_id": found[0]}
        until = part.get("until_ms")
        if until is not None and now_ms >= int(until):
            return {"output": None, "timeout": True}
        return None
    if kind == CHILD:
        task_id = str(part["task_id"])
        done = view.child(task_id)
        if done is None:
            return None
        status = str(done.get("status"))
        if status == "SUCCEEDED":
            return {"output": done.get("result"), "child": task_id}
        why = done.get("error") or status.lower()
        return {
            "error": {
                "type": CHILD_FAILED,
                "message": f"child task {task_id} is {status}: {why}",
                "details": {"task_id": task_id, "state": status, "error": done.get("error")},
            },
            "child": task_id,
        }
    raise ValueError(f"a wait part of unknown kind {kind!r}")


def resolve(wait: Mapping[str, Any], view: WaitView, now_ms: int) -> dict[str, Any] | None:
    """What the wait resolves to now (the fields its checkpoint records beside its
    position), or None while it must go on waiting."""
    kind = wait.get("kind")
    if kind not in (ALL, ANY):
        return outcome(wait, view, now_ms)
    outs = [outcome(p, view, now_ms) for p in parts(wait)]
    if kind == ANY:
        for i, o in enumerate(outs):
            if o is not None:
                return _composite(o, [i, o.get("output")], {i: o})
        return None
    for o in outs:
        if o is not None and "error" in o:
            return _composite(o, None, {i: o for i, o in enumerate(outs) if o is not None})
    if any(o is None for o in outs):
        return None
    return _composite({}, [o.get("output") for o in outs if o is not None], dict(enumerate(outs)))


def _composite(
    first: Mapping[str, Any], output: Any, resolved: Mapping[int, Mapping[str, Any] | None]
) -> dict[str, Any]:
    # per part, what a replay needs besides the value: which event it took (a later wait
    # on that key starts after it) and which child; the values are in "output" once
    out: dict[str, Any] = {"error": first["error"]} if "error" in first else {"output": output}
    out["parts"] = {
        str(i): {k: v for k, v in o.items() if k in ("event_id", "timeout", "child")}
        for i, o in resolved.items()
        if o is not None
    }
    return out


def next_at(wait: Mapping[str, Any], view: WaitView, now_ms: int) -> int | None:
    """When the wait should be looked at again if nothing else happens: the earliest
    deadline among its parts not resolved yet (None: only an event or a child
    finishing can move it)."""
    due = [
        int(p["until_ms"])
        for p in parts(wait)
        if p.get("until_ms") is not None and outcome(p, view, now_ms) is None
    ]
    return min(due) if due else None


def describe(wait: Mapping[str, Any]) -> str:
    """The wait in words, for operators: 'event approval:A1 from event 12 until …'."""
    kind = wait.get("kind")
    if kind in (ALL, ANY):
        ps = parts(wait)
        joined = "; ".join(_part_words(p) for p in ps)
        what = "all of" if kind == ALL else "the first of"
        return f"{what} {len(ps)}: {joined}"
    return _part_words(wait)


def _part_words(p: Mapping[str, Any]) -> str:
    kind = p.get("kind")
    until = f" until {_utc(int(p['until_ms']))}" if p.get("until_ms") else ""
    if kind == EVENT:
        since = f" from event {p['since']}" if p.get("since") else ""
        return f"event {p.get('key') or p.get('name')}{since}{until}"
    if kind == CHILD:
        return f"child task {p.get('task_id')}"
    if kind == SLEEP:
        return f"a timer{until}"
    return f"{kind}{until}"


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def spawned(checkpoints: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(child task id, parent-close policy) of every child a task's checkpoints spawned."""
    return [
        (str(c["child"]), str(c.get("close") or "cancel"))
        for c in checkpoints
        if c.get("kind") == "spawn" and c.get("child")
    ]
