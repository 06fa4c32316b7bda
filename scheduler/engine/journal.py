"""A durable main's window on the log: the engine's side of `workflow.Journal`.

The attempt reads the task's checkpoints, its wait and the event index from the
replayed state, and appends CHECKPOINT and WAIT records as it goes; each
`record` returns only once its records are committed (durable, and replicated
in synchronous mode), so the code after a `ctx.step` never runs before that
step's checkpoint would survive a failover. A WAIT ends the attempt: `ended`
tells the runner to record no outcome for it (docs/durable.md).

A `ctx.spawn` plans its child here (its workflow checked, its task id chosen, or
the one its idempotency key already names taken); the child's TASK_SUBMITTED is
appended in the same batch as the spawn's checkpoint, before it, so a torn
batch leaves at most a child without its checkpoint, which the re-run finds by
its key instead of starting a second one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from apollo11.scheduler import waits
from apollo11.scheduler.clock import Clock
from apollo11.scheduler.engine.intake import new_task_id, submission
from apollo11.scheduler.errors import InvalidEventError, LeaseLostError
from apollo11.scheduler.log import Draft, EventType
from apollo11.scheduler.state import Store, joined
from apollo11.scheduler.taskid import is_task_id
from apollo11.scheduler.workflow import StepError, Workflow

# (workflow, input, version) -> the workflow a submission of it runs, or an ApolloError
Resolve = Callable[[str, Any, "int | None"], Workflow]


class StoreJournal:
    """The journal of one attempt of a durable main."""

    def __init__(
        self,
        *,
        store: Store,
        clock: Clock,
        task_id: str,
        step: str,
        attempt: int,
        lease_valid: Callable[[], bool],
        committed: Callable[[int], Awaitable[bool]],
        resolve: Resolve | None = None,
    ) -> None:
        self._store = store
        self._resolve = resolve
        self._clock = clock
        self._task_id = task_id
        self._step = step
        self._attempt = attempt
        self._lease_valid = lease_valid
        self._committed = committed
        self.ended = False  # a WAIT was appended: the attempt is over
        self._children: dict[str, Draft] = {}  # planned, not recorded yet: task id -> draft

    def _durable(self) -> Any:
        task = self._store.state.tasks.get(self._task_id)
        return task.durable if task is not None else None

    @property
    def json_max_depth(self) -> int:
        """How deeply a ctx.step's output may nest (the node's setting)."""
        return self._store.log.config.json_max_depth

    @property
    def checkpoints(self) -> Sequence[Mapping[str, Any]]:
        d = self._durable()
        return list(d.checkpoints) if d is not None else []

    @property
    def wait(self) -> Mapping[str, Any] | None:
        d = self._durable()
        return dict(d.wait) if d is not None and d.wait is not None else None

    @property
    def first_event_id(self) -> int:
        task = self._store.state.tasks.get(self._task_id)
        return task.first_event_id if task is not None else 0

    def first_event(self, key: str, since: int) -> tuple[int, Any] | None:
        return self._store.state.first_event(key, since)

    def child(self, task_id: str) -> Mapping[str, Any] | None:
        state = self._store.state
        d = self._durable()
        recorded = d is not None and any(c == task_id for c, _ in waits.spawned(d.checkpoints))
        return joined(state.peek(task_id), recorded, lambda: state.not_found(task_id))

    def plan_child(
        self,
        workflow: str,
        input: Any,
        version: int | None,
        key: str,
        parent: Mapping[str, Any],
    ) -> str:
        known = self._store.state.task_for_key(key)
        if known is not None and (known.parent or {}).get("task_id") == self._task_id:
            return known.task_id  # a run before this one submitted it, then died
        if self._resolve is None:
            raise StepError("this engine cannot start child tasks", final=True)
        wf = self._resolve(workflow, input, version)
        payload = submission(wf, input, key)
        payload["parent"] = dict(parent)
        task_id = new_task_id()
        self._children[task_id] = Draft(EventType.TASK_SUBMITTED, task_id, payload=payload)
        return task_id

    async def resolve(self, wait: Mapping[str, Any], now_ms: int) -> Mapping[str, Any] | None:
        return waits.resolve(wait, self, now_ms)

    def now_ms(self) -> int:
        return self._clock.now_ms()

    async def record_planned(
        self,
        checkpoints: Sequence[Mapping[str, Any]],
        wait: Mapping[str, Any] | None,
        children: Sequence[Mapping[str, Any]],
    ) -> dict[str, str]:
        """What a durable main on a worker asks to record (RemoteExecutor): as `record`,
        but positions the log holds already are skipped (the same record sent again
        after its reply was lost with a stream), and the children its spawns planned
        are checked here: their workflow and input, an id of the right form that names
        no task, a key of this parent's. A planned child whose key names a task this
        parent spawned already (a batch torn by a crash) is that task: returns
        {planned id: the id the log holds}, which the checkpoints then name."""
        task = self._store.state.tasks.get(self._task_id)
        d = task.durable if task is not None else None
        have = len(d.checkpoints) if d is not None else 0
        if wait is not None and d is not None and d.wait is not None:
            step = task.steps.get(self._step) if task is not None else None
            if step is not None and step.attempt == self._attempt and d.wait == dict(wait):
                self.ended = True  # recorded already: its reply was lost
                return {}
        fresh = [dict(c) for c in checkpoints if int(c.get("seq", -1)) >= have]
        planned = {str(c.get("task_id")): c for c in children}
        renamed: dict[str, str] = {}
        for c in fresh:
            if c.get("kind") != "spawn":
                continue
            child = str(c.get("child"))
            plan = planned.get(child)
            if plan is None:
                raise StepError(
                    f"checkpoint {c.get('seq')}: spawn of {child} was not planned", final=True
                )
            self._plan_remote(c, plan, renamed)
        if not fresh and wait is None:
            return renamed
        await self.record(fresh, wait)
        return renamed

    def _plan_remote(
        self, c: dict[str, Any], plan: Mapping[str, Any], renamed: dict[str, str]
    ) -> None:
        seq, child = c.get("seq"), str(c.get("child"))
        where = f"ctx.spawn {plan.get('workflow')!r} at checkpoint {seq}"
        key = str(plan.get("key"))
        parent = {"task_id": self._task_id, "seq": seq, "close": c.get("close")}
        if not key.startswith(f"{self._task_id}:") or dict(plan.get("parent") or {}) != parent:
            raise StepError(f"{where}: its key and parent must be this task's", final=True)
        state = self._store.state
        known = state.task_for_key(key)
        if known is not None and (known.parent or {}).get("task_id") == self._task_id:
            renamed[child] = known.task_id
            c["child"] = c["output"] = known.task_id
            return
        if not is_task_id(child) or state.peek(child) is not None:
            raise StepError(f"{where}: {child!r} is not a new task id", final=True)
        if self._resolve is None:
            raise StepError(f"{where}: this engine cannot start child tasks", final=True)
        try:
            wf = self._resolve(str(plan.get("workflow")), plan.get("input"), plan.get("version"))
        except Exception as e:
            raise StepError(f"{where}: {e}", final=True) from e
        payload = submission(wf, plan.get("input"), key)
        payload["parent"] = parent
        self._children[child] = Draft(EventType.TASK_SUBMITTED, child, payload=payload)

    async def sleep(self, seconds: float) -> None:
        await self._clock.sleep(seconds)

    async def record(
        self, checkpoints: Sequence[Mapping[str, Any]], wait: Mapping[str, Any] | None = None
    ) -> None:
        where = f"{self._task_id}/{self._step} attempt {self._attempt}"
        if self.ended:
            raise StepError(f"{where}: recorded after its WAIT ended it", final=True)
        if not self._lease_valid():
            # never write for an attempt this node may no longer own
            raise LeaseLostError(f"{where}: checkpoint not recorded, the lease is in doubt")
        drafts = [
            self._children.pop(str(c["child"]))
            for c in checkpoints
            if c.get("kind") == "spawn" and str(c.get("child")) in self._children
        ]
        drafts += [
            Draft(EventType.CHECKPOINT, self._task_id, self._step, dict(c), self._attempt)
            for c in checkpoints
        ]
        if wait is not None:
            drafts.append(
                Draft(EventType.WAIT, self._task_id, self._step, dict(wait), self._attempt)
            )
        if not drafts:
            return
        try:
            events = await self._store.log.append_many(drafts)
        except InvalidEventError as e:
            last = checkpoints[-1] if checkpoints else wait or {}
            raise StepError(
                f"checkpoint {last.get('seq')} ({last.get('kind')} {last.get('name')!r}) "
                f"refused: {e}",
                final=True,
            ) from e
        if wait is not None:
            self.ended = True
        if not await self._committed(events[-1].event_id):
            raise LeaseLostError(f"{where}: leadership lost before its checkpoint committed")
