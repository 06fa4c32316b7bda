from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from apollo11.scheduler.cli import app

GOLDEN = Path(__file__).parent.parent / "golden"
runner = CliRunner()


def test_replay_json_matches_the_golden_state() -> None:
    res = runner.invoke(app, ["replay", "--data-dir", str(GOLDEN / "eventful"), "--json"])
    assert res.exit_code == 0, res.output
    expected = json.loads((GOLDEN / "eventful" / "expected.json").read_text())
    assert json.loads(res.stdout) == expected


def test_replay_one_task_as_of_an_event() -> None:
    res = runner.invoke(
        app,
        [
            "replay",
            "--data-dir",
            str(GOLDEN / "eventful"),
            "--until",
            "12",
            "--task",
            "d1",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    task = json.loads(res.stdout)
    assert task["last_event_id"] <= 12
    left = next(s for s in task["steps"] if s["name"] == "left")
    assert (left["status"], left["attempt"], left["lost"]) == ("FAILED", 2, True)


def test_replay_table_output() -> None:
    res = runner.invoke(app, ["replay", "--data-dir", str(GOLDEN / "etl-happy")])
    assert res.exit_code == 0, res.output
    assert "8 tasks" in res.stdout and "etl-7" in res.stdout and "SUCCEEDED" in res.stdout


def test_replay_errors_are_clear(tmp_path: Path) -> None:
    res = runner.invoke(app, ["replay", "--data-dir", str(tmp_path)])
    assert res.exit_code == 1
    assert "not an Apollo-11 data directory" in res.stderr
    res = runner.invoke(app, ["replay", "--data-dir", str(GOLDEN / "corrupt-sealed")])
    assert res.exit_code == 2, "damage exits 2"
    assert "checksum" in res.stderr and "00000000000000000001.seg" in res.stderr
    res = runner.invoke(app, ["replay", "--data-dir", str(GOLDEN / "etl-happy"), "--task", "nope"])
    assert res.exit_code == 3 and "no task 'nope'" in res.stderr  # not found


def test_version() -> None:
    import subprocess
    import sys
    from importlib.metadata import version

    res = subprocess.run(
        [sys.executable, "-m", "apollo11.scheduler.cli", "--version"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0 and res.stdout == f"apollo11 {version('apollo11')}\n"


def test_in_a_pipe_errors_are_one_plain_line() -> None:
    """Issue 19: rich drew usage errors as 80-column boxes in pipes and logs."""
    from tests.nodes import cli

    res = cli("status", "--bogus")  # stdout and stderr are pipes here
    assert res.returncode == 2
    assert "Error: No such option: --bogus" in res.stderr.splitlines()
    assert not any(ch in res.stderr for ch in "╭│╰─"), res.stderr
    res = cli("status", "--server", "127.0.0.1:1")  # nothing listens on port 1
    assert res.returncode != 0
    (line,) = [x for x in res.stderr.splitlines() if x.strip()]
    assert line.startswith("error: cannot reach any node (127.0.0.1:1) within 2s"), line


def test_an_input_too_deep_to_send_is_an_error_not_a_traceback() -> None:
    from tests.nodes import cli

    deep = "[" * 900 + "]" * 900
    for args in (("submit", "etl", "--input", deep), ("event", "send", "k", "--payload", deep)):
        res = cli(*args, "--server", "127.0.0.1:1")  # refused before a node is asked
        assert res.returncode == 2, res.stdout
        assert "Traceback" not in res.stderr, res.stderr
        assert " nests deeper than 254 levels" in " ".join(res.stderr.split()), res.stderr


def test_in_a_pipe_the_command_list_keeps_each_commands_summary_whole() -> None:
    """Issue 19: click cut each summary to fit 80 columns ("run what is...")."""
    from tests.nodes import cli

    res = cli("--help")
    assert res.returncode == 0, res.stderr
    listed = res.stdout.split("Commands:", 1)[1]
    assert "..." not in listed, listed
    text = " ".join(listed.split())
    assert "worker Run steps for the primary: connect, register, run what is assigned" in text
    bench = cli("bench", "--help").stdout
    assert "..." not in bench.split("Commands:", 1)[1], bench


def test_the_node_reads_its_config_file_from_apollo11_config(tmp_path: Path) -> None:
    import os
    import subprocess

    from tests.nodes import APOLLO11

    conf = tmp_path / "node.toml"
    conf.write_text('concurrency = "many"\n')  # refused, naming the file's field
    try:
        res = subprocess.run(
            [*APOLLO11, "node", "--data-dir", str(tmp_path / "d")],
            capture_output=True,
            text=True,
            timeout=20,
            env={**os.environ, "APOLLO11_CONFIG": str(conf)},
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the node ignored APOLLO11_CONFIG and started")
    assert res.returncode != 0
    assert "concurrency" in res.stderr, res.stderr


def test_node_help_names_every_flags_variable_and_default() -> None:
    from tests.nodes import cli

    res = cli("node", "--help")
    assert res.returncode == 0, res.stderr
    text = " ".join(res.stdout.split())  # click wraps the help at 80 columns
    assert "[env APOLLO11_CONCURRENCY; default 32]" in text
    assert "[env APOLLO11_LEASE_TTL; default 5.0]" in text
    assert "[env APOLLO11_DATA_DIR]" in text
    import re

    flags = set(re.findall(r"^  (--[a-z-]+)", res.stdout, re.M)) - {"--help"}
    assert len(flags) > 30 and text.count("[env APOLLO11_") == len(flags), "every flag"
