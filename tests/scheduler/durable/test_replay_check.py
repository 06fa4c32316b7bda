"""`apollo11 replay-check`: the recorded durable runs of a log replayed against the
code about to be deployed (scheduler/durable/_check.py), on the golden history."""

from __future__ import annotations

import json
from pathlib import Path

from apollo11.scheduler.durable import check_all
from apollo11.scheduler.store import state_at
from apollo11.scheduler.workflow import Registry
from tests.nodes import cli

GOLDEN = Path(__file__).parent.parent.parent / "golden" / "durable"
CHANGED = "tests.scheduler.durable.changed_flows"


def _runs(module: str) -> dict[str, object]:
    registry = Registry()
    registry.load_module(module)
    state = state_at(GOLDEN)
    runs, skipped = check_all(state.iter_tasks(), registry, state.first_event)
    assert not skipped
    return {r.task_id: r for r in runs}


def test_a_history_of_the_same_code_replays() -> None:
    # p1 was recorded by the approval example; the golden p2-p4 are hand-made
    # histories of other shapes (tests/golden/make_golden.py)
    runs = _runs("apollo11.scheduler.examples")
    assert runs["p1"].outcome == "ok"  # type: ignore[attr-defined]
    assert {t for t, r in runs.items() if r.outcome != "ok"} == {"p2", "p3", "p4"}  # type: ignore[attr-defined]


def test_a_moved_step_is_named_with_its_position() -> None:
    p1 = _runs(CHANGED)["p1"]
    assert p1.outcome == "breaks"  # type: ignore[attr-defined]
    report = p1.report  # type: ignore[attr-defined]
    assert report["seq"] == 1
    assert (report["expected"]["kind"], report["expected"]["name"]) == ("event", "approval:p1")
    assert report["got"]["kind"] == "sleep"


def test_the_command_is_a_deploy_gate() -> None:
    res = cli("replay-check", "--data-dir", str(GOLDEN), "--workflows", CHANGED, "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    got = json.loads(res.stdout)
    assert got["runs"] == 4
    p1 = next(b for b in got["breaking"] if b["task_id"] == "p1")
    assert p1["detail"].startswith("non-determinism at checkpoint 1: the log holds event")
    plain = cli("replay-check", "--data-dir", str(GOLDEN), "--workflows", CHANGED)
    assert ["approval", "1", "4", "4"] in [line.split() for line in plain.stdout.splitlines()]
    assert any(line.startswith("p1 (approval v1): non-determinism at checkpoint 1")
               for line in plain.stdout.splitlines()), plain.stdout  # fmt: skip
    missing = cli("replay-check", "--data-dir", str(GOLDEN), "--workflows", "nope.flows")
    assert (
        missing.returncode == 2 and "cannot import workflow module 'nope.flows'" in missing.stderr
    )
