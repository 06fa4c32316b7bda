"""A node does its gRPC socket I/O on gRPC's poller thread, not on EventEngine
threads that hand each message over (see scheduler/cli/_grpcenv.py)."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.nodes import start_node

CALLS = 300


def _event_engine_switches(pid: int) -> int:
    """Voluntary context switches of the process's EventEngine threads so far."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "comm").read_text().strip() != "event_engine":
                continue
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
        except FileNotFoundError:
            continue  # the thread ended
    return total


def _switches_per_call(tmp_path: Path, env: dict[str, str] | None) -> float:
    """EventEngine switches per unary call, less those of as long a time idle
    (its threads also wake on timers)."""
    node = start_node(tmp_path / "data", env=env)
    pid = node.proc.pid
    try:
        with grpc.insecure_channel(node.address) as channel:
            check = health_pb2_grpc.HealthStub(channel).Check
            check(health_pb2.HealthCheckRequest(), timeout=10)  # connected
            before, t0 = _event_engine_switches(pid), time.monotonic()
            for _ in range(CALLS):
                check(health_pb2.HealthCheckRequest(), timeout=10)
            busy, took = _event_engine_switches(pid) - before, time.monotonic() - t0
            before = _event_engine_switches(pid)
            time.sleep(took)
            idle = _event_engine_switches(pid) - before
            return (busy - idle) / CALLS
    finally:
        assert node.stop() == 0


def test_a_node_reads_and_writes_sockets_on_the_poller_thread(tmp_path: Path) -> None:
    # EventEngine's threads have ~3-6 switches per unary call when they do the I/O,
    # ~0.03 when not; the idle interval subtracted is another interval than the
    # busy one, so a loaded machine adds ~0.5 of noise either way (0.51 seen in CI)
    assert _switches_per_call(tmp_path, None) < 1.0


def test_an_operators_own_grpc_experiments_win(tmp_path: Path) -> None:
    # set, even empty: gRPC's own defaults, EventEngine doing the I/O
    assert _switches_per_call(tmp_path, {"GRPC_EXPERIMENTS": ""}) > 2
