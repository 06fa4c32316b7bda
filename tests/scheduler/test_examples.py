"""The bundled `etl` workflow writes its `ledger` only inside one directory."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from apollo11.scheduler import examples
from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.log import EventType, FsyncPolicy
from apollo11.scheduler.node import Node
from apollo11.scheduler.state import TaskStatus
from apollo11.scheduler.workflow import StepContext, StepError
from tests.scheduler.test_engine import make_rig


@pytest.fixture
def allowed(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "allowed"
    d.mkdir()
    (tmp_path / "outside").mkdir()
    examples.configure(d)
    yield d
    examples.configure(None)


def _ctx(ledger: object) -> StepContext:
    return StepContext(
        task_id="t1",
        step="collect",
        attempt=1,
        input={"step_seconds": 0, "ledger": ledger},
        results={},
        node_id="n1",
        workflow="etl",
        version=1,
    )


@pytest.mark.parametrize(
    "ledger",
    ["../outside/ledger", "{tmp}/outside/ledger", "link/ledger", "/etc/apollo11-pwned", ".", 7],
)
async def test_a_ledger_outside_the_directory_fails_the_step_and_writes_nothing(
    allowed: Path, tmp_path: Path, ledger: object
) -> None:
    (allowed / "link").symlink_to(tmp_path / "outside")
    if isinstance(ledger, str):
        ledger = ledger.format(tmp=tmp_path)
    with pytest.raises(StepError) as exc:
        await examples.collect(_ctx(ledger))
    assert exc.value.details == {"final": True}, "no point retrying the same input"
    if ledger != 7:
        assert f"outside the allowed directory {os.path.realpath(allowed)}" in str(exc.value)
        assert repr(ledger) in str(exc.value)
    assert list((tmp_path / "outside").iterdir()) == []
    assert not Path("/etc/apollo11-pwned").exists()


async def test_a_ledger_inside_is_written(allowed: Path) -> None:
    await examples.collect(_ctx("runs/../ledger"))
    await examples.collect(_ctx(str(allowed / "ledger")))
    assert (allowed / "ledger").read_text() == "t1 collect 1 n1 0:0 n1\n" * 2


def test_the_default_directory_is_the_system_temporary_one(tmp_path: Path) -> None:
    examples.configure(None)
    assert examples.allowed_dir() == os.path.realpath(tempfile.gettempdir())
    assert examples.ledger_path(str(tmp_path / "l")) == os.path.realpath(tmp_path / "l")


async def test_the_engine_records_the_refusal_as_a_final_failure(
    allowed: Path, tmp_path: Path
) -> None:
    rig = await make_rig(tmp_path / "data", FakeClock(), examples.etl)
    try:
        sub = await rig.engine.submit("etl", {"step_seconds": 0, "ledger": "../outside/x"})
        async with asyncio.timeout(20):
            await rig.engine.wait(sub.task_id)
        task = rig.store.state.peek(sub.task_id)
        assert task is not None and task.status is TaskStatus.FAILED
        failed = [e for e in rig.store.log.read() if e.event_type is EventType.STEP_FAILED]
        assert len(failed) == 1 and failed[0].payload["final"] is True
        assert "outside the allowed directory" in failed[0].payload["error"]
    finally:
        await rig.engine.stop()
        await rig.store.close()
    assert not (tmp_path / "outside" / "x").exists()


async def test_the_node_hands_its_examples_dir_setting_to_the_module(tmp_path: Path) -> None:
    d = tmp_path / "ledgers"
    d.mkdir()
    node = Node(
        NodeSettings(
            node_id="n1",
            data_dir=tmp_path / "data",
            listen="127.0.0.1:0",
            workflows=["apollo11.scheduler.examples"],
            fsync=FsyncPolicy.UNSAFE_NEVER,
            examples_dir=d,
        )
    )
    await node.start()
    try:
        assert examples.allowed_dir() == os.path.realpath(d)
        assert node.engine is not None
        sub = await node.engine.submit("etl", {"step_seconds": 0, "ledger": "l"})
        async with asyncio.timeout(20):
            await node.engine.wait(sub.task_id)
        assert len((d / "l").read_text().splitlines()) == 5
    finally:
        await node.stop()
        examples.configure(None)


def test_a_ledger_cannot_write_into_a_data_directory(tmp_path: Path) -> None:
    """Red-team finding: with the default directory (the system's temporary one), a
    submitter appended ledger lines to a node's own segment; it refused to start."""
    from apollo11.scheduler import examples

    data = tmp_path / "node-data"
    (data / "log").mkdir(parents=True)
    segment = data / "log" / "00000000000000000001.seg"
    segment.write_bytes(b"records")
    examples.configure(tmp_path)
    try:
        for target in (segment, data / "log" / "new", data / "elsewhere"):
            with pytest.raises(StepError, match="inside the Apollo-11 data directory"):
                examples.ledger_path(str(target))
        assert segment.read_bytes() == b"records"
        assert examples.ledger_path(str(tmp_path / "ledger")) == str(tmp_path / "ledger")
    finally:
        examples.configure(None)
