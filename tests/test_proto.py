"""Generated protobuf code is committed; this fails when it is stale (run `make proto`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROTO = ROOT / "proto"


def test_generated_code_is_up_to_date(tmp_path: Path) -> None:
    sources = sorted(PROTO.glob("apollo11/v1/*.proto"))
    assert sources
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTO}",
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            f"--grpc_python_out={tmp_path}",
            *map(str, sources),
        ],
        check=True,
    )
    generated = sorted(tmp_path.rglob("*.py*"))
    assert generated
    for fresh in generated:
        committed = PROTO / fresh.relative_to(tmp_path)
        assert committed.exists(), f"{committed} is missing: run `make proto`"
        assert committed.read_bytes() == fresh.read_bytes(), (
            f"{committed} is stale: run `make proto`"
        )
