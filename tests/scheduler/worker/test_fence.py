"""How a step's child is fenced in, without a child: what its death means by its fence,
and the cgroup v2 tree on a directory laid out as the kernel's would be."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from apollo11.scheduler.steplimits import Limits
from apollo11.scheduler.worker import _cgroup, _fence

FENCE = _fence.Fence(memory_bytes=512 << 20, cpu_s=60)


def test_a_child_killed_by_sigxcpu_used_its_cpu_seconds() -> None:
    f = _fence.died(FENCE, -signal.SIGXCPU, oom_killed=False)
    assert f is not None and f.error_type == "CpuLimitExceeded"
    assert f.mro[0] == "apollo11.CpuLimitExceeded"
    assert "its 60 CPU seconds" in f.message


def test_a_child_the_kernel_killed_in_its_group_went_past_its_memory() -> None:
    fence = _fence.Fence(512 << 20, None, cgroup="/sys/fs/cgroup/x/apollo11-step-3-7")
    f = _fence.died(fence, -signal.SIGKILL, oom_killed=True)
    assert f is not None and f.error_type == "MemoryLimitExceeded"
    assert "512 MiB (cgroup memory.max)" in f.message


def test_any_other_death_is_not_a_limits() -> None:
    assert _fence.died(FENCE, -signal.SIGKILL, oom_killed=False) is None
    assert _fence.died(FENCE, 9, oom_killed=False) is None
    no_cpu = _fence.Fence(512 << 20, None)
    assert _fence.died(no_cpu, -signal.SIGXCPU, oom_killed=False) is None


def test_a_sigkill_under_a_cpu_limit_says_what_it_may_have_been() -> None:
    assert "killed with SIGKILL at 62 CPU s" in _fence.note(FENCE)
    assert _fence.note(_fence.Fence(512 << 20, None)) == ""


def test_a_memory_error_under_a_memory_limit_is_the_limit() -> None:
    f = _fence.failure_in_child(FENCE, MemoryError())
    assert f is not None and f.error_type == "MemoryLimitExceeded"
    assert "512 MiB (RLIMIT_DATA)" in f.message
    assert _fence.failure_in_child(FENCE, KeyError("x")) is None
    assert _fence.failure_in_child(_fence.Fence(None, 60), MemoryError()) is None
    assert _fence.failure_in_child(None, MemoryError()) is None


MOUNTINFO = (
    "29 1 0:26 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "35 1 0:30 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
)


def test_own_group_is_found_from_proc_files() -> None:
    cgroup = "4:memory:/process_api/abc\n0::/system.slice/w.service\n"
    assert _cgroup.own_group(cgroup, MOUNTINFO) == Path(
        "/sys/fs/cgroup/unified/system.slice/w.service"
    )
    assert _cgroup.own_group("0::/\n", MOUNTINFO) == Path("/sys/fs/cgroup/unified")
    assert _cgroup.own_group("4:memory:/x\n", MOUNTINFO) is None  # cgroup v1 only
    assert _cgroup.own_group("0::/a\n", MOUNTINFO.splitlines()[0]) is None  # no cgroup2 mount
    # a container's mount of its own subtree
    sub = "40 1 0:30 /docker/c1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    assert _cgroup.own_group("0::/docker/c1/app\n", sub) == Path("/sys/fs/cgroup/app")


def _group(path: Path, controllers: str, enabled: str = "") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "cgroup.controllers").write_text(controllers + "\n")
    (path / "cgroup.subtree_control").write_text(enabled + "\n")
    (path / "cgroup.procs").write_text(f"{os.getpid()}\n")
    return path


def test_without_the_memory_controller_it_says_why_and_holds_by_rlimit(tmp_path: Path) -> None:
    base = _group(tmp_path / "unified", "hugetlb")
    said = _cgroup.setup(base)
    assert isinstance(said, str)
    assert "memory controller is not available" in said and "offers: hugetlb" in said


def test_a_delegated_group_holds_each_steps_memory(tmp_path: Path) -> None:
    base = _group(tmp_path / "w.service", "cpu memory pids")
    tree = _cgroup.setup(base)
    assert isinstance(tree, _cgroup.CgroupTree)
    # the worker moved itself into a leaf before enabling memory below its group
    assert (base / "apollo11-worker" / "cgroup.procs").read_text() == str(os.getpid())
    assert (base / "cgroup.subtree_control").read_text() == "+memory"
    enforcement = _fence.Enforcement(tree, "test")
    fence = enforcement.fence(Limits(memory="256MiB", cpu_s=5), "3-7")
    group = Path(fence.cgroup)
    assert group == base / "apollo11-step-3-7"
    assert (group / "memory.max").read_text() == str(256 << 20)
    assert (group / "memory.swap.max").read_text() == "0"
    assert (fence.memory_bytes, fence.cpu_s, fence.how) == (256 << 20, 5, "cgroup memory.max")
    assert not enforcement.oom_killed(fence)
    (group / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n")
    assert enforcement.oom_killed(fence)
    for name in ("memory.max", "memory.swap.max", "memory.events"):
        (group / name).unlink()  # the kernel's files go with the group; a test's do not
    enforcement.release(fence)
    assert not group.exists()


def test_without_a_tree_the_fence_is_rlimits() -> None:
    fence = _fence.Enforcement(None, "test").fence(Limits(memory="1GiB"), "3-8")
    assert (fence.memory_bytes, fence.cpu_s, fence.cgroup, fence.how) == (
        1 << 30,
        None,
        "",
        "RLIMIT_DATA",
    )


def test_this_machine_says_how_it_holds_steps_memory() -> None:
    """Whatever the machine: a tree or a sentence, never an exception (the worker logs
    it at start). Not run on the test process itself where it would move it."""
    base = _cgroup.own_group(
        Path("/proc/self/cgroup").read_text(), Path("/proc/self/mountinfo").read_text()
    )
    try:
        offered = "" if base is None else (base / "cgroup.controllers").read_text()
    except OSError:
        offered = ""
    if "memory" in offered.split():
        return  # perhaps delegated here: setup() would move this process into a leaf
    said = _cgroup.setup()
    assert isinstance(said, str) and said
