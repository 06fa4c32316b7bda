"""scheduler/nodeview/actions.py: one check and one dispatch of the operator actions,
for the gRPC servicer and the web pages (on the primary, or forwarded from a
standby)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from apollo11.scheduler.errors import FailedPreconditionError, InvalidArgumentError, NotLeaderError
from apollo11.scheduler.nodeview import actions


class FakeEngine:
    leading = True

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def _record(self, name: str, *args: Any, **kw: Any) -> Any:
        self.calls.append((name, args, kw))
        return SimpleNamespace(event_id=7)

    async def retry_step(self, *args: Any, **kw: Any) -> Any:
        return self._record("retry_step", *args, **kw)

    async def skip_step(self, *args: Any, **kw: Any) -> Any:
        return self._record("skip_step", *args, **kw)

    async def cancel_task(self, *args: Any, **kw: Any) -> Any:
        return self._record("cancel_task", *args, **kw)


class FakeClient(FakeEngine):
    async def retry_step(self, *args: Any, **kw: Any) -> Any:
        return self._record("retry_step", *args, **kw).event_id

    async def skip_step(self, *args: Any, **kw: Any) -> Any:
        return self._record("skip_step", *args, **kw).event_id

    async def cancel(self, *args: Any, **kw: Any) -> Any:
        return self._record("cancel", *args, **kw).event_id


@pytest.mark.parametrize(
    ("kind", "fields", "message"),
    [
        ("retry", {"task_id": "", "step": "s", "reason": "r"}, "task_id is required"),
        ("skip", {"task_id": "t", "step": "", "reason": "r"}, "step is required"),
        ("skip", {"task_id": "t", "step": "s", "reason": ""}, "reason is required"),
        ("cancel", {"task_id": "t", "reason": "r" * 1025}, "reason is 1025 characters"),
        ("cancel", {"task_id": "t", "reason": "r", "display": "d" * 257}, "operator is 257"),
        ("skip", {"task_id": "t" * 257, "step": "s", "reason": "r"}, "over the limit of 256"),
    ],
)
def test_fields_are_checked_with_the_apis_messages(
    kind: actions.ActionKind, fields: dict[str, str], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        actions.operator_action(kind, **fields)


def test_a_cancel_needs_no_step_and_an_empty_display_is_none() -> None:
    act = actions.operator_action("cancel", "t1", reason="cleanup")
    assert act == actions.OperatorAction("cancel", "t1", "cleanup", "", None)
    assert act.describe() == "cancel"
    retry = actions.operator_action("retry", "t1", step="infer", reason="r", display="Olga")
    assert retry.display == "Olga" and retry.describe() == "retry of infer"


@pytest.mark.parametrize(
    ("kind", "method"), [("retry", "retry_step"), ("skip", "skip_step"), ("cancel", "cancel_task")]
)
async def test_on_engine_records_the_principal_with_the_display_beside_it(
    kind: actions.ActionKind, method: str
) -> None:
    engine = FakeEngine()
    act = actions.operator_action(
        kind, "t1", step="" if kind == "cancel" else "s", reason="why", display="O"
    )
    event = await actions.on_engine(engine, act, operator="olga")  # type: ignore[arg-type]
    assert event.event_id == 7
    name, args, kw = engine.calls[0]
    assert name == method
    assert args == (("t1",) if kind == "cancel" else ("t1", "s"))
    assert kw == {"operator": "olga", "reason": "why", "display": "O"}


@pytest.mark.parametrize(
    ("kind", "method"), [("retry", "retry_step"), ("skip", "skip_step"), ("cancel", "cancel")]
)
async def test_forward_sends_the_display_as_the_operator_field(
    kind: actions.ActionKind, method: str
) -> None:
    client = FakeClient()
    act = actions.operator_action(kind, "t1", step="" if kind == "cancel" else "s", reason="why")
    assert await actions.forward(client, act) == 7  # type: ignore[arg-type]
    name, args, kw = client.calls[0]
    assert name == method and args[0] == "t1" and kw == {"operator": "", "reason": "why"}


def _node(role: str, engine: Any, leader: Any = None) -> Any:
    return SimpleNamespace(
        role=role, engine=engine, leader=leader, not_leader=lambda: NotLeaderError("standby")
    )


async def test_perform_on_the_leading_primary_uses_its_engine() -> None:
    engine = FakeEngine()
    act = actions.operator_action("cancel", "t1", reason="why")
    assert await actions.perform(_node("primary", engine), act, operator="o", token=None) == 7
    assert engine.calls[0][0] == "cancel_task"


async def test_perform_without_a_known_primary_is_refused() -> None:
    act = actions.operator_action("cancel", "t1", reason="why")
    with pytest.raises(FailedPreconditionError, match="no primary is known"):
        await actions.perform(_node("standby", None), act, operator="o", token=None)


def test_leading_engine_or_where_to_go() -> None:
    engine = FakeEngine()
    assert actions.leading_engine(_node("primary", engine)) is engine
    engine.leading = False
    with pytest.raises(NotLeaderError):
        actions.leading_engine(_node("primary", engine))
    with pytest.raises(NotLeaderError):
        actions.leading_engine(_node("standby", None))


def test_a_retry_without_a_step_is_a_resume_of_the_steps_failed_for_good() -> None:
    act = actions.operator_action("retry", "t", reason="fixed")
    assert act.step == "" and act.describe() == "resume"


class FakeRetention:
    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine

    async def hold(self, *args: Any, **kw: Any) -> Any:
        return self.engine._record("hold", *args, **kw)


class FakeHolder(FakeEngine):
    """An engine with retention's holds (engine.retention.hold)."""

    def __init__(self) -> None:
        super().__init__()
        self.retention = FakeRetention(self)


class FakeHoldClient(FakeEngine):
    async def hold(self, *args: Any, **kw: Any) -> Any:
        return self._record("hold", *args, **kw).event_id

    async def release(self, *args: Any, **kw: Any) -> Any:
        return self._record("release", *args, **kw).event_id


def test_a_hold_needs_a_reason_a_release_does_not_and_neither_keeps_a_display() -> None:
    with pytest.raises(InvalidArgumentError, match="reason is required"):
        actions.operator_action("hold", "t1", reason="")
    with pytest.raises(InvalidArgumentError, match="reason is 1025 characters"):
        actions.operator_action("release", "t1", reason="r" * 1025)
    # a TASK_HELD records its principal only: a typed name is not kept
    hold = actions.operator_action("hold", "t1", reason="case 7", display="mallory")
    assert hold == actions.OperatorAction("hold", "t1", "case 7", "", None)
    assert actions.operator_action("release", "t1", reason="") == actions.OperatorAction(
        "release", "t1", "", "", None
    )


@pytest.mark.parametrize(("kind", "held"), [("hold", True), ("release", False)])
async def test_hold_and_release_on_the_engine_record_the_principal(
    kind: actions.ActionKind, held: bool
) -> None:
    engine = FakeHolder()
    act = actions.operator_action(kind, "t1", reason="case 7")
    assert (await actions.on_engine(engine, act, operator="olga")).event_id == 7  # type: ignore[arg-type]
    assert engine.calls == [
        ("hold", ("t1",), {"operator": "olga", "reason": "case 7", "held": held})
    ]


@pytest.mark.parametrize("kind", ["hold", "release"])
async def test_hold_and_release_forwarded_name_no_operator(kind: actions.ActionKind) -> None:
    """From a standby: the session's token is the principal the primary records."""
    client = FakeHoldClient()
    act = actions.operator_action(kind, "t1", reason="case 7")
    assert await actions.forward(client, act) == 7  # type: ignore[arg-type]
    assert client.calls == [(kind, ("t1",), {"reason": "case 7"})]
