"""What one peer of the gRPC server may cost the node, and a client keepalive that fits.

Anyone who can reach the port can open connections, streams and pings, so each
is bounded: a node-wide count of open WatchTask streams (each holds a queue fed
by every durable batch of its task, `max_watch_streams`), streams per HTTP/2
connection (`max_streams_per_connection`: further calls wait in the client
until one ends), the size of one received message (`max_message_bytes`), and
keepalive both ways:

* the server pings a quiet connection that has calls open every
  KEEPALIVE_TIME_MS and drops it if the ping is not answered within
  KEEPALIVE_TIMEOUT_MS, so a client that vanished without a FIN (power cut,
  partition) gives its WatchTask slots back within about 80 s, not
  after TCP's retransmission timeout (~15 minutes);
* a client may ping at most once every MIN_PING_INTERVAL_MS while the server
  sends it nothing; past MAX_PING_STRIKES faster pings the server answers GOAWAY
  (ENHANCE_YOUR_CALM, "too_many_pings") and closes the connection. gRPC's default
  interval is 5 minutes: too long for a client to notice a dead primary;
* a connection without calls for MAX_CONNECTION_IDLE_MS is closed (GOAWAY):
  clients reconnect on their next call, abandoned connections stop holding a
  file descriptor;
* a connection that has not finished its TLS handshake and sent its HTTP/2
  preface within HANDSHAKE_TIMEOUT_MS is closed (gRPC's default is 120 s): the
  red team ran a node out of file descriptors with idle connections that never
  sent a byte;
* at most `max_connections` connections at once (`peer_max_connections` on the
  peer port): 5,000 idle ones held 5,026 descriptors for those 10 s. gRPC has no
  limit per source address, so a flood can fill the port for HANDSHAKE_TIMEOUT_MS
  at a time; connections already open keep working (issue 28).

No maximum connection age: it would cut replication and watch streams, which
live as long as the connection does.

The Python client (`apollo11.scheduler.client`'s CLIENT_OPTIONS) pings every 30 s, only
while it has calls open, so that a watch on a primary that went away fails over
instead of waiting forever; that is well within what the server permits (a
test checks). The standby's replication channel needs no keepalive: the primary
sends at least a heartbeat every 0.5 s and the standby acknowledges each.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from apollo11.scheduler.errors import ResourceExhaustedError

if TYPE_CHECKING:
    from apollo11.scheduler.config import NodeSettings

KEEPALIVE_TIME_MS = 60_000
KEEPALIVE_TIMEOUT_MS = 20_000
MIN_PING_INTERVAL_MS = 10_000
MAX_PING_STRIKES = 2
MAX_CONNECTION_IDLE_MS = 10 * 60_000
HANDSHAKE_TIMEOUT_MS = 10_000


def server_options(settings: NodeSettings, max_connections: int) -> list[tuple[str, int]]:
    return [
        # past it gRPC core closes a new connection at once (its ConnectionQuota)
        ("grpc.max_allowed_incoming_connections", max_connections),
        ("grpc.max_receive_message_length", settings.max_message_bytes),
        ("grpc.max_concurrent_streams", settings.max_streams_per_connection),
        ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
        # as for the client: keep pinging a quiet watch, or a dead peer holds its slot
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.http2.min_ping_interval_without_data_ms", MIN_PING_INTERVAL_MS),
        ("grpc.http2.max_ping_strikes", MAX_PING_STRIKES),
        ("grpc.max_connection_idle_ms", MAX_CONNECTION_IDLE_MS),
        ("grpc.server_handshake_timeout_ms", HANDSHAKE_TIMEOUT_MS),
    ]


class WatchSlots:
    """The node's open WatchTask streams, at most `limit` (setting max_watch_streams)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0

    def take(self) -> None:
        if self.open >= self.limit:
            raise ResourceExhaustedError(
                f"this node already serves {self.open} WatchTask streams, its limit "
                f"(max_watch_streams = {self.limit}): retry later, poll GetTask, or "
                f"raise max_watch_streams"
            )
        self.open += 1

    def give_back(self) -> None:
        self.open -= 1


class Admission:
    """What a submission must pass on the primary: at most `max_pending` tasks waiting
    for their commit, at most `max_tasks` tasks in memory. Counting is O(1) a call.

    Tasks waiting for their commit count against `max_tasks` too: they are in memory
    once committed, and a flood with a thousand calls in flight took a node 1,018
    tasks past the limit (up to `max_pending` could pass it)."""

    RETRY_AFTER_MS = 200  # long enough for a group commit or two to drain

    def __init__(self, max_pending: int, max_tasks: int, tasks_in_memory: Callable[[], int]):
        self.max_pending = max_pending
        self.max_tasks = max_tasks
        self.tasks_in_memory = tasks_in_memory
        self.pending = 0

    @contextlib.contextmanager
    def admit(self, n: int) -> Iterator[None]:
        if self.pending + n > self.max_pending and self.pending:
            raise ResourceExhaustedError(
                f"this node has {self.pending} submissions waiting for their commit "
                f"(max_pending_writes = {self.max_pending}): retry after "
                f"{self.RETRY_AFTER_MS} ms, with the same idempotency key",
                retry_after_ms=self.RETRY_AFTER_MS,
            )
        held = self.tasks_in_memory() + self.pending
        if held + n > self.max_tasks:
            raise ResourceExhaustedError(
                f"this node holds {held} tasks in memory or about to be (max_tasks_in_memory = "
                f"{self.max_tasks}): new tasks wait until running ones finish; retry "
                f"after a few seconds, with the same idempotency key",
                retry_after_ms=10 * self.RETRY_AFTER_MS,
            )
        self.pending += n
        try:
            yield
        finally:
            self.pending -= n
