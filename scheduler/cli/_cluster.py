"""The cluster as its nodes report it: `health`, `status`, `history`, `workflows`,
`workers`, and the planned hand-over of the primary role, `switchover`."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from apollo11.scheduler.cli._exitcodes import ExitCode, status_code
from apollo11.scheduler.cli._shared import (
    AsJson,
    Grid,
    Server,
    client,
    connection,
    fail,
    out,
    print_json,
    run,
)


def health(server: Server = None) -> None:
    """Exit 0 when the node's gRPC health service says SERVING (for container HEALTHCHECKs)."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from apollo11.scheduler.client import channel_credentials_for, endpoints_from

    endpoint = endpoints_from(server)[0]
    creds = channel_credentials_for(
        connection.get("ca"), connection.get("cert"), connection.get("key"), None
    )
    try:
        with (
            grpc.insecure_channel(endpoint)
            if creds is None
            else grpc.secure_channel(endpoint, creds)
        ) as ch:
            reply = health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=2
            )
    except grpc.RpcError as e:
        raise fail(f"{endpoint}: {e.code().name}", status_code(e.code().name)) from e
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        said = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
        raise fail(f"{endpoint}: {said}", ExitCode.UNAVAILABLE)
    out.print(f"{endpoint}: SERVING")


def status(server: Server = None, as_json: AsJson = False) -> None:
    """Who is primary, the term, the lease, and every member's position and lag."""

    async def go() -> Any:
        async with client(server) as c:
            return await c.status()

    s = run(go())
    if as_json:
        print_json(s.to_json())
        return
    leader = s.leader
    out.print(
        f"node [bold]{s.node_id}[/bold] is [bold]{s.role}[/bold], term {s.term}"
        + (f" ({_nth(s.terms_started)} leader in the log)" if s.terms_started else "")
        + "; "
        + (
            f"primary {leader['node_id']} at {leader['address']}"
            if leader
            else "[red]no primary[/red]"
        )
    )
    if s.lease:
        left = s.lease["remaining_s"]
        out.print(
            f"lease TTL {s.lease['ttl_s']:g}s, "
            + (f"{left:.1f}s left" if left >= 0 else "time left unknown on this node")
        )
    out.print(
        f"log at event {s.last_event_id}, state applied to {s.applied_event_id}; "
        f"{s.active_tasks} active tasks, {s.running_steps} steps running"
    )
    if s.security:
        style = "bold red" if s.security.startswith("INSECURE") else "dim"
        out.print(f"security: {s.security}", style=style, markup=False)
    if s.notice:
        out.print(f"notice: {s.notice}", style="bold yellow", markup=False)
    table = Grid(
        "member", "role", "address", "last event", "lag (events)", "lag ms", "connected", "sync"
    )
    for m in s.members:
        table.add_row(
            m.node_id,
            m.role,
            m.address,
            str(m.last_event_id),
            str(m.lag_events),
            f"{m.lag_ms:.1f}",
            "yes" if m.connected else "no",
            "yes" if m.synchronous else "",
        )
    table.show()
    if s.execution != "embedded" or s.workers:
        used = sum(w.slots_used for w in s.workers)
        total = sum(w.slots for w in s.workers)
        out.print(
            f"execution {s.execution}: {len(s.workers)} worker(s), {used}/{total} slots busy"
            + ("" if s.workers else " (start one: apollo11 worker --server ... --workflows ...)")
        )
        if s.workers:
            _workers_table(s.workers)


def _workers_table(workers: Any) -> None:
    table = Grid("worker", "address", "slots", "running", "heartbeat", "workflows", "labels")
    for w in workers:
        table.add_row(
            w.name,
            w.address,
            f"{w.slots_used}/{w.slots}",
            str(w.attempts_running),
            f"{w.last_heartbeat_s_ago:.1f}s ago",
            ", ".join(w.workflows),
            ",".join(f"{k}={v}" for k, v in sorted(w.labels.items())),
        )
    table.show()


def _nth(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def switchover(
    to: Annotated[
        str | None,
        typer.Option("--to", help="The standby to hand over to (default: the one furthest ahead)."),
    ] = None,
    wait_s: Annotated[
        float, typer.Option("--wait", help="Seconds to wait for the new primary to lead.")
    ] = 30.0,
    server: Server = None,
    as_json: AsJson = False,
) -> None:
    """A planned hand-over of the primary role (Patroni's switchover): the primary
    starts no new step, lets running ones finish, waits until the standby holds
    every event it wrote, and resigns; that standby is then elected."""
    import asyncio
    import time

    async def go() -> tuple[dict[str, Any], Any]:
        async with client(server) as c:
            done = await c.switchover(to)
            deadline = time.monotonic() + wait_s
            while True:
                status = await c.status()
                leader = status.leader
                if leader is not None and leader.get("node_id") != done["from"]:
                    return done, status
                if time.monotonic() > deadline:
                    return done, None
                await asyncio.sleep(0.2)

    done, status = run(go())
    leader = (status.leader if status is not None else None) or {}
    if as_json:
        print_json({**done, "leader": leader.get("node_id"), "term": leader.get("term")})
        return
    out.print(f"{done['from']} resigned: {done['sentence']}", markup=False)
    if not leader:
        raise fail(f"no new primary within {wait_s:g}s: see apollo11 status", ExitCode.UNAVAILABLE)
    out.print(
        f"{leader.get('node_id')} leads now (term {leader.get('term')}); it holds every "
        f"event through {done['last_event_id']}",
        markup=False,
    )


def history(server: Server = None, as_json: AsJson = False) -> None:
    """Every leader the log records, oldest first: term, node, first event, when, and
    how it took over (bootstrap, failover, switchover, restart).

    A term is a fencing token, not a count: after an election it is above every
    term any member knew, so it may jump by thousands; the rows are the takeovers."""

    async def go() -> Any:
        async with client(server) as c:
            return await c.history()

    terms = run(go())
    if as_json:
        print_json([t.to_json() for t in terms])
        return
    if not terms:
        out.print("no term in this node's log yet (no primary has led it)")
        return
    table = Grid("#", "term", "leader", "address", "first event", "started", "how")
    for i, t in enumerate(terms, 1):
        started = _utc(t.started_ms) if t.started_ms else ""
        table.add_row(
            str(i),
            str(t.term),
            t.node_id or "(not kept)",
            t.address,
            str(t.first_event_id),
            started,
            _how(t.began, t.previous),
        )
    table.show()


def _how(began: str, previous: str) -> str:
    if began in ("failover", "switchover") and previous:
        return f"{began} from {previous}"
    return began or "(not recorded)"


def _utc(ms: int) -> str:
    import datetime

    when = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S UTC")


def workflows(server: Server = None, as_json: AsJson = False) -> None:
    """The workflows the primary has loaded: versions, steps, idempotency per step.

    --json adds the input and result JSON Schemas of typed workflows."""

    async def go() -> Any:
        async with client(server) as c:
            return await c.workflows()

    listed = run(go())
    if as_json:
        print_json(listed)
        return
    if not listed:
        out.print("no workflow loaded (the node's --workflows names the modules)")
        return
    table = Grid("workflow", "version", "kind", "steps (idempotency, attempts)")
    for wf in listed:
        steps = ", ".join(
            f"{st['name']} ({st['idempotency'] or '-'}, {st['attempts']})" for st in wf["steps"]
        )
        kind = "durable" if wf["durable"] else "dag"
        table.add_row(wf["name"], str(wf["version"]), kind, steps)
    table.show()


def workers(server: Server = None, as_json: AsJson = False) -> None:
    """The workers connected to the primary: slots, attempts running, last heartbeat."""

    async def go() -> Any:
        async with client(server) as c:
            return await c.status()

    s = run(go())
    if as_json:
        print_json([w.to_json() for w in s.workers])
        return
    if s.role != "primary":
        out.print(f"node {s.node_id} is {s.role}: workers connect to the primary only")
    if not s.workers:
        out.print(f"no worker connected (execution {s.execution})")
        return
    _workers_table(s.workers)
