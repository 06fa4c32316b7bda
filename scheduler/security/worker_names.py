"""Which names a worker may register under: a worker's name is bound to its credential.

The name a worker registers under is what the STARTED of each of its attempts
records, and what a new primary adopts running attempts by after a failover: a
result counts only from the worker the STARTED names. The attempt token beside
it is no secret (the term and event id of the STARTED, which every reader sees
in GetEvents), so on a node with authentication the name must not be either:

* a worker principal (a token's name, or a client certificate's CN in the
  tokens file) registers as itself, `etl`, or beneath itself, `etl/<anything>`,
  and under no other name: PERMISSION_DENIED, naming both;
* a worker left to its default name sends HOST-PID, marked as a default, and is
  registered beneath its principal: `etl/HOST-PID`;
* an open node (no tokens file: the anonymous principal) takes any name, as
  before.

Why beneath, and not the principal's name alone: a fleet of replicas started
with one credential (one Kubernetes secret) must name each replica apart. A
replica may then take a sibling's name, but it holds the very credential the
sibling does and could be it anyway: no principal gains a power it did not
have, and none may speak for another's workers. `/` cannot occur in a
principal's name (tokens.check_name), so `etl/x` is never another principal's
own name, and `etlx` is not beneath `etl`.
"""

from __future__ import annotations

from apollo11.scheduler.security.roles import Principal

SEPARATOR = "/"


class WorkerNameRefused(Exception):
    """The principal may not register under the name (the message says which may)."""


def worker_name(principal: Principal, asked: str, *, default: bool) -> str:
    """The name a worker that asked for `asked` registers under (`default`: `asked`
    is its own default, HOST-PID, not a name it was given); WorkerNameRefused if
    `principal` may not use it."""
    if not principal.authenticated:
        return asked
    own = principal.name
    if default:
        return f"{own}{SEPARATOR}{asked}"
    beneath = own + SEPARATOR
    if asked == own or (asked.startswith(beneath) and len(asked) > len(beneath)):
        return asked
    raise WorkerNameRefused(
        f"worker name {asked!r} is not one the principal {own!r} may use: a worker "
        f"registers under its credential's name ({own}) or beneath it ({own}/...); pass "
        f"--name {own} or --name {own}/SOMETHING, or leave --name out (then {own}/HOST-PID)"
    )
