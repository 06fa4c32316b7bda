"""The in-process harness that counts what a remote step costs the node: every task
succeeds both ways, and the remote run crosses the wire (its workers answer)."""

from __future__ import annotations

import pytest

from apollo11.scheduler.tools.bench import remote_cost


@pytest.mark.parametrize("remote", [False, True])
def test_every_task_succeeds(remote: bool) -> None:
    r = remote_cost.measure(remote, tasks=300, workers=2, slots=16)
    assert r["execution"] == ("remote" if remote else "embedded")
    assert r["tasks_succeeded"] == 300
    assert r["steps"] == 300 * remote_cost.STEPS
    assert r["cpu_us_per_step"] > 0


def test_cli_prints_one_json_line(capsys: pytest.CaptureFixture[str]) -> None:
    remote_cost.main(["remote", "20", "--workers", "1", "--slots", "4"])
    out = capsys.readouterr().out.strip()
    assert out.startswith("{") and '"tasks_succeeded": 20' in out
