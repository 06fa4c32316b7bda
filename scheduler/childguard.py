"""A step's child processes die with their node (and with their attempt).

A command a step starts does not notice when its node is killed with SIGKILL:
it is reparented to PID 1 and runs on, while the new primary declares the
attempt lost, compensates it and runs the next one beside it (issue 15).
PR_SET_PDEATHSIG is no answer: it fires when the parent *thread* ends, and it
reaches the direct child only.

So every command runs under a guard, this file run as a script (stdlib only,
`python -I -S`, ~20 ms):

    python -I -S guard.py NODE_PID -- ARGV...

The guard opens a pidfd on the node, checks that the node is still its parent
(else the node died before the command began, and nothing begins), makes
itself a child subreaper (PR_SET_CHILD_SUBREAPER, so descendants that double
fork or setsid out of the process group stay in its tree), starts ARGV and
waits for whichever ends first:

* the command: the guard kills what it left behind (a step's processes never
  outlive its attempt) and exits with its status (killed by signal N: by N);
* the node: it kills the command's whole tree at once, and exits;
* SIGTERM (the node's timeout or cancel): the same.

Started with `start_new_session=True`, the guard leads a process group the
command shares, so `os.killpg(guard.pid, SIGKILL)` still reaches every process
that stayed in the group if the guard itself cannot act.

What remains: a guard killed with SIGKILL by someone else leaves its command
running; a node that is paused (SIGSTOP) is alive, and its commands run on
until it resumes and fences itself (the fencing token covers that window).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from asyncio.subprocess import Process

GUARD_PATH = os.path.abspath(__file__)
POLL_S = 0.5  # the fallback's period, where pidfds are missing
PR_SET_CHILD_SUBREAPER = 36
NODE_GONE_EXIT = 137  # as if SIGKILLed: the node died before the command could begin


def guarded(argv: Sequence[str], node_pid: int | None = None) -> list[str]:
    """The argv that runs `argv` under a guard watching `node_pid` (this process).

    Start it with `start_new_session=True`; on a timeout or cancel send the guard
    SIGTERM (`stop`), not the command."""
    pid = os.getpid() if node_pid is None else node_pid
    return [sys.executable, "-I", "-S", GUARD_PATH, str(pid), "--", *argv]


async def stop(proc: Process, grace_s: float = 2.0) -> None:
    """End a guarded asyncio subprocess and everything it started: SIGTERM to the guard
    (it kills the command's tree), then SIGKILL to the whole group if it lingers."""
    import asyncio  # not at the top: the guard script starts without it

    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    try:
        async with asyncio.timeout(grace_s):
            await proc.wait()
    except TimeoutError:
        pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    await proc.wait()


def make_subreaper() -> bool:
    """Orphaned descendants of this process are reparented to it, not to PID 1
    (Linux only; False where it cannot be had)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def reap_orphans(zombies_since: dict[int, float], now: float, grace_s: float = 30.0) -> int:
    """For a subreaper: reap children that have been zombies for `grace_s`.

    Orphans a step left behind are adopted and, once they end, nobody else waits
    for them. A child this process started is waited for by its owner as it ends
    (asyncio, subprocess.run); one left unwaited for `grace_s` after its end is
    reaped here, and its owner's late wait() then reads exit status 0.
    `zombies_since` (pid -> when first seen ended) is kept by the caller.
    """
    try:  # one cheap system call in the common case: no child has ended
        peek = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        peek = None
    if peek is None:
        zombies_since.clear()
        return 0
    ended = {pid for pid in _children_map().get(os.getpid(), ()) if _zombie(pid)}
    for pid in list(zombies_since):
        if pid not in ended:
            del zombies_since[pid]
    n = 0
    for pid in ended:
        first = zombies_since.setdefault(pid, now)
        if now - first >= grace_s:
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0]:
                    n += 1
            zombies_since.pop(pid, None)
    return n


def kill_descendants(keep: set[int] | frozenset[int] = frozenset()) -> int:
    """SIGKILL every descendant of this process but `keep` (and theirs): what is left
    when a node stops, its steps drained or abandoned to the next leader."""
    tree = _children_map()
    stack = [p for p in tree.get(os.getpid(), ()) if p not in keep]
    n = 0
    while stack:
        pid = stack.pop()
        stack.extend(tree.get(pid, ()))
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            n += 1
    return n


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] == b"Z"


# ------------------------------------------------------------ the guard itself


def _children_map() -> dict[int, list[int]]:
    """ppid -> pids, from /proc (no CONFIG_PROC_CHILDREN needed)."""
    out: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses
        fields = stat[stat.rfind(b")") + 2 :].split()
        out.setdefault(int(fields[1]), []).append(int(name))
    return out


def _descendants(root: int) -> list[int]:
    tree = _children_map()
    found: list[int] = []
    stack = list(tree.get(root, ()))
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(tree.get(pid, ()))
    return found


def _reap() -> dict[int, int]:
    """Reap every ended child (orphans adopted as subreaper too): pid -> wait status."""
    ended: dict[int, int] = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        ended[pid] = status


def _kill_tree(within_s: float = 10.0) -> None:
    """SIGKILL every descendant (of the group or not) until none is left. Stopped
    first, so that none forks a child this pass does not see; orphans of the killed
    are reparented here (a subreaper) and reaped."""
    me = os.getpid()
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        _reap()
        pids = _descendants(me)
        if not pids:
            return
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
        time.sleep(0.005)


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None


def _exit_as(status: int) -> None:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def main(args: Sequence[str]) -> None:
    if len(args) < 3 or args[1] != "--" or not args[0].isdigit():
        sys.stderr.write("usage: guard.py NODE_PID -- ARGV...\n")
        os._exit(2)
    node_pid, argv = int(args[0]), list(args[2:])
    node_fd = _pidfd(node_pid)
    # After the pidfd: if the node is already gone we have been reparented, and the
    # pidfd (if any) may name another process that took its pid.
    if os.getppid() != node_pid:
        os._exit(NODE_GONE_EXIT)
    make_subreaper()
    stopping = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    # Signals wake the poll through this pipe (a handler alone would not: poll is
    # retried after it runs). SIGCHLD too: adopted orphans are reaped as they end.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_term)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    child = os.fork()
    if child == 0:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        os.close(wake_r)
        os.close(wake_w)
        if node_fd is not None:
            os.close(node_fd)
        try:
            os.execvp(argv[0], argv)
        except OSError as e:
            sys.stderr.write(f"guard: cannot run {argv[0]}: {e}\n")
        os._exit(127)
    poller = select.poll()
    poller.register(wake_r, select.POLLIN)
    if node_fd is not None:
        poller.register(node_fd, select.POLLIN)
    timeout_ms = None if node_fd is not None else POLL_S * 1000
    node_gone = False
    while True:
        if stopping or node_gone or os.getppid() != node_pid:
            _kill_tree()
            os._exit(NODE_GONE_EXIT)
        ended = _reap()
        if child in ended:
            _kill_tree()  # what the command left running does not outlive it
            _exit_as(ended[child])
        node_gone = any(fd == node_fd for fd, _ in poller.poll(timeout_ms))
        with contextlib.suppress(BlockingIOError):
            while os.read(wake_r, 512):
                pass


if __name__ == "__main__":
    main(sys.argv[1:])
