"""The open-files budget: connections get what the node's own files leave.

A node past its open-files limit fails everything at once: the log cannot open
its next segment, a snapshot cannot be written, etcd and the standbys cannot be
reached (issue 28: two clients held 19,215 of 20,000 descriptors with idle
connections). So a reserve is kept for the node's own files, and the three
ports' connection caps (`max_connections`, `peer_max_connections`,
`http_max_connections`) must fit in what is left; where they do not (a low
hard limit), they are scaled down together and the node says so at start.

The reserve: RESERVE_BASE for the log's segments and manifest, snapshots, the
archive, etcd's connection, gRPC's own pipes and the process's standard files;
PER_STEP_SLOT for each step slot of this node (a step's subprocess: three pipes
and a pidfd), unless steps run only on workers.
"""

from __future__ import annotations

from collections.abc import Mapping

from apollo11.scheduler.config import NodeSettings

RESERVE_BASE = 256
PER_STEP_SLOT = 4

CAPS = ("max_connections", "peer_max_connections", "http_max_connections")


def reserve(settings: NodeSettings) -> int:
    slots = 0 if settings.execution == "remote" else settings.concurrency
    return RESERVE_BASE + PER_STEP_SLOT * slots


def fit(limit: int, reserved: int, caps: Mapping[str, int]) -> dict[str, int]:
    """The caps scaled down together (each at least 1) so that their sum leaves
    `reserved` of `limit` descriptors; unchanged when they fit."""
    room = limit - reserved
    want = sum(caps.values())
    if want <= room:
        return dict(caps)
    scale = max(room, 0) / want
    return {name: max(1, int(cap * scale)) for name, cap in caps.items()}


def fit_settings(settings: NodeSettings, limit: int) -> tuple[NodeSettings, str | None]:
    """`settings` with its connection caps fitted to `limit` open files, and the
    warning to log when they had to shrink."""
    caps = {name: int(getattr(settings, name)) for name in CAPS}
    if settings.peer_listen is None:
        del caps["peer_max_connections"]  # no peer port
    if settings.http is None:
        del caps["http_max_connections"]
    reserved = reserve(settings)
    fitted = fit(limit, reserved, caps)
    if fitted == caps:
        return settings, None
    said = ", ".join(f"{name} {caps[name]} -> {fitted[name]}" for name in caps)
    why = (
        f"the open files limit ({limit}) leaves {limit - reserved} descriptors for "
        f"connections after the {reserved} kept for the node's own files: {said} "
        f"(raise the hard limit, e.g. `ulimit -Hn` or the container's nofile)"
    )
    return settings.model_copy(update=fitted), why
