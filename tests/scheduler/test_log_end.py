"""Issue 15, item 3: a log shorter than it was is refused, by the node and by `replay`.

(a) The newest segment deleted after a clean stop: the node started silently on
the shorter log, SUCCEEDED tasks went back to RUNNING and their steps ran again.
(b) A tail cut after a clean shutdown was logged as "never acknowledged".
(c) `apollo11 replay` showed a traceback on damage.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from apollo11.scheduler.cli import app
from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.errors import CorruptLogError
from apollo11.scheduler.node import Node
from apollo11.scheduler.state import TaskStatus
from apollo11.scheduler.workflow import Idempotent, Registry, StepContext, Workflow

runner = CliRunner()


def _registry(ran: list[str]) -> Registry:
    wf = Workflow("pair")

    @wf.step(idempotency=Idempotent())
    async def first(ctx: StepContext) -> None:
        ran.append(f"{ctx.task_id}/first")

    @wf.step(after=["first"], idempotency=Idempotent())
    async def second(ctx: StepContext) -> None:
        ran.append(f"{ctx.task_id}/second")

    reg = Registry()
    reg.register(wf)
    return reg


def _settings(root: Path) -> NodeSettings:
    return NodeSettings(
        node_id="n1",
        data_dir=root,
        listen="127.0.0.1:0",
        segment_max_bytes=16 * 1024,  # many segments, so the newest holds finished tasks
        snapshot_interval=40,
    )


async def _finished_node(root: Path, ran: list[str], n: int) -> None:
    node = Node(_settings(root), registry=_registry(ran))
    await node.start()
    assert node.engine is not None
    ids = [(await node.engine.submit("pair", idempotency_key=f"k{i}")).task_id for i in range(n)]
    for task_id in ids:
        await node.engine.wait(task_id)
    await node.stop()  # a clean stop: the manifest holds the exact end


def _segments(root: Path) -> list[Path]:
    return sorted((root / "log").glob("*.seg"))


async def test_a_deleted_newest_segment_is_refused_by_the_node_and_by_replay(
    tmp_path: Path,
) -> None:
    root = tmp_path / "d"
    ran: list[str] = []
    await _finished_node(root, ran, 60)
    segs = _segments(root)
    assert len(segs) >= 2
    newest = segs[-1]
    newest.unlink()
    newest.with_suffix(".idx").unlink(missing_ok=True)
    before = sorted(p.name for p in (root / "log").iterdir())

    ran_before = list(ran)
    node = Node(_settings(root), registry=_registry(ran))
    with pytest.raises(CorruptLogError) as exc:
        await node.start()
    msg = str(exc.value)
    assert exc.value.path == str(newest), "names the missing file"
    assert f"found {newest.name} is missing" in msg
    assert "were durable at the last manifest" in msg and "at a clean shutdown" in msg
    assert "Expected the log to end at offset" in msg and "the log now ends at event" in msg
    assert ran == ran_before, "no step ran again"
    assert sorted(p.name for p in (root / "log").iterdir()) == before, "nothing created or cut"

    res = runner.invoke(app, ["replay", "--data-dir", str(root)])
    assert res.exit_code == 2
    assert "Traceback" not in res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: events "), res.stderr
    assert newest.name in lines[0] and "the log now ends at event" in lines[0]


async def test_a_tail_cut_after_a_clean_shutdown_is_refused_as_durable(tmp_path: Path) -> None:
    root = tmp_path / "d"
    ran: list[str] = []
    await _finished_node(root, ran, 30)
    tail = _segments(root)[-1]
    size = tail.stat().st_size
    with open(tail, "r+b") as f:
        f.truncate(size - 10)
    node = Node(_settings(root), registry=_registry(ran))
    with pytest.raises(CorruptLogError) as exc:
        await node.start()
    msg = str(exc.value)
    assert "were durable at the last manifest" in msg, "known durable, not 'never acknowledged'"
    assert f"{tail.name} holds {size - 10} bytes of the {size} it had" in msg
    assert tail.stat().st_size == size - 10, "nothing was cut"


async def test_the_node_starts_again_once_the_segment_is_back(tmp_path: Path) -> None:
    root = tmp_path / "d"
    ran: list[str] = []
    await _finished_node(root, ran, 30)
    newest = _segments(root)[-1]
    saved = newest.read_bytes()
    newest.unlink()
    with pytest.raises(CorruptLogError):
        await Node(_settings(root), registry=_registry(ran)).start()
    newest.write_bytes(saved)  # restored from a peer or a backup
    ran_before = list(ran)
    node = Node(_settings(root), registry=_registry(ran))
    await node.start()
    try:
        assert node.store is not None
        statuses = {t.status for t in node.store.state.iter_tasks()}
        assert statuses == {TaskStatus.SUCCEEDED}
    finally:
        await node.stop()
    assert ran == ran_before
