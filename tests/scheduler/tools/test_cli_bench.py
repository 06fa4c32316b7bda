"""`apollo11 bench cli`: the import figure is read from `-X importtime` as its top-level
imports summed, and a short real run measures both commands against a live node (the
figures themselves: docs/benchmarks.md, "CLI start-up")."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from apollo11.scheduler.tools.bench import cli_bench

# three top-level imports, one with nested ones inside its cumulative figure
IMPORTTIME = """\
import time: self [us] | cumulative | imported package
import time:       300 |        300 | _io
import time:       200 |        200 |   marshal
import time:      1000 |       1500 | site
import time:       500 |        500 |     abc
import time:      2000 |      12000 |   grpc._cython
import time:       400 |      20000 | grpc
something the command printed to stderr
import time:        50 |       2500 | orjson
"""


def test_the_figure_is_the_top_level_imports_cumulative_times_summed() -> None:
    total, top = cli_bench.import_ms(IMPORTTIME)
    assert top == {"_io": 0.3, "site": 1.5, "grpc": 20.0, "orjson": 2.5}
    assert total == 24.3


@pytest.mark.process  # the bench starts the node: the package's code, not read for it
def test_a_short_run_measures_status_and_submit_against_a_live_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the operator's own settings reach neither the commands nor the bench's node
    # (this one would stop a node from starting)
    monkeypatch.setenv("APOLLO11_TOKENS_FILE", str(tmp_path / "no-such-file"))
    r = cli_bench.run(True, str(tmp_path), lambda _: None, rounds=2)
    for name in ("status", "submit"):
        s = r[name]
        assert len(s["runs_ms"]) == 2, r
        # each command makes a gRPC call: the client (grpc, the generated messages) is
        # among what it imported, and it imports more than asyncio alone
        assert "apollo11.scheduler.client" in s["heaviest_ms"], r
        assert s["median_ms"] > r["import_asyncio"]["median_ms"], r
    assert r["python"] == sys.executable
    assert dict(cli_bench.summary_rows(r))  # renders
    assert not list(tmp_path.iterdir()), "a run leaves nothing behind"
