"""A worker speaks only for its own attempts: a real node in this process, and
workers that speak the protocol by hand (rawworker.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from apollo11.scheduler.log import EventType

from .rawworker import RawWorker, running


async def test_heartbeat_details_count_only_from_the_worker_the_attempt_was_given_to(
    start: Any,
) -> None:
    """An attempt token is no secret: a heartbeat naming another worker's attempt must
    not become the details its retry is given (and the STEP_FAILED records)."""
    node = await start()
    address = f"127.0.0.1:{node.port}"
    w1 = RawWorker(address, name="w1", slots=1)
    await w1.connect()
    assert node.engine is not None
    task_id = (await node.engine.submit("pair", None)).task_id
    a = (await w1.next("assign")).assignments[0]
    await w1.heartbeat(running(a, {"rows": 500}))
    await asyncio.sleep(0.2)
    other = RawWorker(address, name="w2")
    await other.connect(workflows=())
    await other.heartbeat(running(a, {"rows": 0, "forged": True}))
    await asyncio.sleep(0.2)
    await w1.close()  # its stream breaks: the attempt is lost and runs again
    w3 = RawWorker(address, name="w3")
    await w3.connect()
    b = (await w3.next("assign")).assignments[0]
    assert b.attempt == 2
    assert b.last_heartbeat_json == b'{"rows":500}'
    assert node.store is not None
    [failed] = [
        e
        for e in node.store.log.read()
        if e.task_id == task_id and e.event_type is EventType.STEP_FAILED
    ]
    assert failed.payload["heartbeat"] == {"rows": 500}
    await other.close()
    await w3.close()
