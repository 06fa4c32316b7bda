"""A step fenced in by its limits: how its child process is held, and what its end means.

A step with limits (scheduler/steplimits.py), or any step when the worker has
`--step-memory`, runs in a child process of its own whatever the worker's
`--isolation`: a limit on the worker's process would stop every step on it, and the
worker with them. The child applies its fence to itself (`apply`) before it imports
the workflow's module, so the fence holds all of the step's process.

Memory, one of two ways, chosen once when the worker starts (`Enforcement`):

* **cgroup v2** `memory.max` (_cgroup.py), where the worker's group is delegated to it:
  the kernel counts what the step's process and its subprocesses really use, and kills
  them past it; `memory.events` says so (`oom_kill`), and the step fails with
  `MemoryLimitExceeded`.
* **RLIMIT_DATA** elsewhere: the child's private writable memory (heap, anonymous
  mmaps, thread stacks) is held at the limit; an allocation past it fails, Python
  raises MemoryError in the step, and the child reports `MemoryLimitExceeded` (a
  megabyte kept in reserve is freed first, so that the report itself can be made).
  Not RLIMIT_AS: that counts address space reserved and never used, and Python
  reserves plenty (glibc's 64 MiB arena per thread, OpenBLAS's buffers when numpy
  loads, every mapped library): a child of this worker that has used 25 MiB has
  reserved several times that, and a 512 MiB RLIMIT_AS would stop a numpy step that
  uses far less (docs/workers.md has the figures). RLIMIT_DATA holds each process
  alone: a subprocess the step starts gets a limit of its own, not a share.

CPU both ways: RLIMIT_CPU, whole seconds of user + system time of the child, not wall
time. At `cpu_s` the kernel sends SIGXCPU, which ends the child (its default action;
no core: RLIMIT_CORE 0), and the step fails with `CpuLimitExceeded`; a step that
catches SIGXCPU is killed CPU_HARD_GRACE_S later (SIGKILL, reported as its child
dying: the worker cannot tell that kill from another).
"""

from __future__ import annotations

import contextlib
import logging
import resource
import signal
from dataclasses import dataclass
from pathlib import Path

from apollo11.scheduler.cause import mro_names
from apollo11.scheduler.steplimits import (
    CpuLimitExceeded,
    Limits,
    MemoryLimitExceeded,
    StepLimitExceeded,
    format_size,
)
from apollo11.scheduler.worker import _cgroup
from apollo11.scheduler.worker._records import Failed

log = logging.getLogger("apollo11.worker")

CPU_HARD_GRACE_S = 2
RESERVE_BYTES = 1 << 20
_reserve: bytearray | None = None  # the child's: freed at its MemoryError


@dataclass(frozen=True, slots=True)
class Fence:
    """What a child applies to itself (pickled into it with its job)."""

    memory_bytes: int | None
    cpu_s: int | None
    cgroup: str = ""  # the step's group to join; "": memory by RLIMIT_DATA

    @property
    def how(self) -> str:
        return "cgroup memory.max" if self.cgroup else "RLIMIT_DATA"


class Enforcement:
    """How this worker fences steps in: cgroup v2 groups, or rlimits. `sentence` says
    which and why, for the worker's log."""

    def __init__(self, tree: _cgroup.CgroupTree | None, sentence: str) -> None:
        self.tree = tree
        self.sentence = sentence

    @classmethod
    def choose(cls) -> Enforcement:
        found = _cgroup.setup()
        if isinstance(found, _cgroup.CgroupTree):
            return cls(found, f"step memory limits: cgroup v2 memory.max under {found.base}")
        return cls(None, f"step memory limits: RLIMIT_DATA per step process ({found})")

    def fence(self, limits: Limits, name: str) -> Fence:
        """The fence of one attempt (`name`: unique among the running ones); its cgroup,
        if any, is made here and removed by `release`."""
        memory = limits.memory_bytes
        group = ""
        if memory is not None and self.tree is not None:
            try:
                group = str(self.tree.make(name, memory))
            except OSError as e:  # the tree went away under us: still fenced, by rlimit
                log.warning("cannot make cgroup for %s (%s): RLIMIT_DATA instead", name, e)
        return Fence(memory, limits.cpu_seconds, group)

    def oom_killed(self, fence: Fence) -> bool:
        return bool(fence.cgroup) and _cgroup.CgroupTree.oom_killed(Path(fence.cgroup))

    def release(self, fence: Fence) -> None:
        if fence.cgroup:
            _cgroup.CgroupTree.remove(Path(fence.cgroup))


# ------------------------------------------------------------- in the child


def apply(fence: Fence) -> None:
    """Fence this process in (the child, before anything of the step runs)."""
    global _reserve
    if fence.cpu_s is not None:
        # SIGXCPU's default action ends the process: nothing of the worker's may have
        # changed it, and ending it writes no core of a step's memory
        signal.signal(signal.SIGXCPU, signal.SIG_DFL)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_CPU, (fence.cpu_s, fence.cpu_s + CPU_HARD_GRACE_S))
    if fence.memory_bytes is None:
        return
    if fence.cgroup:
        Path(fence.cgroup, "cgroup.procs").write_text("0")  # "0": this process
        return
    _reserve = bytearray(RESERVE_BYTES)
    resource.setrlimit(resource.RLIMIT_DATA, (fence.memory_bytes, fence.memory_bytes))


def failure_in_child(fence: Fence | None, e: BaseException) -> Failed | None:
    """A step's exception as its fence makes it: a MemoryError under a memory limit is
    the limit (None: it is what it is)."""
    global _reserve
    if fence is None or fence.memory_bytes is None or not isinstance(e, MemoryError):
        return None
    if isinstance(e, StepLimitExceeded):
        return None  # the step raised it itself: its own message
    _reserve = None  # room to report in
    return memory_exceeded(fence, "an allocation failed at the limit")


# ------------------------------------------------------------ in the worker


def memory_exceeded(fence: Fence, what: str) -> Failed:
    limit = format_size(fence.memory_bytes or 0)
    return Failed(
        "MemoryLimitExceeded",
        f"the step went past its memory limit of {limit} ({fence.how}): {what}",
        mro=mro_names(MemoryLimitExceeded),
    )


def note(fence: Fence) -> str:
    """What a fenced child's death of another cause adds to its message: the one kill
    the worker cannot tell apart, its CPU limit's hard stop."""
    if fence.cpu_s is None:
        return ""
    hard = fence.cpu_s + CPU_HARD_GRACE_S
    return (
        f" (under a limit of {fence.cpu_s} CPU s: a step that catches SIGXCPU is killed "
        f"with SIGKILL at {hard} CPU s)"
    )


def died(fence: Fence, exitcode: int | None, oom_killed: bool) -> Failed | None:
    """A child that died without reporting, read by its fence: which limit stopped it,
    or None (it died of something else)."""
    if oom_killed:
        return memory_exceeded(fence, "the kernel killed its process (oom_kill)")
    if fence.cpu_s is not None and exitcode == -signal.SIGXCPU:
        return Failed(
            "CpuLimitExceeded",
            f"the step used its {fence.cpu_s} CPU seconds (RLIMIT_CPU) and was stopped",
            mro=mro_names(CpuLimitExceeded),
        )
    return None
