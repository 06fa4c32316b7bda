"""Which tier a test is in, and the guard that keeps the fast tier fast.

`make check` runs the tests not marked `slow`; `make test` runs them all
(docs/test-tiers.md). A test is `slow` when it is marked so by hand (in process,
but over the fast tier's time), or when it is marked `etcd`, `cluster`,
`browser`, `docker` or `process`. `process` is applied here, at collection, from
what the test uses: its function and every fixture it requests are read
(bytecode, following the helpers in tests/ they call) for anything that starts a
program (subprocess, multiprocessing, os.fork, asyncio's subprocesses, a local
etcd, a browser). A new test on `start_node` or a new helper around
`subprocess.run` is in the full tier without anyone listing it.

What reading cannot see (a fixture fetched by name at run time, a process
started by a tool of the package) the guard sees: while a test of the fast tier
runs, a program started by the tests' own code, or a node, worker, CLI or etcd
started by anyone, fails it, saying how to mark it. The code under test may
start its own children (a shell step's guard, the merge pool): they take
milliseconds, and they are what an in-process test is about. With `--budget S`
(what `make check` passes) a fast-tier test whose setup, call and teardown take
longer than S seconds fails too. The budget is for `make check` alone: a time
limit is the one guard that load can trip, and the full run needs none.
"""

from __future__ import annotations

import asyncio
import builtins
import dis
import inspect
import multiprocessing
import multiprocessing.util
import os
import subprocess
import sys
import threading
import types
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from apollo11.lease.local_etcd import LocalEtcd
from apollo11.scheduler.testing.seaweed import LocalSeaweed

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"

# The marks that put a test in the full tier only (pyproject.toml declares them).
FULL_ONLY = ("slow", "process", "etcd", "cluster", "browser", "docker")

HOW_TO_MARK = (
    "mark it @pytest.mark.slow (or @pytest.mark.process): it then runs in `make test` "
    "only (tests/tiers.py, docs/test-tiers.md)"
)


def _starters() -> dict[int, str]:
    """What starts a program, by id: the names a reader sees in a test."""
    found: dict[int, str] = {}

    def add(owner: Any, *names: str) -> None:
        for name in names:
            obj = getattr(owner, name, None)
            if obj is not None:
                found[id(obj)] = f"{getattr(owner, '__name__', owner)}.{name}"

    add(subprocess, "Popen", "run", "call", "check_call", "check_output", "getoutput")
    add(subprocess, "getstatusoutput")
    add(asyncio, "create_subprocess_exec", "create_subprocess_shell")
    add(os, "fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "popen")
    add(os, "execv", "execve", "execvp", "execvpe", "spawnv", "spawnve", "spawnvp")
    add(multiprocessing, "Process", "Pool", "get_context")
    found[id(ProcessPoolExecutor)] = "ProcessPoolExecutor"
    found[id(LocalEtcd)] = "LocalEtcd (an etcd server)"
    found[id(LocalSeaweed)] = "LocalSeaweed (an S3 server)"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # no browser tests without it
        pass
    else:
        found[id(sync_playwright)] = "sync_playwright (a browser)"
    return found


_STARTERS = _starters()


def _ours(obj: Any) -> bool:
    """A function or class of the tests: read it too (the package's own are not:
    what it starts is the code under test's, or the guard's to see)."""
    module = getattr(obj, "__module__", None) or ""
    return module == "tests" or module.startswith("tests.")


def _codes(obj: Any) -> Iterator[tuple[types.CodeType, dict[str, Any]]]:
    """The code objects of a function, or of every method of a class, with their globals."""
    if isinstance(obj, type):
        for value in vars(obj).values():
            if isinstance(value, staticmethod | classmethod):
                value = value.__func__
            if isinstance(value, property):
                yield from (c for f in (value.fget, value.fset) if f for c in _codes(f))
            elif inspect.isfunction(value):
                yield from _codes(value)
        return
    fn = inspect.unwrap(obj)
    if inspect.isfunction(fn):
        yield fn.__code__, fn.__globals__


class Reader:
    """Reads code for what starts a program; remembers what it has read."""

    def __init__(self) -> None:
        self._seen: dict[int, str | None] = {}

    def starts(self, obj: Any) -> str | None:
        """Why `obj` (a test, a fixture, a helper) starts a program, or None."""
        key = id(obj)
        if key in self._seen:
            return self._seen[key]
        self._seen[key] = None  # a cycle of helpers reads as nothing new
        why = next((w for code, glb in _codes(obj) for w in [self._code(code, glb)] if w), None)
        self._seen[key] = why
        return why

    def _code(self, code: types.CodeType, glb: dict[str, Any]) -> str | None:
        for obj in _resolved(code, glb):
            if id(obj) in _STARTERS:
                return _STARTERS[id(obj)]
            if _ours(obj):
                why = self.starts(obj)
                if why:
                    return f"{getattr(obj, '__qualname__', obj)} -> {why}"
        for const in code.co_consts:
            if isinstance(const, types.CodeType):  # a nested function, lambda, comprehension
                why = self._code(const, glb)
                if why:
                    return why
        return None


def _resolved(code: types.CodeType, glb: dict[str, Any]) -> Iterator[Any]:
    """Every object the code names, as far as names and attributes resolve without
    running it: `subprocess.run`, `netns.Net`, `from tests.nodes import start_node`."""
    local: dict[str, Any] = {}
    module: Any = None
    top: Any = None  # what the last instruction left on the stack, if known
    fromlist: Any = None
    for ins in dis.get_instructions(code):
        op, arg = ins.opname, ins.argval
        if op == "LOAD_CONST":
            fromlist = arg  # an import's: `import a.b` binds a, `from a.b import c` a.b
            top = None
            continue
        if op in ("LOAD_GLOBAL", "LOAD_NAME"):
            top = glb.get(arg, getattr(builtins, arg, None))
        elif op in ("LOAD_FAST", "LOAD_DEREF", "LOAD_CLOSURE"):
            top = local.get(arg)
        elif op in ("LOAD_ATTR", "LOAD_METHOD") and top is not None:
            top = getattr(top, arg, None)
        elif op == "IMPORT_NAME":
            module = _import(arg)
            top = module if fromlist else _import(arg.partition(".")[0])
        elif op == "IMPORT_FROM" and module is not None:
            top = getattr(module, arg, None) or _import(f"{module.__name__}.{arg}")
        elif op in ("STORE_FAST", "STORE_DEREF", "STORE_NAME"):
            local[arg] = top
            top = None
            continue
        else:
            top = None
            continue
        if top is not None:
            yield top


def _import(name: str) -> Any:
    try:
        __import__(name)
    except Exception:  # what the test would have failed on: not ours to report
        return None
    return sys.modules.get(name)


# ------------------------------------------------------------------ the guard

_running: dict[str, pytest.Item | None] = {"item": None}
_lock = threading.Lock()
_BREACHES = pytest.StashKey[list[str]]()  # what a test started, not yet reported
_TOOK = pytest.StashKey[float]()  # its phases' time so far
_FAILED = pytest.StashKey[bool]()  # a phase of it failed
_WAITED0 = pytest.StashKey[float]()  # the thread's wait for a core when the test began


def _waited_for_a_core() -> float:
    """Seconds this thread has been ready to run but waited for a core
    (schedstat's second field, in ns); 0 where the kernel does not say."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def fast(item: pytest.Item) -> bool:
    return not any(item.get_closest_marker(m) for m in FULL_ONLY)


def _started_by_a_test() -> str | None:
    """Where a test's code started the program, or None if the package's code did.
    Out from the call, past Python's own libraries (the stdlib, the venv's packages),
    the first frame decides: the package's (this checkout, outside tests/) starts a
    child of its own; any other code (tests/, a suite a test wrote) is a test's."""
    libraries = (Path(sys.prefix), Path(sys.base_prefix))
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        path = Path(frame.f_code.co_filename)
        skip = path == Path(__file__) or not path.is_absolute()  # `<frozen ...>`, `<string>`
        if not skip and not any(path.is_relative_to(lib) for lib in libraries):
            if path.is_relative_to(ROOT) and not path.is_relative_to(TESTS):
                return None
            shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            return f"{shown}:{frame.f_lineno}"
        frame = frame.f_back
    return None


_SERVERS = ("etcd", "etcdctl", "apollo11", "chromium")


def _a_server(argv: list[str]) -> bool:
    """A node, worker or CLI of the package, or etcd, whoever starts it."""
    return Path(argv[0]).name in _SERVERS or any(a.startswith("apollo11.") for a in argv[1:3])


def _breach(what: str, argv: list[str]) -> None:
    item = _running["item"]
    if item is None or not fast(item):
        return
    by = _started_by_a_test()
    if by is None and not _a_server(argv):
        return  # the code under test's own child
    shown = " ".join(argv)[:120]
    with _lock:
        item.stash.setdefault(_BREACHES, []).append(
            f"{what} started `{shown}`" + (f" at {by}" if by else "")
        )


def _wrap(owner: Any, name: str, what: str, argv_of: Callable[..., list[str]]) -> None:
    original = getattr(owner, name)

    def guarded(*args: Any, **kwargs: Any) -> Any:
        _breach(what, argv_of(*args, **kwargs))
        return original(*args, **kwargs)

    guarded.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(owner, name, guarded)


def _popen_argv(_self: Any, args: Any, *rest: Any, **kw: Any) -> list[str]:
    return [str(a) for a in args] if isinstance(args, list | tuple) else [str(args)]


def install() -> None:
    """Watch every way a test process starts a child (once, at configure)."""
    # Popen covers subprocess.run and asyncio's subprocesses; spawnv_passfds is how
    # multiprocessing's spawn and forkserver contexts start an interpreter.
    _wrap(subprocess.Popen, "_execute_child", "a subprocess", _popen_argv)
    _wrap(
        multiprocessing.util,
        "spawnv_passfds",
        "multiprocessing",
        lambda path, args, passfds: [str(a) for a in args],
    )


class Tiers:
    """The pytest plugin: marks at collection, guards while each test runs."""

    def __init__(self, budget_s: float | None) -> None:
        self.budget_s = budget_s
        self.reader = Reader()

    # first: `-m "not slow"` deselects in this same hook, from the marks made here
    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            why = self._starts(item)
            if why:
                item.add_marker(pytest.mark.process(why))
            if not fast(item) and not item.get_closest_marker("slow"):
                item.add_marker(pytest.mark.slow)

    def _starts(self, item: pytest.Item) -> str | None:
        fixtures = getattr(item, "_fixtureinfo", None)
        uses: list[tuple[str, Any]] = [("the test", getattr(item, "function", None))]
        if fixtures is not None:
            for name, defs in fixtures.name2fixturedefs.items():
                uses += [(f"fixture {name!r}", d.func) for d in defs if _ours(d.func)]
        for who, obj in uses:
            why = obj is not None and self.reader.starts(obj)
            if why:
                return f"{who}: {why}"
        return None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Any:
        _running["item"] = item
        item.stash[_WAITED0] = _waited_for_a_core()
        try:
            return (yield)
        finally:
            _running["item"] = None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report: pytest.TestReport = yield
        if not fast(item):
            return report
        took = item.stash[_TOOK] = item.stash.get(_TOOK, 0.0) + report.duration
        breaches = item.stash.get(_BREACHES, [])
        if breaches and not report.failed:
            item.stash[_BREACHES] = []
            report.outcome = "failed"
            report.longrepr = (
                "a test of the fast tier (`make check`) starts processes: "
                + "; ".join(breaches)
                + f"; {HOW_TO_MARK}"
            )
        if report.failed:
            item.stash[_FAILED] = True
        if report.when != "teardown" or self.budget_s is None:
            return report
        # The budget is the test's own time: what its thread spent ready to run but
        # waiting for a core is the machine's (a 2-core machine with other work on it
        # took CPU-bound tests of 2-3 s to 6-8 s), and is left out.
        waited = max(0.0, _waited_for_a_core() - item.stash.get(_WAITED0, 0.0))
        if took - waited > self.budget_s and not item.stash.get(_FAILED, False):
            # one failure a test is enough: a test that failed may well have been slow
            report.outcome = "failed"
            report.longrepr = (
                f"a test of the fast tier (`make check`) took {took:.1f} s ({waited:.1f} s "
                f"of it waiting for a core), over its {self.budget_s:g} s budget (--budget): "
                f"make it wait on a condition, or {HOW_TO_MARK}"
            )
        return report
