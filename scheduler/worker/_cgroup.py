"""cgroup v2 groups for steps with a memory limit, where the worker may make them.

The kernel holds a group's memory (`memory.max`) over everything its processes use,
page cache and the processes a step starts included, and kills them past it (the
OOM killer: SIGKILL, counted as `oom_kill` in `memory.events`). A worker can make
such groups only under its own cgroup v2 group, when that group was delegated to it
with the memory controller (systemd's `Delegate=yes`, a container with a private,
writable cgroup namespace). cgroup v2 allows controllers below a group only when no
process sits in it ("no internal processes"), so the worker moves itself (and so the
forkserver it starts later) into a leaf of its own, `apollo11-worker`, before it
enables `memory` for the groups below; each attempt then gets
`apollo11-step-TERM-EVENT` beside it, which its child joins before the step begins.

`setup()` answers with the tree, or with the sentence that says why not, which the
worker logs once: cgroup v1 (the memory controller is bound to the v1 hierarchy, as
on the machine this was written on: the v2 mount shows `hugetlb` alone), a group
that is not delegated (read-only, or another process shares it). The worker then
holds memory with RLIMIT_DATA instead (_fence.py).
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

WORKER_LEAF = "apollo11-worker"
STEP_PREFIX = "apollo11-step-"


def own_group(proc_cgroup: str, mountinfo: str) -> Path | None:
    """This process's cgroup v2 directory, from /proc/self/cgroup (its `0::PATH` line)
    and /proc/self/mountinfo (where cgroup2 is mounted); None without either."""
    path = next(
        (line[3:] for line in proc_cgroup.splitlines() if line.startswith("0::")),
        None,
    )
    if path is None:
        return None
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        if sep and right.split(" ", 1)[0] == "cgroup2":
            fields = left.split()
            root, mount = fields[3], fields[4]
            # a mount of a subtree (root != /) holds the paths below that root
            rel = os.path.relpath(path, root) if root != "/" else path.lstrip("/")
            if rel.startswith(".."):
                continue
            return Path(mount) / ("" if rel == "." else rel)
    return None


@dataclass(frozen=True, slots=True)
class CgroupTree:
    """The worker's delegated group: where steps' groups are made."""

    base: Path

    def make(self, name: str, memory_bytes: int) -> Path:
        """A step's group, its memory held at `memory_bytes`, swap at 0 (else a step
        past its limit swaps instead of stopping)."""
        group = self.base / f"{STEP_PREFIX}{name}"
        group.mkdir(exist_ok=True)
        (group / "memory.max").write_text(str(memory_bytes))
        with contextlib.suppress(OSError):  # no swap accounting: nothing to hold
            (group / "memory.swap.max").write_text("0")
        return group

    @staticmethod
    def oom_killed(group: Path) -> bool:
        """Did the kernel kill a process of the group at its limit?"""
        try:
            events = (group / "memory.events").read_text()
        except OSError:
            return False
        for line in events.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value) > 0
        return False

    @staticmethod
    def remove(group: Path, within_s: float = 5.0) -> None:
        """Remove the group once its processes are gone (what the step left running is
        killed: `cgroup.kill`, Linux 5.14)."""
        deadline = time.monotonic() + within_s
        while True:
            try:
                group.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    return
                with contextlib.suppress(OSError):
                    (group / "cgroup.kill").write_text("1")
                time.sleep(0.02)


def setup(base: Path | None = None) -> CgroupTree | str:
    """Make this process's group hold steps' groups: the tree, or why it cannot."""
    if base is None:
        try:
            base = own_group(
                Path("/proc/self/cgroup").read_text(), Path("/proc/self/mountinfo").read_text()
            )
        except OSError as e:
            return f"cannot read this process's cgroup: {e}"
        if base is None:
            return "this process is in no cgroup v2 group (cgroup v1, or no cgroup2 mount)"
    try:
        controllers = (base / "cgroup.controllers").read_text().split()
    except OSError as e:
        return f"cgroup v2 group {base} cannot be read: {e}"
    if "memory" not in controllers:
        return (
            f"the memory controller is not available in cgroup v2 group {base} (it offers: "
            f"{' '.join(controllers) or 'nothing'}): cgroup v1 holds it, or it is not delegated"
        )
    try:
        enabled = (base / "cgroup.subtree_control").read_text().split()
        if "memory" not in enabled:
            _enable_memory(base)
    except OSError as e:
        return f"cannot enable memory below cgroup v2 group {base} (not delegated?): {e}"
    return CgroupTree(base)


def _enable_memory(base: Path) -> None:
    """Move this process into a leaf of its own, then enable memory for the groups
    below `base`; moves back (and raises) when that fails (another process shares
    the group, or it is not ours to change)."""
    leaf = base / WORKER_LEAF
    leaf.mkdir(exist_ok=True)
    (leaf / "cgroup.procs").write_text(str(os.getpid()))
    try:
        (base / "cgroup.subtree_control").write_text("+memory")
    except OSError:
        with contextlib.suppress(OSError):
            (base / "cgroup.procs").write_text(str(os.getpid()))
            leaf.rmdir()
        raise
