"""Who may call what: the roles, the principal a call runs as, and the tables that
give every RPC and every web route the role it needs.

Roles nest: an `operator` may do what a `submitter` may, and a `submitter`
what a `reader` may. `node` stands apart: it is what a cluster node's peer
certificate proves, and it grants replication only, nothing else. `worker`
stands apart too: it grants the worker stream only.

The tables are the whole policy. A method that is not in METHOD_ROLES is refused
(deny by default), so a new RPC cannot ship without somebody deciding its role,
and the role matrix test (generated from the service descriptors) fails until
they do. The web side is the same: ROUTE_ROLES gives each route of the HTTP
server its role, scheduler/web/guard.py asks it for the route a request matched
and refuses a route it does not name, and tests/web/test_routes.py fails while
a route the app serves has no rule. docs/security.md's role table is rendered
from this module (scheduler/tools/roledoc.py, `make docs`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Role(enum.Enum):
    READER = "reader"
    SUBMITTER = "submitter"
    OPERATOR = "operator"
    NODE = "node"
    WORKER = "worker"

    @classmethod
    def parse(cls, text: str) -> Role:
        try:
            return cls(text.strip().lower())
        except ValueError:
            names = ", ".join(r.value for r in cls)
            raise ValueError(f"unknown role {text!r} (roles: {names})") from None


LADDER = (Role.READER, Role.SUBMITTER, Role.OPERATOR)  # each may what the one before may
# Each grants its own service only: a node's certificate replication, a worker's
# token the worker stream (a worker reports its own attempts' results, under a name
# its credential may use (worker_names.py): nothing else).
APART = (Role.NODE, Role.WORKER)


def grants(have: Role, need: Role) -> bool:
    """Does a principal holding `have` get what `need` allows?"""
    if have in APART or need in APART:
        return have is need
    return LADDER.index(have) >= LADDER.index(need)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a call runs as, as proven by its credential.

    `via` says how: "token", "certificate", "peer certificate", or "none" for
    the anonymous principal of a node that runs without authentication (loopback
    only, or --insecure), which may do everything.
    """

    name: str
    role: Role | None  # None: the anonymous principal of an open node
    via: str

    def may(self, need: Role) -> bool:
        return self.role is None or grants(self.role, need)

    @property
    def authenticated(self) -> bool:
        return self.role is not None


ANONYMOUS = Principal("anonymous", None, "none")

# Open to anyone: container probes and grpcurl need them, and they reveal nothing.
OPEN_METHODS = frozenset(
    {
        "/grpc.health.v1.Health/Check",
        "/grpc.health.v1.Health/Watch",
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    }
)

METHOD_ROLES: dict[str, Role] = {
    "/apollo11.v1.Scheduler/SubmitTask": Role.SUBMITTER,
    "/apollo11.v1.Scheduler/SubmitTasks": Role.SUBMITTER,
    # Shell steps run commands on the node: an operator's power (and off unless
    # every node allows them).
    "/apollo11.v1.Scheduler/SubmitShell": Role.OPERATOR,
    "/apollo11.v1.Scheduler/GetTask": Role.READER,
    "/apollo11.v1.Scheduler/ListTasks": Role.READER,
    "/apollo11.v1.Scheduler/WatchTask": Role.READER,
    "/apollo11.v1.Scheduler/GetEvents": Role.READER,
    "/apollo11.v1.Scheduler/GetTasks": Role.READER,
    "/apollo11.v1.Scheduler/ListWorkflows": Role.READER,
    "/apollo11.v1.Scheduler/DescribeWorkflow": Role.READER,
    "/apollo11.v1.Scheduler/RetryStep": Role.OPERATOR,
    "/apollo11.v1.Scheduler/SkipStep": Role.OPERATOR,
    "/apollo11.v1.Scheduler/CancelTask": Role.OPERATOR,
    "/apollo11.v1.Scheduler/RedactTask": Role.OPERATOR,
    # A legal hold keeps a task from retention's purge: an operator's act, recorded
    # with the principal (docs/retention.md).
    "/apollo11.v1.Scheduler/HoldTask": Role.OPERATOR,
    "/apollo11.v1.Scheduler/ReleaseTask": Role.OPERATOR,
    # An event wakes the durable tasks waiting on its key: a submitter's input.
    "/apollo11.v1.Scheduler/SendEvent": Role.SUBMITTER,
    # A schedule submits tasks on its own, for as long as it lives, under its own
    # rules: making, changing or firing one is an operator's act; reading it a reader's.
    "/apollo11.v1.Scheduler/CreateSchedule": Role.OPERATOR,
    "/apollo11.v1.Scheduler/UpdateSchedule": Role.OPERATOR,
    "/apollo11.v1.Scheduler/PauseSchedule": Role.OPERATOR,
    "/apollo11.v1.Scheduler/UnpauseSchedule": Role.OPERATOR,
    "/apollo11.v1.Scheduler/TriggerSchedule": Role.OPERATOR,
    "/apollo11.v1.Scheduler/BackfillSchedule": Role.OPERATOR,
    "/apollo11.v1.Scheduler/DeleteSchedule": Role.OPERATOR,
    "/apollo11.v1.Scheduler/ListSchedules": Role.READER,
    "/apollo11.v1.Scheduler/DescribeSchedule": Role.READER,
    # A limit paces every workflow that declares it, for everyone: changing one is an
    # operator's act (recorded with the principal); reading the limits a reader's.
    "/apollo11.v1.Scheduler/SetLimit": Role.OPERATOR,
    "/apollo11.v1.Scheduler/ListLimits": Role.READER,
    "/apollo11.v1.Cluster/GetStatus": Role.READER,
    "/apollo11.v1.Cluster/GetHistory": Role.READER,
    "/apollo11.v1.Cluster/Switchover": Role.OPERATOR,
    "/apollo11.v1.Replication/Follow": Role.NODE,
    "/apollo11.v1.Replication/ReadRecords": Role.NODE,
    "/apollo11.v1.Workers/Connect": Role.WORKER,
}


# The web routes, each as "METHOD path" with the path as the app declares it
# (scheduler/web/server.py, pages.py, login.py; a mount by its prefix).
# Open to anyone: probes, the stylesheet, and signing in (a token gets a session
# only if it may read the landing page, LANDING).
OPEN_ROUTES = frozenset({"GET /healthz", "GET /static", "GET /login", "POST /login"})

ROUTE_ROLES: dict[str, Role] = {
    "GET /": Role.READER,
    "GET /tasks": Role.READER,
    "GET /tasks/{task_id}": Role.READER,
    "GET /events": Role.READER,
    # a bearer token or a session; anyone's with --metrics-open
    "GET /metrics": Role.READER,
    # retry, skip, cancel, hold, release, redact: what their RPCs need (RetryStep,
    # SkipStep, CancelTask, HoldTask, ReleaseTask, RedactTask: tests/web/test_routes.py)
    "POST /tasks/{task_id}/{kind}": Role.OPERATOR,
    "GET /schedules": Role.READER,
    "GET /schedules/{schedule_id}": Role.READER,
    # pause, unpause, trigger: changes to a schedule, as the schedule verbs need
    "POST /schedules/{schedule_id}/{kind}": Role.OPERATOR,
    # flow control's limits and their busiest key values (changed with `limits set`)
    "GET /limits": Role.READER,
    # ending one's session (without a session there is nothing to end, nor to ask)
    "POST /logout": Role.READER,
}

LANDING = "GET /"  # where signing in goes by default


def required_role(method: str) -> Role | None:
    """The role `method` needs; None when it is open. KeyError: not in the policy."""
    if method in OPEN_METHODS:
        return None
    return METHOD_ROLES[method]


def route_role(route: str) -> Role | None:
    """The role the web route `route` ("GET /tasks/{task_id}") needs; None when it is
    open. KeyError: not in the policy."""
    if route in OPEN_ROUTES:
        return None
    return ROUTE_ROLES[route]
