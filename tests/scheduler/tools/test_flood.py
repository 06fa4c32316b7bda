"""The open-loop churn of `bench overload --connections --churn-rate`: connections
start on schedule, whether or not those before them have ended."""

from __future__ import annotations

import asyncio
import socket

from apollo11.scheduler.tools.bench import flood


async def test_an_open_loop_churn_keeps_its_rate_when_connects_stall() -> None:
    # A listener nobody accepts from, its queue full at once: every further connect
    # waits for SYNs the kernel drops. A closed loop would start 2 and wait.
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        port = server.getsockname()[1]
        started = await flood.churn_open(
            "127.0.0.1", port, "churn", source="127.0.7.1", rate=40, seconds=0.5
        )
    # 40 a second for half a second on schedule: 20 (fewer only if this process
    # stalled past CATCH_UP_S); a closed loop would have started 2 and waited
    assert 15 <= started <= 20, started


async def test_an_open_loop_churn_has_at_most_so_many_in_flight() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        port = server.getsockname()[1]
        # and the schedule's end ends it: the stalled connects themselves would wait
        # out the kernel's SYN retries (tcp_syn_retries 6: over two minutes)
        started = await asyncio.wait_for(
            flood.churn_open(
                "127.0.0.1", port, "churn", source="127.0.7.2", rate=1000, seconds=0.2,
                in_flight_max=4,
            ),
            timeout=60,
        )  # fmt: skip
    assert started < 20, "the stalled ones hold back the 200 the schedule has"
