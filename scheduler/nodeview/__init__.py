"""The node as its two servers see it: what the gRPC API (scheduler/api/) and the web
pages (scheduler/web/) read and do, defined once so that both say the same.

* `ports.py`: `NodeView`, all they may read and do on their node (the node satisfies
  it structurally; neither server imports the node, which builds them);
* `status.py`: what `apollo11 status`, GetStatus and the cluster page show;
* `listing.py`: a task (now or as of an event) and a page of events;
* `giveway.py`: bulk reads (an export's) paced to give way to the primary's dispatch;
* `actions.py`: the operator's retry, skip, cancel, hold, release and redact, checked
  and done (or forwarded);
* `checks.py`: a request's text fields, refused in the same words from either server.

A package of its own so that the web pages load none of the gRPC server (api/'s
face), and the API none of the pages. Import from here, not from the modules inside.
"""

from apollo11.scheduler.nodeview.actions import (
    ACTION_KINDS,
    RPCS,
    ActionKind,
    OperatorAction,
    leading_engine,
    on_engine,
    operator_action,
    perform,
)
from apollo11.scheduler.nodeview.checks import (
    MAX_ID,
    MAX_REASON,
    check_depth,
    optional,
    required,
)
from apollo11.scheduler.nodeview.giveway import GiveWay, dispatching
from apollo11.scheduler.nodeview.listing import (
    BeyondTheLog,
    EventPage,
    blocked,
    events_page,
    read_events,
    task_as_of,
    task_now,
    waiting,
)
from apollo11.scheduler.nodeview.ports import NodeView
from apollo11.scheduler.nodeview.status import (
    ClusterStatus,
    LeaseStatus,
    MemberStatus,
    TermRecord,
    WorkerStatus,
    members,
)

__all__ = [
    "ACTION_KINDS",
    "MAX_ID",
    "MAX_REASON",
    "RPCS",
    "ActionKind",
    "BeyondTheLog",
    "ClusterStatus",
    "EventPage",
    "GiveWay",
    "LeaseStatus",
    "MemberStatus",
    "NodeView",
    "OperatorAction",
    "TermRecord",
    "WorkerStatus",
    "blocked",
    "check_depth",
    "dispatching",
    "events_page",
    "leading_engine",
    "members",
    "on_engine",
    "operator_action",
    "optional",
    "perform",
    "read_events",
    "required",
    "task_as_of",
    "task_now",
    "waiting",
]
