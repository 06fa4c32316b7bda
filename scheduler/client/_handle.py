"""A submitted task, typed by its workflow's result: what `submit` returns.

    handle = client.submit(invoice, InvoiceInput(...))   # TaskHandle[InvoiceResult]
    total = handle.result().total_cents                  # an InvoiceResult: mypy knows

Submitted as a Workflow object, a handle is typed by the workflow's `result=`
model, and its `result()` is an instance of it (Any when the workflow declares
none: the main's result, or each step's by name). Submitted by name, it is
untyped (Any), and its `result()` is what `Client.result(task_id)` gives. Either
way it carries what the submission recorded (`task_id`, `created`, `event_id`),
as `submit` returned before handles, so code that reads those reads them still.

`TaskHandle` is the async client's (each call awaited), `SyncTaskHandle` the
blocking one's; the face calls them `AsyncTaskHandle` and `TaskHandle`, as it
calls the clients `AsyncClient` and `Client`. A handle names the task, not a
node: it outlives failovers, as the client does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from apollo11.scheduler.client._views import EventView, TaskView
from apollo11.scheduler.errors import FailedPreconditionError

if TYPE_CHECKING:
    from apollo11.scheduler.client._client import Client, SyncClient

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class TaskHandle(Generic[R]):
    """A task submitted with the async client: `await handle.result()` is an R."""

    task_id: str
    created: bool  # False: the idempotency key named a task already submitted
    event_id: int
    workflow: str
    # the workflow's `result=` model when submitted as a Workflow that declares one
    model: type[R] | None = field(default=None, repr=False)
    _client: Client | None = field(default=None, repr=False, compare=False)

    def _bound(self) -> Client:
        if self._client is None:
            raise RuntimeError(f"task {self.task_id}'s handle was made without a client")
        return self._client

    async def result(self, *, timeout: float | None = None) -> R:  # noqa: ASYNC109
        """Wait for the task to succeed; its result (an instance of the workflow's
        `result=` model when the handle is typed by one). Raises as `Client.result`."""
        c = self._bound()
        if self.model is None:
            out: R = await c.result(self.task_id, timeout=timeout)
            return out
        return await c.result(self.task_id, timeout=timeout, model=self.model)  # type: ignore[type-var]

    async def wait(self, *, timeout: float | None = None, check: bool = True) -> TaskView:  # noqa: ASYNC109
        """As `Client.wait` for this task."""
        return await self._bound().wait(self.task_id, timeout=timeout, check=check)

    async def task(self) -> TaskView:
        """The task now, as `Client.task` shows it."""
        return await self._bound().task(self.task_id)

    async def cancel(self, *, reason: str, operator: str = "") -> int:
        """As `Client.cancel` for this task: the TASK_CANCELLED event's id."""
        return await self._bound().cancel(self.task_id, reason=reason, operator=operator)

    def watch(self) -> AsyncIterator[EventView]:
        """The task's events, past then live, until it finishes."""
        return self._bound().watch(self.task_id)


@dataclass(frozen=True, slots=True)
class SyncTaskHandle(Generic[R]):
    """A task submitted with the blocking client: `handle.result()` is an R."""

    task_id: str
    created: bool
    event_id: int
    workflow: str
    model: type[R] | None = field(default=None, repr=False)
    _client: SyncClient | None = field(default=None, repr=False, compare=False)

    def _bound(self) -> SyncClient:
        if self._client is None:
            raise RuntimeError(f"task {self.task_id}'s handle was made without a client")
        return self._client

    def result(self, *, timeout: float | None = None) -> R:
        """As TaskHandle.result, blocking."""
        c = self._bound()
        if self.model is None:
            out: R = c.result(self.task_id, timeout=timeout)
            return out
        return c.result(self.task_id, timeout=timeout, model=self.model)  # type: ignore[type-var]

    def wait(self, *, timeout: float | None = None, check: bool = True) -> TaskView:
        """As `SyncClient.wait` for this task."""
        return self._bound().wait(self.task_id, timeout=timeout, check=check)

    def task(self) -> TaskView:
        """The task now."""
        return self._bound().task(self.task_id)

    def cancel(self, *, reason: str, operator: str = "") -> int:
        """As `SyncClient.cancel` for this task."""
        return self._bound().cancel(self.task_id, reason=reason, operator=operator)

    def watch(self) -> Iterator[EventView]:
        """The task's events, past then live, until it finishes (blocking)."""
        return self._bound().watch(self.task_id)


def task_result(task: TaskView, model: Any = None) -> Any:
    """A finished task's result: with `model` (a workflow's `result=`), its final
    step's (a durable task's main's) as an instance of it; without, a durable main's,
    or each step's by name. FailedPreconditionError when a model is given and the DAG
    ends in several steps, an operator skipped its final one, or what was recorded
    does not fit."""
    if model is None:
        if [s.name for s in task.steps] == ["main"]:
            return task.steps[0].result
        return {s.name: s.result for s in task.steps}
    from apollo11.scheduler import typed  # imports no pydantic of its own

    fitted, wrong = typed.fit(model, _final_result(task), what="result", declared=False)
    if wrong is not None:
        # recorded before the model was declared, or under another version of it
        raise FailedPreconditionError(
            f"task {task.task_id} ({task.workflow}): its recorded result does not "
            f"fit {model.__name__}: {wrong}"
        )
    return fitted


def _final_result(task: TaskView) -> Any:
    """The result a workflow's `result=` model describes: its one step that no other
    depends on (a durable task's `main`)."""
    finals = [s for s in task.steps if not any(s.name in o.after for o in task.steps)]
    where = f"task {task.task_id} ({task.workflow})"
    if len(finals) != 1:
        names = ", ".join(s.name for s in finals)
        raise FailedPreconditionError(
            f"{where} ends in {len(finals)} steps ({names}), so no one result: call "
            f"result() without model= for each step's by name"
        )
    if finals[0].state == "SKIPPED":
        raise FailedPreconditionError(
            f"{where} has no result: an operator skipped its final step {finals[0].name!r}"
        )
    return finals[0].result
