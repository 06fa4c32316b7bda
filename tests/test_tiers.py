"""The fast tier's marks and guard (tests/tiers.py), on a small suite of its own."""

from __future__ import annotations

import os

import pytest

from tests import tiers
from tests.nodes import start_node

pytest_plugins = ["pytester"]


def _uses_a_node() -> None:
    start_node  # noqa: B018 -- only named: reading is not running


def _names_only_an_exception() -> type[Exception]:
    import subprocess

    return subprocess.TimeoutExpired


def test_what_a_test_uses_is_read_through_the_helpers_of_the_tests() -> None:
    reader = tiers.Reader()
    # by name: a test naming a helper that starts a program would be `process` itself
    why = reader.starts(globals()["_uses_a_node"])
    assert why is not None and "start_node" in why and "subprocess.Popen" in why, why
    assert reader.starts(_names_only_an_exception) is None


HELPER = """
import subprocess


def hidden():  # another module's: only the tests' own package is read, the guard sees it
    subprocess.run(["true"], check=True)
"""

SUITE = """
import subprocess
import time

import os

import pytest

import helper


def test_pure():
    assert 1 + 1 == 2


def test_starts_a_program():
    subprocess.run(["true"], check=True)


def test_starts_a_program_unseen():
    helper.hidden()


def test_dawdles():
    time.sleep(1.5)


@pytest.mark.slow
def test_dawdles_but_is_marked():
    time.sleep(1.5)
"""

CONFTEST = """
from tests import tiers


def pytest_configure(config):
    config.pluginmanager.register(tiers.Tiers(budget_s=1.0), "tiers")
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(helper=HELPER, test_suite=SUITE)
    pytester.makeconftest(CONFTEST)  # the guard itself is installed once, by ours
    return pytester


def _run(suite: pytest.Pytester, *args: str) -> pytest.RunResult:
    running = tiers._running["item"]
    try:
        return suite.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:asyncio", *args)
    finally:
        tiers._running["item"] = running  # the inner run's items ended; this one goes on


def test_the_fast_tier_leaves_out_what_starts_a_program_and_fails_what_it_missed(
    suite: pytest.Pytester,
) -> None:
    result = _run(suite, "-m", "not slow", "-rA")
    result.assert_outcomes(passed=2, failed=1, errors=1, deselected=2)
    out = result.stdout.str()
    assert "PASSED test_suite.py::test_pure" in out
    assert "FAILED test_suite.py::test_starts_a_program_unseen" in out
    assert "starts processes: a subprocess started `true` at " in out
    assert "helper.py:" in out, "where: in the helper"
    assert "ERROR test_suite.py::test_dawdles" in out
    assert "over its 1 s budget" in out


def test_the_full_run_has_every_test_and_no_budget_for_the_marked(
    suite: pytest.Pytester,
) -> None:
    result = _run(suite, "-m", "slow", "-rA")
    result.assert_outcomes(passed=2, deselected=3)
    out = result.stdout.str()
    assert "PASSED test_suite.py::test_starts_a_program" in out
    assert "PASSED test_suite.py::test_dawdles_but_is_marked" in out


SPINS = """
import os
import time


def test_spins_on_a_busy_core():
    cpu = int(os.environ["SPIN_CPU"])
    was = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})  # this thread only, beside the outer test's hog
    try:
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.7:
            pass
    finally:
        os.sched_setaffinity(0, was)
"""


def test_the_budget_leaves_out_the_time_spent_waiting_for_a_core(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0.7 s of the test's own CPU on a core a hog shares: about twice that by the
    clock, over the 1 s budget, yet the test's own time is under it (make check on a
    loaded machine failed tests of 2-3 s of CPU at 6-8 s)."""
    import subprocess
    import sys

    cpu = min(os.sched_getaffinity(0))
    monkeypatch.setenv("SPIN_CPU", str(cpu))
    pytester.makepyfile(test_spins=SPINS)
    pytester.makeconftest(CONFTEST)
    hog = subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", "while True: pass"])
    try:
        result = _run(pytester, "-rA", "--durations=0")
    finally:
        hog.kill()
        hog.wait()
    result.assert_outcomes(passed=1)
    took = [x for x in result.stdout.lines if "test_spins_on_a_busy_core" in x and "call" in x]
    assert took and float(took[0].split("s")[0]) > 1.0, (
        "the hog did not share the core: the test proves nothing",
        result.stdout.lines,
    )
