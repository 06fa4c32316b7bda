"""`apollo11 worker`: its flags' errors, and the process against a fake primary."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from apollo11.scheduler.cli import app
from tests.scheduler.worker.fake import WAIT_S, FakePrimary, assignment, serving

ROOT = Path(__file__).resolve().parents[3]
FLOWS = "tests.scheduler.worker.flows"
runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--slots", "0"], "--slots must be at least 1"),
        (["--labels", "zone"], "--labels: 'zone' is not KEY=VALUE"),
        (["--labels", "a=1,a=2"], "--labels: 'a' is given twice"),
        (["--isolation", "vm"], "--isolation must be thread or process"),
        (["--step-memory", "100M"], "--step-memory '100M': unknown unit 'M'"),
        (["--step-memory", "1MiB"], "step memory 1 MiB is less than the 64 MiB"),
        (["--workflows", "no.such.module"], "--workflows: cannot import workflow module"),
    ],
)
def test_bad_flags_are_named_and_exit_2(args: list[str], message: str) -> None:
    base = ["worker", "--server", "127.0.0.1:1", "--workflows", FLOWS]
    res = runner.invoke(app, [*base, *args])
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split())


def test_other_commands_do_not_load_the_worker() -> None:
    probe = "import sys, apollo11.scheduler.cli; print('apollo11.scheduler.worker' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_worker_loads_no_server_module() -> None:
    probe = "import sys, json, apollo11.scheduler.worker; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    server = ("node", "engine", "store", "log", "replay", "metrics", "api.server", "api.codec")
    loaded = [
        m
        for m in json.loads(out.stdout)
        if any(
            m == f"apollo11.scheduler.{s}" or m.startswith(f"apollo11.scheduler.{s}.")
            for s in server
        )
        or m.startswith(("apollo11.replicator", "apollo11.lease"))
    ]
    assert loaded == []


async def test_the_worker_process_runs_steps_and_drains_on_sigterm() -> None:
    primary = FakePrimary()
    async with serving(primary) as address:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "apollo11.scheduler.cli",
            "worker",
            "--server",
            address,
            "--workflows",
            FLOWS,
            "--name",
            "cli-w",
            "--slots",
            "2",
            "--labels",
            "zone=a",
            "--log-level",
            "debug",  # a line per attempt
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            conn = await primary.next_conn()
            assert (conn.register.name, conn.register.slots) == ("cli-w", 2)
            assert dict(conn.register.labels) == {"zone": "a"}
            a = assignment("echo", 7, input={"via": "cli"})
            await conn.assign(a)
            r = await conn.result(a.token)
            assert orjson.loads(r.result_json)["input"] == {"via": "cli"}
            await conn.ack(a.token)
            proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(WAIT_S):
                code = await proc.wait()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert proc.stderr is not None
        logged = (await proc.stderr.read()).decode()
    assert code == 0, logged
    assert f"connected to the primary n1 (term 3) at {address} as cli-w with 2 slots" in logged
    assert "attempt t1/echo #1 started" in logged
    assert "attempt t1/echo #1 finished" in logged
