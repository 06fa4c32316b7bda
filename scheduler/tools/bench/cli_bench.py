"""`apollo11 bench cli`: what a command spends importing before it does anything.

Each round runs `apollo11 status` and `apollo11 submit` under `python -X importtime`
against a standalone node on loopback (so each command does its whole job, output
included), and `python -c "import asyncio"` in the same loop as the machine's
yardstick: this VM's import speed varies two- to threefold from day to day, and a
figure without the yardstick beside it does not compare across runs. The figure is
the top-level imports' cumulative times summed, as `-X importtime` reports them; the
interpreter's own start-up (a few ms) is not in it.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from apollo11.scheduler.tools.bench.workers_bench import _section

BUDGET_MS = 120.0  # issue 19: `status` and `submit` spend at most this in imports
_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \| ( *)(\S+)")


def import_ms(stderr: str) -> tuple[float, dict[str, float]]:
    """The top-level imports of one `-X importtime` run: their summed cumulative ms,
    and each one's (nested imports are inside their top-level parent's figure)."""
    top: dict[str, float] = {}
    for line in stderr.splitlines():
        m = _LINE.match(line)
        if m and not m.group(3):
            top[m.group(4)] = top.get(m.group(4), 0.0) + int(m.group(2)) / 1000
    return round(sum(top.values()), 1), top


def _timed(args: Sequence[str], env: dict[str, str]) -> tuple[float, dict[str, float]]:
    p = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    if p.returncode != 0:
        tail = p.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"{' '.join(args)} exited {p.returncode}: {tail[0]}")
    return import_ms(p.stderr)


def _install_kind() -> str:
    """ "editable" (a checkout's `pip install -e`: its import finder costs ~10 ms more)
    or "wheel" (the package under site-packages, as a user installs it)."""
    import apollo11

    where = os.path.realpath(os.path.dirname(apollo11.__file__ or ""))
    return "wheel" if "site-packages" in where.split(os.sep) else "editable"


def _summary(runs: list[float]) -> dict[str, Any]:
    return {"runs_ms": sorted(runs), "median_ms": round(statistics.median(runs), 1)}


def run(
    quick: bool, workdir: str | None, progress: Callable[[str], None], *, rounds: int | None = None
) -> dict[str, Any]:
    rounds = rounds or (5 if quick else 15)
    root = tempfile.mkdtemp(prefix="apollo11-bench-", dir=workdir or os.getcwd())
    # the CLI's own settings must not leak in (a token file, TLS, another server)
    env = {k: v for k, v in os.environ.items() if not k.startswith("APOLLO11_")}
    times: dict[str, list[float]] = {}
    where: dict[str, dict[str, float]] = {}
    try:
        with _section(Path(root), "cli") as procs:  # the node is stopped however this ends
            progress("a standalone node on loopback")
            server = procs.node("bench", env=env).address  # nor into the node
            commands = {
                "status": ["-m", "apollo11.scheduler.cli", "status", "--server", server],
                "submit": [
                    "-m",
                    "apollo11.scheduler.cli",
                    "submit",
                    "etl",
                    "-q",
                    "--server",
                    server,
                ],
                "import asyncio": ["-c", "import asyncio"],
            }
            times = {name: [] for name in commands}
            progress(f"{rounds} rounds of {', '.join(commands)} under -X importtime")
            for _ in range(rounds):
                for name, args in commands.items():  # alternated: noise hits all alike
                    total, top = _timed(args, env)
                    times[name].append(total)
                    where[name] = top
    finally:
        shutil.rmtree(root, ignore_errors=True)
    yardstick = statistics.median(times["import asyncio"])
    out: dict[str, Any] = {
        "quick": quick,
        "rounds": rounds,
        "budget_ms": BUDGET_MS,
        "install": _install_kind(),
        "python": sys.executable,
    }
    for name in ("status", "submit"):
        s = _summary(times[name])
        s["vs_import_asyncio"] = round(s["median_ms"] / yardstick, 2)
        s["met"] = s["median_ms"] <= BUDGET_MS
        heaviest = sorted(where[name].items(), key=lambda kv: -kv[1])[:6]
        s["heaviest_ms"] = {k: round(v, 1) for k, v in heaviest}
        out[name] = s
    out["import_asyncio"] = _summary(times["import asyncio"])
    return out


def summary_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [("install measured", f"{r['install']} ({r['python']})")]
    for name in ("status", "submit"):
        s = r[name]
        verdict = "met" if s["met"] else "missed"
        rows.append(
            (
                f"`apollo11 {name}` imports, median of {r['rounds']} "
                f"(budget {r['budget_ms']:g} ms)",
                f"{s['median_ms']} ms: {verdict} (x{s['vs_import_asyncio']} the yardstick)",
            )
        )
    rows.append(
        ("yardstick: `import asyncio` alone, same loop", f"{r['import_asyncio']['median_ms']} ms")
    )
    rows.append(
        (
            "where `status` spends it",
            ", ".join(f"{k} {v}" for k, v in r["status"]["heaviest_ms"].items()),
        )
    )
    return rows
