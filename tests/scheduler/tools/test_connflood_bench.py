"""How `bench overload --connections` shares the machine between its flood and its
legitimate client."""

from __future__ import annotations

import os
import socket
import time

import pytest

from apollo11.scheduler.tools.bench import connflood_bench, flood


def _scheduling() -> tuple[int, int]:
    return os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)


def test_a_flood_leaves_the_scheduling_of_the_process_that_ran_it_alone() -> None:
    # The flood runs at nice 10, under SCHED_IDLE with --flood-idle. Run in the
    # bench's process pool, it left both on the pool's process, and the client the
    # pool ran there next went on under SCHED_IDLE: the client, not the flood, was
    # the one that got only the CPU time nobody else wanted.
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        before = _scheduling()
        tried, _ = connflood_bench._flood(server.getsockname()[1], "churn", 0.3, 400.0, True)
        after = _scheduling()
    assert tried > 0, "the flood offered connections"
    assert after == before


def test_schedstat_counts_the_time_a_process_ran() -> None:
    ran, waited = flood.schedstat(os.getpid())
    t = time.process_time()
    while time.process_time() - t < 0.05:  # on a core for 50 ms of CPU
        pass
    ran_after, waited_after = flood.schedstat(os.getpid())
    assert ran_after >= ran + 0.04
    assert waited_after >= waited
    assert flood.schedstat(2**22 + 1) == (0.0, 0.0), "a pid that is not there"


def test_a_flood_on_a_cpu_of_its_own_leaves_this_process_on_all_of_its_own() -> None:
    before = os.sched_getaffinity(0)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        cpu = min(before)
        tried, _ = connflood_bench._flood(server.getsockname()[1], "churn", 0.3, 400.0, cpu=cpu)
    assert tried > 0, "the flood offered connections"
    assert os.sched_getaffinity(0) == before


def test_a_flood_cpu_the_process_cannot_use_is_refused_naming_the_flag() -> None:
    before = os.sched_getaffinity(0)
    with pytest.raises(ValueError, match="--flood-cpu 4096"):
        connflood_bench.run(True, None, print, flood_cpu=4096)
    if len(before) == 1:  # the only CPU: nothing left for the node
        with pytest.raises(ValueError, match="not the only one"):
            connflood_bench.run(True, None, print, flood_cpu=min(before))
    assert os.sched_getaffinity(0) == before
