"""Regenerate the golden logs: `python -m tests.golden.make_golden`.

Golden logs pin the on-disk format and replay semantics: if a change makes
one of them replay differently, either the change is a bug or the format
version must go up. Regenerate only on purpose, and say why in the commit.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from apollo11.scheduler.log import Draft, EventLog, EventType, FsyncPolicy, LogConfig
from apollo11.scheduler.state.store import state_at

HERE = Path(__file__).parent
E = EventType
ETL = {
    "collect": [],
    "clean": ["collect"],
    "feature": ["clean"],
    "infer": ["feature"],
    "persist": ["infer"],
}
DIAMOND = {"fetch": [], "left": ["fetch"], "right": ["fetch"], "join": ["left", "right"]}
CFG = LogConfig(segment_max_bytes=4096, fsync=FsyncPolicy.UNSAFE_NEVER)


def ok(task: str, step: str, attempt: int = 1, result: object = None) -> list[Draft]:
    return [
        Draft(E.STEP_STARTED, task, step, attempt=attempt),
        Draft(E.STEP_SUCCEEDED, task, step, {"result": result}, attempt=attempt),
    ]


def happy() -> list[tuple[int, list[Draft]]]:
    out: list[tuple[int, list[Draft]]] = [
        (1, [Draft(E.TERM_STARTED, "", payload={"node": "node-1"})])
    ]
    for i in range(8):
        t = f"etl-{i}"
        drafts = [
            Draft(
                E.TASK_SUBMITTED,
                t,
                payload={
                    "workflow": "etl",
                    "version": 1,
                    "input": {"batch": i},
                    "steps": ETL,
                    "idempotency_key": f"batch-{i}",
                },
            )
        ]
        for step in ETL:
            drafts += ok(t, step, result={"rows": 100 * (i + 1), "uri": f"file:///data/{t}/{step}"})
        out.append((1, drafts))
    return out


def eventful() -> list[tuple[int, list[Draft]]]:
    def sub(t: str, steps: dict[str, list[str]]) -> Draft:
        payload = {"workflow": "diamond", "version": 2, "input": {}, "steps": steps}
        return Draft(E.TASK_SUBMITTED, t, payload=payload)

    return [
        (3, [Draft(E.TERM_STARTED, "", payload={"node": "node-1"})]),
        (
            3,
            [
                sub("d1", DIAMOND),
                *ok("d1", "fetch"),
                Draft(E.STEP_STARTED, "d1", "left", attempt=1),
                Draft(E.STEP_STARTED, "d1", "right", attempt=1),
                Draft(E.STEP_FAILED, "d1", "left", {"error": "TimeoutError: 30s"}, attempt=1),
                *ok("d1", "right"),
            ],
        ),
        # node-1 dies with left re-started; node-2 takes over in term 7
        (3, [Draft(E.STEP_STARTED, "d1", "left", attempt=2)]),
        (
            7,
            [
                Draft(E.TERM_STARTED, "", payload={"node": "node-2"}),
                Draft(
                    E.STEP_FAILED,
                    "d1",
                    "left",
                    {"error": "lost: node-1 died", "lost": True},
                    attempt=2,
                ),
                *ok("d1", "left", attempt=3),
                *ok("d1", "join"),
            ],
        ),
        # compensation of a non-idempotent step, then a re-run
        (
            7,
            [
                sub("d2", DIAMOND),
                *ok("d2", "fetch"),
                Draft(E.STEP_STARTED, "d2", "left", attempt=1),
                Draft(
                    E.STEP_FAILED,
                    "d2",
                    "left",
                    {"error": "charged twice?", "compensate": True},
                    attempt=1,
                ),
                Draft(E.STEP_COMPENSATING, "d2", "left", attempt=1),
                Draft(
                    E.STEP_FAILED, "d2", "left", {"error": "refund API 503", "compensation": True}
                ),
                Draft(E.STEP_COMPENSATING, "d2", "left", attempt=1),
                Draft(E.STEP_COMPENSATED, "d2", "left", attempt=1),
                *ok("d2", "left", attempt=2),
            ],
        ),
        # exhausted retries, operator retry, operator skip, cancel
        (
            7,
            [
                sub("d3", DIAMOND),
                Draft(E.STEP_STARTED, "d3", "fetch", attempt=1),
                Draft(E.STEP_FAILED, "d3", "fetch", {"error": "404", "final": True}, attempt=1),
                Draft(
                    E.MANUAL_OVERRIDE,
                    "d3",
                    "fetch",
                    {"action": "retry", "operator": "alice", "reason": "file uploaded"},
                ),
                *ok("d3", "fetch", attempt=2),
                Draft(
                    E.MANUAL_OVERRIDE,
                    "d3",
                    "left",
                    {"action": "skip", "operator": "bob", "reason": "done by hand"},
                ),
                Draft(E.STEP_STARTED, "d3", "right", attempt=1),
                Draft(
                    E.STEP_FAILED, "d3", "right", {"error": "cancelled", "final": True}, attempt=1
                ),
                Draft(
                    E.TASK_CANCELLED, "d3", payload={"operator": "carol", "reason": "superseded"}
                ),
            ],
        ),
    ]


def anomalous() -> list[tuple[int, list[Draft]]]:
    return [
        (
            2,
            [
                Draft(E.TASK_SUBMITTED, "a1", payload={"workflow": "w", "steps": {"s": []}}),
                *ok("a1", "s"),
                Draft(E.STEP_COMPENSATING, "a1", "s", attempt=1),
                Draft(E.STEP_COMPENSATED, "a1", "s", attempt=1),
                Draft(E.STEP_SUCCEEDED, "a1", "s", {"result": "stale"}, attempt=1),
            ],
        ),
    ]


P1 = {"id": "p1"}
P1_CHARGE = {"charge_id": "ch-p1", "amount": 0}
P1_SHIP = {"shipment": "sh-p1", "items": []}
P1_WAIT = {"key": "approval:p1", "timeout_s": 259200.0, "since": None}
P1_RESULT = {"state": "shipped", "approved_by": {"by": "alice"}, **P1_SHIP}


def real(d: Draft, asked: object) -> Draft:
    """`d` with the input hash the code computes for what it was asked."""
    from apollo11.scheduler.durable import input_hash

    assert d.payload is not None
    return d._replace(payload={**d.payload, "input_hash": input_hash(asked)})


def durable() -> list[tuple[int, list[Draft]]]:
    """Durable tasks (docs/durable.md): an approval that waits and is woken by an event
    sent with a duplicate; one that times out and refunds; one stopped by a
    non-determinism report; one waiting still, with its deadline."""

    def sub(t: str) -> Draft:
        payload = {"workflow": "approval", "version": 1, "input": {"id": t}, "steps": {"main": []}}
        return Draft(E.TASK_SUBMITTED, t, payload=payload)

    def cp(t: str, attempt: int, seq: int, kind: str, name: str, **more: object) -> Draft:
        body = {"seq": seq, "kind": kind, "name": name, "input_hash": f"h{seq}", **more}
        return Draft(E.CHECKPOINT, t, "main", body, attempt=attempt)

    def wait(t: str, attempt: int, seq: int, **more: object) -> Draft:
        key = f"approval:{t}"
        body = {"seq": seq, "kind": "event", "name": key, "input_hash": f"h{seq}", "key": key}
        return Draft(E.WAIT, t, "main", {**body, **more}, attempt=attempt)

    def event(key: str, payload: object, idem: str | None = None) -> Draft:
        body: dict[str, object] = {"key": key, "payload": payload, "sender": "alice"}
        if idem:
            body["idempotency_key"] = idem
        return Draft(E.EVENT, "", payload=body)

    start = Draft(E.STEP_STARTED, "", "main", attempt=1)
    return [
        (4, [Draft(E.TERM_STARTED, "", payload={"node": "node-1"})]),
        (
            4,
            [
                # p1 is what apollo11.scheduler.examples.approval records (real input
                # hashes): tests replay it against that code, and against a changed one
                sub("p1"),  # event 2
                start._replace(task_id="p1"),
                real(cp("p1", 1, 0, "step", "charge", output=P1_CHARGE, attempts=1), [P1]),
                real(wait("p1", 1, 1, since=2, until_ms=1_700_259_200_000), P1_WAIT),
                event("approval:p1", {"by": "alice"}, idem="ap-p1"),  # event 6
                event("approval:p1", {"by": "mallory"}, idem="ap-p1"),  # a duplicate
                Draft(E.STEP_STARTED, "p1", "main", attempt=2),
                real(
                    cp("p1", 2, 1, "event", "approval:p1", output={"by": "alice"}, event_id=6),
                    P1_WAIT,
                ),
                real(cp("p1", 2, 2, "step", "ship", output=P1_SHIP, attempts=2), [P1]),
                Draft(E.STEP_SUCCEEDED, "p1", "main", {"result": P1_RESULT}, attempt=2),
            ],
        ),
        (
            4,
            [
                sub("p2"),
                start._replace(task_id="p2"),
                cp("p2", 1, 0, "step", "charge", output={"charge_id": "ch-p2"}, attempts=1),
                wait("p2", 1, 1, since=12, until_ms=1_700_000_004_000),
                Draft(E.STEP_STARTED, "p2", "main", attempt=2),
                cp("p2", 2, 1, "event", "approval:p2", output=None, timeout=True),
                cp("p2", 2, 2, "step", "refund", output={"refunded": "ch-p2"}, attempts=1),
                Draft(E.STEP_SUCCEEDED, "p2", "main", {"result": {"state": "refunded"}}, attempt=2),
            ],
        ),
        (
            4,
            [
                sub("p3"),
                start._replace(task_id="p3"),
                cp("p3", 1, 0, "step", "charge", output={"charge_id": "ch-p3"}, attempts=1),
                Draft(
                    E.STEP_FAILED,
                    "p3",
                    "main",
                    {
                        "error": "non-determinism at checkpoint 0: …",
                        "final": True,
                        "nondeterminism": {
                            "seq": 0,
                            "expected": {"kind": "step", "name": "charge", "input_hash": "h0"},
                            "got": {"kind": "step", "name": "charge-v2", "input_hash": "h0"},
                        },
                    },
                    attempt=1,
                ),
                sub("p4"),
                start._replace(task_id="p4"),
                cp("p4", 1, 0, "now", "now", output=1_700_000_010_000),
                wait("p4", 1, 1, since=0, until_ms=1_800_000_000_000),
                event("approval:other", 1),
            ],
        ),
    ]


class _Capture:
    """A journal that records what a main asks for, with children finished as told:
    the golden children history is what the real `fulfil` code records."""

    def __init__(self, cps: list[dict[str, Any]], done: dict[str, Any], ids: list[str]) -> None:
        self.checkpoints = cps
        self.wait: dict[str, Any] | None = None
        self.first_event_id = 2
        self.done = done
        self.ids = ids
        self.planned: dict[str, Draft] = {}
        self.drafts: list[tuple[str, Any]] = []  # ("children"/"checkpoint"/"wait", ...)

    async def resolve(self, wait: Mapping[str, Any], now_ms: int) -> Any:
        from apollo11.scheduler import waits

        return waits.resolve(wait, self, now_ms)

    def first_event(self, key: str, since: int) -> None:
        return None

    def child(self, task_id: str) -> Any:
        return self.done.get(task_id)

    def plan_child(self, workflow: str, input: Any, version: Any, key: str, parent: Any) -> str:
        task_id = self.ids.pop(0)
        steps = {"pack_item": []}
        payload = {"workflow": workflow, "version": 1, "input": input, "steps": steps}
        payload.update({"idempotency_key": key, "parent": dict(parent)})
        self.planned[task_id] = Draft(E.TASK_SUBMITTED, task_id, payload=payload)
        return task_id

    def now_ms(self) -> int:
        return 1_700_000_000_000

    async def sleep(self, seconds: float) -> None:
        return None

    async def record(self, checkpoints: Any, wait: Any = None) -> None:
        for c in checkpoints:
            if c.get("kind") == "spawn":
                self.drafts.append(("draft", self.planned.pop(c["child"])))
            self.checkpoints.append(dict(c))
            self.drafts.append(("checkpoint", dict(c)))
        if wait is not None:
            self.drafts.append(("wait", dict(wait)))


def _run_main(
    t: str, order: dict[str, Any], cps: list[dict[str, Any]], done: dict[str, Any],
    ids: list[str], attempt: int,
) -> tuple[Any, list[Draft]]:  # fmt: skip
    """One attempt of examples.fulfil's main: its result and the drafts it records."""
    from apollo11.scheduler.examples import fulfil
    from apollo11.scheduler.workflow import StepContext

    j = _Capture(cps, done, ids)
    ctx = StepContext(
        task_id=t, step="main", attempt=attempt, input=order, results={}, node_id="node-1",
        workflow="fulfil", version=1, journal=j,  # type: ignore[arg-type]
    )  # fmt: skip
    result = asyncio.run(fulfil.steps["main"].fn(ctx))
    out = []
    for kind, body in j.drafts:
        if kind == "draft":
            out.append(body)
        else:
            out.append(
                Draft(E.CHECKPOINT if kind == "checkpoint" else E.WAIT, t, "main", body, attempt)
            )
    return result, out


FULFIL = {"id": "f1", "items": ["a", "b"], "step_seconds": 0}


def durable_children() -> list[tuple[int, list[Draft]]]:
    """Children (docs/durable.md): `fulfil` spawns a `pack` child per item and gathers
    them (what the example's code records, real input hashes); a second parent is
    cancelled while its child runs, and the child is cancelled with it."""
    cps: list[dict[str, Any]] = []
    _, first = _run_main("f1", FULFIL, cps, {}, ["c1", "c2"], 1)
    packed = {c: {"pack_item": {"packed": i, "order": "f1"}} for c, i in (("c1", "a"), ("c2", "b"))}
    done = {c: {"status": "SUCCEEDED", "result": r, "error": None} for c, r in packed.items()}
    result, second = _run_main("f1", FULFIL, cps, done, [], 2)
    sub = {"workflow": "fulfil", "version": 1, "input": FULFIL, "steps": {"main": []}}
    kids: list[Draft] = []
    for c in ("c1", "c2"):
        kids += ok(c, "pack_item", result=packed[c]["pack_item"])
    cancel = {"operator": "alice", "reason": "order withdrawn"}
    f2 = {**FULFIL, "id": "f2", "items": ["z"]}
    _, waiting = _run_main("f2", f2, [], {}, ["c3"], 1)
    return [
        (5, [Draft(E.TERM_STARTED, "", payload={"node": "node-1"})]),
        (
            5,
            [
                Draft(E.TASK_SUBMITTED, "f1", payload=sub),  # event 2
                Draft(E.STEP_STARTED, "f1", "main", attempt=1),
                *first,
                *kids,
                Draft(E.STEP_STARTED, "f1", "main", attempt=2),
                *second,
                Draft(E.STEP_SUCCEEDED, "f1", "main", {"result": result}, attempt=2),
            ],
        ),
        (
            5,
            [
                Draft(E.TASK_SUBMITTED, "f2", payload={**sub, "input": f2}),
                Draft(E.STEP_STARTED, "f2", "main", attempt=1),
                *waiting,
                Draft(E.STEP_STARTED, "c3", "pack_item", attempt=1),
                Draft(E.TASK_CANCELLED, "f2", payload=cancel),
                Draft(
                    E.TASK_CANCELLED,
                    "c3",
                    payload={
                        "operator": "alice",
                        "reason": "parent task f2 was cancelled: order withdrawn",
                        "parent": "f2",
                    },
                ),
                Draft(
                    E.STEP_FAILED,
                    "c3",
                    "pack_item",
                    {"error": "cancelled by operator", "final": True},
                    attempt=1,
                ),
            ],
        ),
    ]


def retained() -> list[tuple[int, list[Draft]]]:
    """Retention (docs/retention.md): the happy log, a hold on etl-1, a purge of etl-0..3
    (etl-1 refused: held; etl-2's idempotency key goes with it), the hold released and
    etl-1 purged; and a purge naming a task that never was (an anomaly)."""
    held = {"held": True, "by": "ann", "reason": "audit 7"}
    return [
        *happy(),
        (1, [Draft(E.TASK_HELD, "etl-1", payload=held)]),
        (1, [Draft(E.TASK_PURGED, "", payload={"tasks": [f"etl-{i}" for i in range(4)]})]),
        (1, [Draft(E.TASK_HELD, "etl-1", payload={"held": False, "by": "bob", "reason": ""})]),
        (1, [Draft(E.TASK_PURGED, "", payload={"tasks": ["etl-1", "nope"]})]),
    ]


async def write(root: Path, batches: list[tuple[int, list[Draft]]]) -> None:
    shutil.rmtree(root, ignore_errors=True)
    clock = itertools.count(1_700_000_000_000, 250)
    log = EventLog.open(root, config=CFG, instance_id="node-1", clock=lambda: next(clock))
    for term, drafts in batches:
        if term != log.term:
            log.instance_id = "node-1" if term < 7 else "node-2"
        log.term = term
        await log.append_many(drafts)
    await log.close()
    for idx in (root / "log").glob("*.idx"):
        idx.unlink()
    (root / "snapshots").rmdir()


def dump(root: Path, until: int | None = None) -> None:
    state = state_at(root, until).to_dict()
    name = "expected.json" if until is None else f"expected-at-{until}.json"
    (root / name).write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")


def main() -> None:
    for name, batches in (
        ("etl-happy", happy()),
        ("eventful", eventful()),
        ("anomalous", anomalous()),
        ("durable", durable()),
        ("durable-children", durable_children()),
        ("retained", retained()),
    ):
        root = HERE / name
        asyncio.run(write(root, batches))
        dump(root)
    dump(HERE / "eventful", until=12)
    # One corrupted log: a flipped byte inside a sealed segment must be refused.
    bad = HERE / "corrupt-sealed"
    asyncio.run(write(bad, happy()))
    first = sorted((bad / "log").glob("*.seg"))[0]
    data = bytearray(first.read_bytes())
    data[300] ^= 0x20
    first.write_bytes(bytes(data))


if __name__ == "__main__":
    main()
