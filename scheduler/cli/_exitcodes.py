"""The command's exit codes: what a script can branch on without reading stderr.

Every error that ends a command goes through `fail(message, code)` (cli/_shared.py);
a client call's error gets its code from `code_for`, by what went wrong, not by
which command met it: "no such task" and "cluster unreachable" must not look alike
to a script that retries one and not the other. click's own usage errors are 2, as
invalid input is.
"""

from __future__ import annotations

import enum

from apollo11.scheduler.errors import (
    AlreadyExistsError,
    ApolloError,
    InvalidArgumentError,
    NodeUnavailableError,
    NoLeaderError,
    NotFoundError,
    OutcomeUnknownError,
    ResourceExhaustedError,
)


class ExitCode(enum.IntEnum):
    DONE = 0
    FAILED = 1  # the request was refused, or what it waited for failed
    INVALID = 2  # a flag, a file or an input that is not valid
    NOT_FOUND = 3  # no such task, workflow, step, schedule, limit or token entry
    UNAVAILABLE = 4  # no node answered, no primary, overloaded: try again later
    DENIED = 5  # no credentials, or a role that may not do this


# The root help's epilog and the README's table say the same.
HELP = (
    "Exit codes: 0 done; 1 failed (refused, or the task it waited for failed); "
    "2 invalid input (a flag, a file, an input); 3 not found (no such task, workflow, "
    "schedule, …); 4 unavailable (no node answered, no primary, overloaded: retry); "
    "5 permission denied (no or a wrong credential, or a role that may not)."
)

_DENIED = frozenset({"PERMISSION_DENIED", "UNAUTHENTICATED"})
_UNAVAILABLE = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED"})


def code_for(e: ApolloError) -> ExitCode:
    """A client call's error (scheduler/client/_errors.py made it from a gRPC status)."""
    if isinstance(e, NotFoundError):
        return ExitCode.NOT_FOUND
    if isinstance(e, InvalidArgumentError):
        return ExitCode.INVALID
    if isinstance(e, NodeUnavailableError | NoLeaderError | ResourceExhaustedError):
        return ExitCode.UNAVAILABLE
    if isinstance(e, AlreadyExistsError | OutcomeUnknownError):
        return ExitCode.FAILED
    # The client's UnavailableError and ApiError (the client is loaded by now: it raised)
    from apollo11.scheduler.client import ApiError, UnavailableError

    if isinstance(e, UnavailableError):
        return ExitCode.UNAVAILABLE
    if isinstance(e, ApiError):
        return status_code(e.code.name)
    return ExitCode.FAILED


def status_code(name: str) -> ExitCode:
    """A gRPC status, by its name (`health` meets them without the client)."""
    if name in _DENIED:
        return ExitCode.DENIED
    if name in _UNAVAILABLE:
        return ExitCode.UNAVAILABLE
    if name == "NOT_FOUND":
        return ExitCode.NOT_FOUND
    if name == "INVALID_ARGUMENT":
        return ExitCode.INVALID
    return ExitCode.FAILED
