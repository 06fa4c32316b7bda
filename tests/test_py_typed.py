"""An application type-checks against the installed wheel (PEP 561: py.typed).

Without the marker an application's mypy sees every Apollo-11 import as Any.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.nodes import ROOT

APP = """
from apollo11.scheduler.client import SyncClient


def last_event(server: str) -> int:
    with SyncClient(server) as c:
        return c.status().last_event_id


def wrong(server: str) -> int:
    with SyncClient(server) as c:
        return c.status().last_event_id + "!"
"""


def test_an_application_sees_the_types_of_the_installed_wheel(tmp_path: Path) -> None:
    run = {"capture_output": True, "text": True, "timeout": 300}
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
        **run,  # type: ignore[call-overload]
    )
    assert built.returncode == 0, built.stderr
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True, **run)  # type: ignore[call-overload]
    wheel = next(wheels.glob("apollo11-*.whl"))
    installed = subprocess.run(
        [str(env / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
        **run,  # type: ignore[call-overload]
    )
    assert installed.returncode == 0, installed.stderr
    app = tmp_path / "app.py"
    app.write_text(APP)
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
         "--python-executable", str(env / "bin" / "python"), str(app)],
        cwd=tmp_path, **run,  # type: ignore[call-overload]
    )  # fmt: skip
    out = checked.stdout + checked.stderr
    # the one error is the application's own: the types came through
    assert 'app.py:12: error: Unsupported operand types for + ("int" and "str")' in out, out
    assert "Found 1 error in 1 file" in out, out
