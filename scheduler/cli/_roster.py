"""What etcd keeps for the cluster, read and changed with no node's help: the
roster elections count (`roster list|remove`) and the cluster-wide settings
(`config show|set`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from apollo11.scheduler.cli._shared import AsJson, Grid, fail, out, print_json, run

RosterEtcd = Annotated[
    str | None,
    typer.Option("--etcd", envvar="APOLLO11_ETCD", help="etcd URLs, comma-separated."),
]
RosterCluster = Annotated[
    str | None, typer.Option("--cluster", envvar="APOLLO11_CLUSTER", help="Cluster name.")
]
RosterConfig = Annotated[
    Path | None, typer.Option("--config", help="A node's TOML config (for etcd's settings).")
]


def _roster_lease(config: Path | None, etcd: str | None, cluster: str | None) -> Any:
    """The cluster's etcd, as its nodes reach it (their APOLLO11_ETCD_* security too)."""
    from apollo11.lease import EtcdLease
    from apollo11.scheduler.config import load_settings

    try:
        # (no data directory is read: any will do for the settings to be whole)
        s = load_settings(config, etcd=etcd, cluster=cluster, data_dir=Path("."))
    except ValueError as e:
        raise fail(str(e), 2) from e
    if not s.etcd:
        raise fail("--etcd: the roster lives in etcd; give its URLs (or APOLLO11_ETCD)", 2)
    return EtcdLease(s.etcd, cluster=s.cluster, ttl_s=s.lease_ttl, **s.etcd_security())


def _etcd_world(config: Path | None, etcd: str | None, cluster: str | None) -> Any:
    """The cluster as its etcd holds it (roster, members, settings): one read."""

    async def go() -> Any:
        lease = _roster_lease(config, etcd, cluster)
        try:
            return await lease.world()
        finally:
            await lease.close()

    return run(go())


def roster_list(
    etcd: RosterEtcd = None,
    cluster: RosterCluster = None,
    config: RosterConfig = None,
    as_json: AsJson = False,
) -> None:
    """Every member on the roster, live or down, and its position when live."""

    world = _etcd_world(config, etcd, cluster)
    rows = []
    for node_id in sorted(world.roster | set(world.members)):
        m = world.members.get(node_id)
        rows.append(
            {
                "node_id": node_id,
                "live": m is not None,
                "role": m.role if m else "",
                "position": list(m.position) if m else None,
                "on_roster": node_id in world.roster,
            }
        )
    if as_json:
        print_json(rows)
        return
    table = Grid("member", "live", "role", "position (term, event)")
    for r in rows:
        pos = r["position"]
        table.add_row(
            str(r["node_id"]),
            "yes" if r["live"] else "no",
            str(r["role"]),
            f"({pos[0]}, {pos[1]})" if pos else "",
        )
    table.show()


def roster_remove(
    node: Annotated[str, typer.Argument(help="The member gone for good.")],
    etcd: RosterEtcd = None,
    cluster: RosterCluster = None,
    config: RosterConfig = None,
) -> None:
    """Take a member gone for good off the roster: elections stop waiting for it.

    Only for a member that will not come back with its data: one that does, while
    the others elected without it, may hold acknowledged writes they lack."""

    async def go() -> tuple[bool, int]:
        lease = _roster_lease(config, etcd, cluster)
        try:
            removed = await lease.unregister(node)
            return removed, len((await lease.world()).roster)
        finally:
            await lease.close()

    removed, left = run(go())  # a live member is refused, saying so
    if not removed:
        raise fail(f"{node} is not on the roster", 2)
    out.print(f"removed {node} from the roster: elections now count {left} member(s)")


def config_show(
    etcd: RosterEtcd = None,
    cluster: RosterCluster = None,
    config: RosterConfig = None,
    as_json: AsJson = False,
) -> None:
    """The cluster-wide settings every node follows (the first node's flags, until set)."""

    world = _etcd_world(config, etcd, cluster)
    if world.config is None:
        raise fail("no cluster settings in etcd yet: the first node to start writes its own", 1)
    if as_json:
        print_json(dict(world.config))
        return
    for key, value in sorted(world.config.items()):
        out.print(f"{key} = {value}", markup=False)


def config_set(
    key: Annotated[str, typer.Argument(help="lease_ttl, sync_replicas or sync_mode.")],
    value: Annotated[str, typer.Argument(help="Its new value.")],
    etcd: RosterEtcd = None,
    cluster: RosterCluster = None,
    config: RosterConfig = None,
) -> None:
    """Change a cluster-wide setting: every node follows it within a second
    (sync_replicas and sync_mode at once; lease_ttl from each node's next lease: the
    primary's applies at the next election, `apollo11 switchover` makes one now)."""
    from apollo11.lease import ClusterConfig

    async def go() -> tuple[Any, Any]:
        lease = _roster_lease(config, etcd, cluster)
        try:
            for _ in range(5):  # another change between our read and our write: again
                world = await lease.world()
                if world.config is None:
                    raise fail("no cluster settings in etcd yet: start a node first", 1)
                old = ClusterConfig.of(world.config, ClusterConfig())
                try:
                    new = old.with_value(key, value)
                except ValueError as e:
                    raise fail(str(e), 2) from e
                if await lease.write_config(new.to_json(), expect=world.config_revision):
                    return old, new
            raise fail("the cluster settings kept changing under this command: try again", 1)
        finally:
            await lease.close()

    old, new = run(go())
    out.print(f"{key}: {getattr(old, key)} -> {getattr(new, key)}", markup=False)
