"""ReadRecords: a range of whole durable records, from any member of the cluster.

What a node needs to mend a sealed segment the scrub found damaged
(scheduler/mend.py): the records are the primary's bytes on every member (a
standby appends what it is shipped, byte for byte), so any member whose log
holds the range can give the exact bytes back. A primary asks a standby, a
standby asks the primary or another standby. Only nodes may call it (the
peer certificate's role, scheduler/security/roles.py), and only nodes of the
same cluster are answered.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import grpc

from apollo11.replicator.channel import peer_channel
from apollo11.scheduler.errors import ApolloError, LogError
from apollo11.scheduler.log import check_record
from apollo11.v1 import replication_pb2 as rpb
from apollo11.v1 import replication_pb2_grpc as rpbg

if TYPE_CHECKING:
    from apollo11.replicator.ports import Member

CHUNK_BYTES = 1 << 20  # records per message, about
FETCH_TIMEOUT_S = 60.0


async def serve(
    node: Member, request: rpb.ReadRecordsRequest, context: grpc.aio.ServicerContext
) -> AsyncIterator[rpb.Records]:
    first, last = request.first_event_id, request.last_event_id
    if request.cluster_id and node.cluster_id and request.cluster_id != node.cluster_id:
        await context.abort(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"the caller belongs to cluster {request.cluster_id}, this node "
            f"({node.settings.node_id}) to cluster {node.cluster_id}",
        )
    if first < 1 or last < first:
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"first_event_id must be at least 1 and last_event_id at least first_event_id, "
            f"got {first}..{last}",
        )
    store = node.store
    if store is None:
        await context.abort(grpc.StatusCode.UNAVAILABLE, "this node's log is being reopened")
    assert store is not None
    log_ = store.log
    if first < log_.first_id or last > log_.durable_id:
        await context.abort(
            grpc.StatusCode.OUT_OF_RANGE,
            f"{node.settings.node_id} holds events {log_.first_id}..{log_.durable_id}, "
            f"not all of {first}..{last}",
        )
    pos = first
    while pos <= last:
        try:
            batch = log_.read_raw(pos, CHUNK_BYTES)
        except LogError as e:  # its own copy is damaged there, or was dropped meanwhile
            await context.abort(grpc.StatusCode.DATA_LOSS, f"{node.settings.node_id}: {e}")
            return
        data, end_id = _trim(batch.data, pos, batch.last_id, last)
        if not data:
            await context.abort(
                grpc.StatusCode.OUT_OF_RANGE, f"{node.settings.node_id} no longer holds {pos}"
            )
        yield rpb.Records(first_event_id=pos, last_event_id=end_id, records=data)
        pos = end_id + 1


def _trim(data: bytes, first_id: int, last_id: int, want_last: int) -> tuple[bytes, int]:
    """The records of `data` (first_id..last_id) up to `want_last`."""
    if last_id <= want_last:
        return data, last_id
    off, eid = 0, first_id
    while eid <= want_last:
        info = check_record(data, off, "records")
        assert info is not None  # read_raw returned whole records only
        off, eid = info.end, eid + 1
    return data[:off], want_last


async def fetch(node: Member, address: str, peer_id: str, first: int, last: int) -> bytes:
    """Events first..last from the member at `address`, whole records concatenated."""
    out: list[bytes] = []
    expect = first
    async with peer_channel(node.settings, address, peer_id) as channel:
        call = rpbg.ReplicationStub(channel).ReadRecords(
            rpb.ReadRecordsRequest(
                first_event_id=first, last_event_id=last, cluster_id=node.cluster_id
            ),
            timeout=FETCH_TIMEOUT_S,
        )
        async for chunk in call:
            if chunk.first_event_id != expect or chunk.last_event_id < chunk.first_event_id:
                raise ApolloError(
                    f"{peer_id} sent events {chunk.first_event_id}..{chunk.last_event_id}, "
                    f"expected them from {expect}"
                )
            out.append(chunk.records)
            expect = chunk.last_event_id + 1
    if expect != last + 1:
        raise ApolloError(f"{peer_id} sent events {first}..{expect - 1} of {first}..{last}")
    return b"".join(out)
