"""`--execution both`: this node's own slots first, then its workers'.

An attempt placed here runs in process (the in-process executor); one placed on a
worker goes through the remote executor. A step with labels, or with limits (which
only a worker enforces: `needs_worker`), always goes to a worker. Which one holds a
step's attempt is remembered from `place` to `release`, and every other call follows
it. An adopted attempt (STARTED on a worker by an earlier primary) is always the
workers'.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from apollo11.scheduler.dispatch.remote import RemoteExecutor
from apollo11.scheduler.engine import EMBEDDED, Attempt, InProcessExecutor, Key, Outcome


def _anywhere(workflow: str, version: int, step: str) -> bool:
    return False


class LocalFirstExecutor:
    def __init__(
        self,
        local: InProcessExecutor,
        remote: RemoteExecutor,
        slots: int,
        *,
        needs_worker: Callable[[str, int, str], bool] = _anywhere,
    ) -> None:
        self.local = local
        self._needs_worker = needs_worker
        self.remote = remote
        self.slots = slots
        self._here: set[Key] = set()  # steps whose attempt holds one of this node's slots

    def place(
        self, task_id: str, step: str, workflow: str, version: int, labels: Mapping[str, str]
    ) -> str | None:
        if (
            len(self._here) < self.slots
            and not labels
            and not self._needs_worker(workflow, version, step)
        ):
            self._here.add((task_id, step))
            return EMBEDDED
        return self.remote.place(task_id, step, workflow, version, labels)

    def unplaced(self, workflow: str, version: int, labels: Mapping[str, str]) -> str | None:
        why = self.remote.unplaced(workflow, version, labels)
        if why is None or not labels:
            return None  # busy: this node's slots free up as its attempts end
        return why

    def release(self, task_id: str, step: str) -> None:
        key = (task_id, step)
        if key in self._here:
            self._here.discard(key)
        else:
            self.remote.release(task_id, step)

    def free_slots(self) -> int:
        return self.slots - len(self._here) + self.remote.free_slots()

    def free_for(self, workflow: str, version: int, labels: Mapping[str, str]) -> int:
        here = 0 if labels else self.slots - len(self._here)
        return here + self.remote.free_for(workflow, version, labels)

    def watch_capacity(self, notify: Callable[[], None]) -> None:
        self.remote.watch_capacity(notify)

    def run(self, attempt: Attempt) -> Awaitable[Outcome]:
        if (attempt.ctx.task_id, attempt.ctx.step) in self._here:
            return self.local.run(attempt)
        return self.remote.run(attempt)

    async def adopt(self, attempt: Attempt, where: str) -> Outcome:
        return await self.remote.adopt(attempt, where)

    def abandon(self, task_id: str, step: str, reason: str) -> None:
        if (task_id, step) in self._here:
            self.local.abandon(task_id, step, reason)
        else:
            self.remote.abandon(task_id, step, reason)

    def settle(self, task_id: str, step: str) -> Awaitable[None] | None:
        if (task_id, step) in self._here:
            return self.local.settle(task_id, step)
        return self.remote.settle(task_id, step)
