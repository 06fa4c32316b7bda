"""The security page's role table, from the code's: `python -m
apollo11.scheduler.tools.roledoc docs/security.md` (`make docs`) rewrites the table
between the two marker comments.

Which role may call which RPC is METHOD_ROLES, which may reach which web route
is ROUTE_ROLES, how roles nest is the ladder (`grants`): all in
scheduler/security/roles.py. A table written by hand beside them fell behind (it
lacked SendEvent, the workflow and history reads, Switchover, ReadRecords and the
worker role); tests/test_roledoc.py fails when the page's table differs from what
this writes, as tests/test_apidoc.py does for docs/client-api.md. The prose here
says only what the table cannot derive: how a role is proven, what a route is
for, and the method and the route that also depend on a node setting.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

from apollo11.scheduler.security import (
    APART,
    LADDER,
    METHOD_ROLES,
    OPEN_METHODS,
    OPEN_ROUTES,
    ROUTE_ROLES,
    Role,
    grants,
)

BEGIN = (
    "<!-- the role table: `make docs` writes it from scheduler/security/roles.py "
    "(scheduler/tools/roledoc.py); do not edit it by hand -->"
)
END = "<!-- end of the role table -->"

METHOD_NOTES = {"/apollo11.v1.Scheduler/SubmitShell": "where every node allows shell steps"}
ROUTE_NOTES = {
    "GET /": "the cluster",
    "GET /metrics": "a bearer token or a session; anyone's with `--metrics-open`",
    "POST /tasks/{task_id}/{kind}": "retry, skip, cancel, hold, release, redact",
    "POST /schedules/{schedule_id}/{kind}": "pause, unpause, trigger",
    "GET /limits": "flow control's limits, read only",
    "GET /static": "the stylesheet",
    "POST /login": "signing in, with a token of a role that may `GET /`",
}
ROLE_NOTES = {
    Role.NODE: "proven by a peer certificate of the cluster CA, never by a token",
    Role.WORKER: "the token of `apollo11 worker` processes",
}


def _methods(paths: Iterable[str]) -> str:
    """`Scheduler: `GetTask`, `ListTasks`; Cluster: `GetStatus``: by service, in the
    table's order (a method in two versions of a service, as reflection is, once)."""
    by_service: dict[str, list[str]] = {}
    for path in paths:
        service, _, method = path.strip("/").partition("/")
        shown = f"`{method}`"
        if path in METHOD_NOTES:
            shown += f" ({METHOD_NOTES[path]})"
        names = by_service.setdefault(service.rsplit(".", 1)[-1], [])
        if shown not in names:
            names.append(shown)
    return "; ".join(f"{service}: {', '.join(names)}" for service, names in by_service.items())


def _routes(routes: Iterable[str]) -> str:
    """`` `GET /` (the cluster), `GET /tasks` ``: in the table's order."""
    return ", ".join(f"`{r}` ({ROUTE_NOTES[r]})" if r in ROUTE_NOTES else f"`{r}`" for r in routes)


def _new(role: Role, below: Role | None, needs: Iterable[tuple[str, Role]]) -> list[str]:
    """What `role` is granted that the rung below it is not."""
    return [
        what
        for what, need in needs
        if grants(role, need) and not (below is not None and grants(below, need))
    ]


def _row(role: Role, below: Role | None, *, apart: bool = False) -> str:
    calls = _new(role, below, ((m, need) for m, need in METHOD_ROLES.items()))
    grpc = _methods(calls) + (" only" if apart else "")
    web = _routes(_new(role, below, ROUTE_ROLES.items()))
    if below is not None:
        grpc = f"what `{below.value}` may, and {grpc}" if grpc else f"what `{below.value}` may"
        pages = f"what `{below.value}` may"
        shown = f"{pages}, and {web}" if web else pages
    elif web:
        shown = web
    else:  # a node has no token to try; a worker's is refused (scheduler/web/guard.py)
        shown = "none" if role is Role.NODE else f"none (`/login` refuses a {role.value} token)"
    if role in ROLE_NOTES:
        grpc += f"; {ROLE_NOTES[role]}"
    return f"| `{role.value}` | {grpc} | {shown} |"


def render() -> str:
    """The table, in markdown: the ladder's roles, each by what it adds, then the
    roles that stand apart, then what needs no credential."""
    if set(LADDER) | set(APART) != set(Role):
        missing = ", ".join(r.value for r in Role if r not in (*LADDER, *APART))
        raise AssertionError(f"role {missing} is neither on the ladder nor apart")
    rows = ["| role | gRPC | web |", "|---|---|---|"]
    for i, role in enumerate(LADDER):
        rows.append(_row(role, LADDER[i - 1] if i else None))
    rows += [_row(role, None, apart=True) for role in APART]
    rows.append(f"| none | {_methods(sorted(OPEN_METHODS))} | {_routes(sorted(OPEN_ROUTES))} |")
    return "\n".join(rows) + "\n"


def _bounds(text: str) -> tuple[int, int]:
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"no role table markers: a line {BEGIN!r}, then one {END!r}")
    return start + len(BEGIN), end


def splice(text: str, table: str) -> str:
    """`text` with `table` between the markers (ValueError when they are not there).
    A blank line either side: markdown then ends the table before the comment."""
    start, end = _bounds(text)
    return text[:start] + "\n\n" + table + "\n" + text[end:]


def current(text: str) -> str:
    """The table between the markers of `text`, as it is."""
    start, end = _bounds(text)
    return text[start:end].removeprefix("\n\n").removesuffix("\n")


def main(argv: list[str]) -> None:
    path = Path(argv[1] if len(argv) > 1 else "docs/security.md")
    text = path.read_text()
    new = splice(text, render())
    if new != text:
        path.write_text(new)


if __name__ == "__main__":
    main(sys.argv)
