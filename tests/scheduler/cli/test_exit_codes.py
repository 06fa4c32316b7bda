"""Exit codes a script can branch on (issue 33, part 4c): "no such task", "invalid
input", "cluster unreachable" and "permission denied" were all 1."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
import typer
from typer.testing import CliRunner

from apollo11.scheduler.cli import _shared, app
from apollo11.scheduler.client import ApiError, UnavailableError
from apollo11.scheduler.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NoLeaderError,
    NotFoundError,
    ResourceExhaustedError,
)

NOT_FOUND, INVALID, UNAVAILABLE, DENIED = 3, 2, 4, 5


async def _raise(e: Exception) -> Any:
    raise e


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (NotFoundError("no task 't-1'"), NOT_FOUND),
        (NotFoundError("no workflow 'etc' is registered"), NOT_FOUND),
        (InvalidArgumentError("input is not valid"), INVALID),
        (UnavailableError("no node answered: 127.0.0.1:7411"), UNAVAILABLE),
        (NoLeaderError("no primary"), UNAVAILABLE),
        (ResourceExhaustedError("overloaded"), UNAVAILABLE),
        (ApiError(grpc.StatusCode.PERMISSION_DENIED, "role viewer"), DENIED),
        (ApiError(grpc.StatusCode.UNAUTHENTICATED, "no token"), DENIED),
        (FailedPreconditionError("the step is running"), 1),
    ],
)
def test_each_kind_of_error_has_its_exit_code(error: Exception, code: int) -> None:
    with pytest.raises(typer.Exit) as ended:
        _shared.run(_raise(error))
    assert ended.value.exit_code == code


def test_the_codes_are_distinct() -> None:
    codes = set()
    for e in (NotFoundError("x"), InvalidArgumentError("x"), UnavailableError("x")):
        with pytest.raises(typer.Exit) as ended:
            _shared.run(_raise(e))
        codes.add(ended.value.exit_code)
    assert len(codes) == 3


def test_the_root_help_lists_the_exit_codes() -> None:
    res = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0
    said = " ".join(res.output.split())
    for line in ("0 done", "1 failed", "2 invalid input", "3 not found", "4 unavailable",
                 "5 permission denied"):  # fmt: skip
        assert line in said, line


def test_replay_of_an_unknown_task_is_not_found() -> None:
    from tests.scheduler.test_cli import GOLDEN

    res = CliRunner().invoke(
        app, ["replay", "--data-dir", str(GOLDEN / "etl-happy"), "--task", "nope"]
    )
    assert res.exit_code == NOT_FOUND and "no task 'nope'" in res.stderr
