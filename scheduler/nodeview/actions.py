"""Operator actions, once: retry a step, skip a step, cancel or redact a task, put a
legal hold on it or release one.

The gRPC servicer (RetryStep, SkipStep, CancelTask, RedactTask) and the web pages' forms
both build an `OperatorAction` with `operator_action()` (the fields checked: task
id and step required, the reason required, the limits of checks.py) and do it with
`on_engine` on the primary; the web, on a standby, `forward`s it to the primary
over gRPC with the session's own token (`perform` chooses).

Who may act is decided before an action is built (the gRPC interceptor's
method roles, the web's guard.py). The recorded operator is always the
authenticated principal, passed by the caller; the optional display name
travels beside it and the engine keeps it as "as", never in its place.
Whether the task's state allows the action is the engine's to say
(engine/intake.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from apollo11.scheduler.errors import FailedPreconditionError
from apollo11.scheduler.nodeview.checks import MAX_REASON, optional, required

if TYPE_CHECKING:
    from apollo11.scheduler.client import Client
    from apollo11.scheduler.engine import Engine
    from apollo11.scheduler.log import Event
    from apollo11.scheduler.nodeview.ports import NodeView

ActionKind = Literal["retry", "skip", "cancel", "redact", "hold", "release"]
# the web pages' forms: every kind
ACTION_KINDS: tuple[ActionKind, ...] = ("retry", "skip", "cancel", "hold", "release", "redact")
# Each kind's RPC (the role it takes is the web form's too: tests/web/test_routes.py)
RPCS: dict[ActionKind, str] = {
    "retry": "RetryStep",
    "skip": "SkipStep",
    "cancel": "CancelTask",
    "redact": "RedactTask",
    "hold": "HoldTask",
    "release": "ReleaseTask",
}
# A TASK_HELD records its principal only ("by"): no display name beside it.
HOLDS: tuple[ActionKind, ...] = ("hold", "release")


@dataclass(frozen=True, slots=True)
class OperatorAction:
    kind: ActionKind
    task_id: str
    reason: str
    step: str = ""  # "" for a cancel, and a retry of the steps failed for good (a resume)
    display: str | None = None  # the name typed beside the principal, if any

    def describe(self) -> str:
        """ "retry of infer", "cancel", "resume": what the web's notice says was recorded."""
        if self.kind == "retry" and not self.step:
            return "resume"
        return f"{self.kind} of {self.step}" if self.step else self.kind


def operator_action(
    kind: ActionKind, task_id: str, *, reason: str, step: str = "", display: str = ""
) -> OperatorAction:
    """The action, its fields checked (InvalidArgumentError names the field)."""
    task_id = required(task_id, "task_id")
    if kind == "skip":  # a retry without one retries every step failed for good (resume)
        step = required(step, "step")
    if kind == "release":  # why a hold ends is worth saying, but not required (the RPC's rule)
        why = optional(reason, "reason", MAX_REASON) or ""
    else:
        why = required(reason, "reason", MAX_REASON)
    shown = None if kind in HOLDS else optional(display, "operator")
    return OperatorAction(kind, task_id, why, step, shown)


def leading_engine(node: NodeView) -> Engine:
    """The engine every write goes through, or the error that says where to go."""
    engine = node.engine
    if engine is None or not engine.leading:
        raise node.not_leader()
    return engine


async def on_engine(engine: Engine, act: OperatorAction, *, operator: str) -> Event:
    """Do it here, on the primary's engine; the committed event."""
    if act.kind == "retry":
        return await engine.retry_step(
            act.task_id, act.step, operator=operator, reason=act.reason, display=act.display
        )
    if act.kind == "skip":
        return await engine.skip_step(
            act.task_id, act.step, operator=operator, reason=act.reason, display=act.display
        )
    if act.kind in HOLDS:
        return await engine.retention.hold(
            act.task_id, operator=operator, reason=act.reason, held=act.kind == "hold"
        )
    if act.kind == "redact":
        return await engine.redact_task(
            act.task_id, operator=operator, reason=act.reason, display=act.display
        )
    return await engine.cancel_task(
        act.task_id, operator=operator, reason=act.reason, display=act.display
    )


async def forward(client: Client, act: OperatorAction) -> int:
    """Ask the primary (the client's principal is the operator it records); its event id."""
    shown = act.display or ""
    if act.kind == "retry":
        return await client.retry_step(act.task_id, act.step, operator=shown, reason=act.reason)
    if act.kind == "skip":
        return await client.skip_step(act.task_id, act.step, operator=shown, reason=act.reason)
    if act.kind == "redact":
        return await client.redact(act.task_id, operator=shown, reason=act.reason)
    if act.kind == "hold":
        return await client.hold(act.task_id, reason=act.reason)
    if act.kind == "release":
        return await client.release(act.task_id, reason=act.reason)
    return await client.cancel(act.task_id, operator=shown, reason=act.reason)


async def perform(node: NodeView, act: OperatorAction, *, operator: str, token: str | None) -> int:
    """On the primary through its engine, else forwarded to the primary with `token`
    (whose principal is `operator`): either way the same audited event; its id."""
    engine = node.engine
    if node.role == "primary" and engine is not None and engine.leading:
        return (await on_engine(engine, act, operator=operator)).event_id
    leader = node.leader
    if leader is None:
        raise FailedPreconditionError("no primary is known right now; try again shortly")
    from apollo11.scheduler.client import Client  # only a standby's web pages need it

    s = node.settings
    # The session's own token, so the primary authenticates and records the same
    # principal; the display name travels as the request's operator field, as from
    # the CLI. The primary's public port presents a certificate of the cluster CA.
    async with Client(
        leader.address,
        retries=1,
        token=token,
        ca=s.peer_ca if s.tls_cert is not None else None,
        tls=s.tls_cert is not None,
    ) as c:
        return await forward(c, act)
