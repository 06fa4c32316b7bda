"""The lease on etcd (v3 API, through aetcd).

Keys, under `/apollo11/<cluster>/`:

* `leader`: `{node_id, address, term}` under the primary's lease.
* `term`: the last term handed out, in decimal, with no lease (it outlives
  every primary). A campaign is one transaction: if `leader` does not exist
  and `term` is as the candidate read it (same mod revision, or still
  absent), create `leader` and set `term` to `max(min_term, term) + 1`. Why
  that keeps terms fencing tokens when etcd loses its data: lease/base.py.
  (Earlier versions took the term from the leader key's create revision,
  which restarts near 1 with a fresh etcd; a leader value without a `term`
  is read that way still.)
* `members/<node_id>`: `{node_id, role, address, last_event_id, last_term,
  known_term, instance, ...}` under that node's own lease. Written in a
  transaction that compares the key's lease with ours (or with none, for a key
  that must not exist yet): a record another process holds is never
  overwritten, it raises NodeIdTaken.
* `id`: the cluster id (hex), with no lease, created once (version 0 compare)
  by the first node that starts against an empty store; see scheduler/identity.py.

Every request carries a timeout of a third of the TTL: a hung etcd must
make a renewal fail in time for the primary to fence itself, not block it.
Several endpoints may be given; on a connection error the client moves to
the next one. `https://` endpoints (or a CA or client certificate) mean TLS,
and a user name and password mean etcd's own authentication: see etcd_client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlparse

import aetcd
import aetcd.exceptions
import aetcd.transactions
import orjson
from aetcd import rpc

from apollo11.lease.base import LeaderInfo, Lease, LeaseUnavailable, MemberInfo, NodeIdTaken, World
from apollo11.lease.etcd_client import EtcdCredentials, explain_refusal, make_client
from apollo11.scheduler.cancelling import end_if_cancelled, stop_task

log = logging.getLogger(__name__)

T = TypeVar("T")
PREFIX = "/apollo11"


@dataclass(frozen=True, slots=True)
class Endpoints:
    hosts: tuple[tuple[str, int], ...]
    tls: bool


def parse_endpoints(urls: Sequence[str], *, tls_files: bool = False) -> Endpoints:
    """`host:port`, `http://host:port` or `https://host:port`; TLS for https:// or when
    a CA or client certificate is given (`tls_files`). A bare host:port follows the
    files; an explicit http:// beside https:// or TLS files is refused, since it would
    silently send the password or the data in the clear."""
    hosts, schemes = [], set()
    for url in urls:
        u = urlparse(url if "://" in url else f"//{url}")
        if u.scheme not in ("", "http", "https"):
            raise ValueError(f"etcd endpoint {url!r}: the scheme must be http:// or https://")
        if not u.hostname:
            raise ValueError(f"etcd endpoint {url!r} is not a URL like http://host:2379")
        hosts.append((u.hostname, u.port or 2379))
        schemes.add(u.scheme)
    if not hosts:
        raise ValueError("at least one etcd endpoint is needed")
    tls = "https" in schemes or tls_files
    if tls and "http" in schemes:
        raise ValueError(
            "etcd endpoints mix http:// with TLS (https:// or a CA/client certificate): "
            "use https:// for every endpoint"
        )
    return Endpoints(tuple(hosts), tls)


class EtcdLease(Lease):
    """The lease on etcd. `username`/`password`: etcd's authentication; `ca` (PEM) to
    trust etcd's server certificate (default: grpc's bundled roots), `cert`/`key` (PEM)
    for client-certificate auth."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        cluster: str,
        ttl_s: float = 5.0,
        username: str | None = None,
        password: str | None = None,
        ca: bytes | None = None,
        cert: bytes | None = None,
        key: bytes | None = None,
    ) -> None:
        super().__init__(ttl_s=ttl_s)
        parsed = parse_endpoints(endpoints, tls_files=bool(ca or cert or key))
        self.endpoints = list(parsed.hosts)
        self._creds = EtcdCredentials(
            username=username, password=password, tls=parsed.tls, ca=ca, cert=cert, key=key
        )
        self.cluster = cluster
        self.root = f"{PREFIX}/{cluster}/"
        self.leader_key = (self.root + "leader").encode()
        self.term_key = (self.root + "term").encode()
        self.members_prefix = (self.root + "members/").encode()
        self.roster_prefix = (self.root + "roster/").encode()
        self.id_key = (self.root + "id").encode()
        self.config_key = (self.root + "config").encode()
        self._ep = 0
        self._client: aetcd.Client | None = None
        self._lease_id: int | None = None  # the leader lease, while we hold it
        self._member_lease_id: int | None = None
        self._member_key: bytes | None = None
        # etcd leases are whole seconds: round up, and fence on our own (float) TTL.
        self._etcd_ttl = math.ceil(ttl_s)
        self._timeout = max(0.5, ttl_s / 3)
        # a watch on the cluster's keys: wait_change() returns at its first event
        self._changed = asyncio.Event()
        self._watching: asyncio.Task[None] | None = None
        # the revision of the last world() read: a watch starts after it, so that a
        # change between that read and the watch is not missed
        self._read_revision = 0

    # ---------------------------------------------------------- plumbing

    async def _conn(self) -> aetcd.Client:
        if self._client is None:
            host, port = self.endpoints[self._ep % len(self.endpoints)]
            client = make_client(host, port, self._creds, self._timeout)
            try:
                await client.connect()
            except BaseException:
                # a refused authentication leaves aetcd's channel open: close it here
                await _close(client)
                raise
            self._client = client
        return self._client

    async def _reset(self, failed: aetcd.Client | None = None, *, move: bool = True) -> None:
        """Drop the connection (and move to the next endpoint) - unless another request
        already replaced the one that failed."""
        if failed is not None and self._client is not failed:
            return
        client, self._client = self._client, None
        if move:
            self._ep += 1
        if client is not None:
            await _close(client)

    async def _do(self, what: str, fn: Callable[[aetcd.Client], Awaitable[T]]) -> T:
        """Run one request, trying each endpoint once; LeaseUnavailable if none answers."""
        last: Exception | None = None
        reauthenticated = False
        attempt = 0
        while attempt < len(self.endpoints):
            attempt += 1
            client: aetcd.Client | None = None
            try:
                client = await self._conn()
                # A hard bound around the whole request, run as its own task so that a
                # timeout cancels the request, never the caller.
                return await asyncio.wait_for(fn(client), self._timeout * 1.5)
            except aetcd.exceptions.UnauthenticatedError as e:
                last = e
                # Our token is no longer valid (it expired, or etcd restarted and forgot
                # it): authenticate again on the same endpoint, once per request.
                retry = not reauthenticated and self._creds.username is not None
                await self._reset(client, move=not retry)
                if retry:
                    reauthenticated = True
                    attempt -= 1
            except (aetcd.exceptions.ClientError, OSError, TimeoutError) as e:
                last = e
                await self._reset(client)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # we are being cancelled: let it go
                # Another coroutine closed the shared connection under this request;
                # grpc.aio reports that as a cancellation. It is a connection failure.
                last = ConnectionError("the etcd connection was closed during the request")
                await self._reset(client)
        refusal = None if last is None else explain_refusal(last)
        if refusal is not None:
            raise LeaseUnavailable(f"etcd refused the request ({what}): {refusal}")
        raise LeaseUnavailable(f"etcd did not answer ({what}): {last}")

    # ------------------------------------------------------------ leader

    async def campaign(self, node_id: str, address: str, *, min_term: int = 0) -> LeaderInfo | None:
        async def go(c: aetcd.Client) -> LeaderInfo | None:
            tx = c.transactions
            stored = await c.get(self.term_key)
            if stored is None:
                term_as_read = tx.version(self.term_key) == 0
                term = min_term + 1
            else:
                term_as_read = tx.mod(self.term_key) == stored.mod_revision
                term = max(min_term, _term(stored.value)) + 1
            grant = await c.lease(self._etcd_ttl)
            value = orjson.dumps({"node_id": node_id, "address": address, "term": term})
            ok, _ = await c.transaction(
                compare=[tx.version(self.leader_key) == 0, term_as_read],
                success=[
                    tx.put(self.leader_key, value, lease=grant.id),
                    tx.put(self.term_key, str(term).encode()),
                ],
                failure=[],
            )
            if not ok:
                # the key is taken, or another campaign moved the term first
                with contextlib.suppress(Exception):
                    await c.revoke_lease(grant.id)
                return None
            self._lease_id = grant.id
            return LeaderInfo(node_id, address, term)

        return await self._do("campaign", go)

    async def renew(self) -> bool:
        lease_id = self._lease_id
        if lease_id is None:
            return False

        async def go(c: aetcd.Client) -> bool:
            reply = await c.refresh_lease(lease_id)
            if reply is None or reply.TTL <= 0:
                return False
            got = await c.get(self.leader_key)
            return got is not None and got.lease == lease_id

        alive = await self._do("renew", go)
        if not alive:
            self._lease_id = None  # a lapsed lease is never revived
        return alive

    async def resign(self) -> None:
        lease_id, self._lease_id = self._lease_id, None
        if lease_id is not None:
            await self._do("resign", lambda c: c.revoke_lease(lease_id))

    async def leader(self) -> LeaderInfo | None:
        got = await self._do("read leader", lambda c: c.get(self.leader_key))
        return None if got is None else _leader(got.value, got.create_revision)

    # ----------------------------------------------------------- members

    async def publish(self, member: MemberInfo) -> None:
        key = self.members_prefix + member.node_id.encode()
        value = orjson.dumps(
            {
                "node_id": member.node_id,
                "role": member.role,
                "address": member.address,
                "last_event_id": member.last_event_id,
                "last_term": member.last_term,
                "peer_address": member.peer_address,
                "shell": member.shell,
                "known_term": member.known_term,
                "instance": member.instance,
                "handover": member.handover,
            }
        )

        async def go(c: aetcd.Client) -> None:
            if self._member_lease_id is not None:
                reply = await c.refresh_lease(self._member_lease_id)
                if reply is None or reply.TTL <= 0:
                    self._member_lease_id = None
            if self._member_lease_id is None:
                self._member_lease_id = (await c.lease(self._etcd_ttl)).id
                expect = 0  # a new lease: the record must not exist (or be ours, below)
            else:
                expect = self._member_lease_id
            self._member_key = key
            ok, held = await self._put_if_lease(c, key, value, expect)
            if ok:
                return
            holder = _member(held[0][0]) if held else None
            if held and holder is not None and holder.instance == member.instance:
                # our own record, on a lease we no longer refresh (it lapsed as we
                # took a new one): ours to replace
                ok, held = await self._put_if_lease(c, key, value, held[0][1].lease)
                if ok:
                    return
                holder = _member(held[0][0]) if held else None
            raise NodeIdTaken(
                f"node id {member.node_id!r} is already live in cluster {self.cluster!r}: "
                f"another process "
                + (f"({holder.role} at {holder.address}) " if holder else "")
                + f"publishes its member record {key.decode()}",
                holder,
            )

        await self._do("publish member", go)

    async def wait_change(self, timeout_s: float) -> None:
        if self._watching is None or self._watching.done():
            self._watching = asyncio.create_task(self._watch(), name="apollo11-etcd-watch")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout_s)
        self._changed.clear()

    async def _watch(self) -> None:
        """Watch every key of the cluster (Patroni watches its leader key): each event
        wakes wait_change(). While the watch is down (etcd unreachable, a reconnect),
        wait_change() returns at once: the caller polls as it would without one."""
        prefix = self.root.encode()
        end = prefix[:-1] + bytes([prefix[-1] + 1])
        pause = 0.2
        while True:
            try:
                client = await self._conn()
                since = self._read_revision + 1 if self._read_revision else None
                async for _ in await client.watch(prefix, range_end=end, start_revision=since):
                    self._changed.set()
                    pause = 0.2
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the connection is the requests' to reset, not ours
                log.debug("etcd watch on %s ended: %s", prefix.decode(), e)
            end_if_cancelled()  # (aetcd's calls are grpc.aio's: one lost is not retried)
            self._changed.set()
            await asyncio.sleep(pause)
            pause = min(2.0, pause * 2)

    def set_ttl(self, ttl_s: float) -> None:
        super().set_ttl(ttl_s)
        self._etcd_ttl = math.ceil(self.ttl_s)
        self._timeout = max(0.5, self.ttl_s / 3)

    async def claim_config(self, proposed: Mapping[str, Any]) -> Mapping[str, Any]:
        async def go(c: aetcd.Client) -> Any:
            tx = c.transactions
            ok, got = await c.transaction(
                compare=[tx.version(self.config_key) == 0],
                success=[tx.put(self.config_key, orjson.dumps(dict(proposed)))],
                failure=[tx.get(self.config_key)],
            )
            return None if ok else got[0][0][0]

        stored = await self._do("claim cluster config", go)
        return dict(proposed) if stored is None else _config(stored) or dict(proposed)

    async def write_config(self, values: Mapping[str, Any], *, expect: int | None) -> bool:
        async def go(c: aetcd.Client) -> bool:
            tx = c.transactions
            compare = [] if expect is None else [tx.mod(self.config_key) == expect]
            ok, _ = await c.transaction(
                compare=compare,
                success=[tx.put(self.config_key, orjson.dumps(dict(values)))],
                failure=[],
            )
            return bool(ok)

        return await self._do("write cluster config", go)

    async def keep(self, member: MemberInfo) -> None:
        lease_id = self._member_lease_id
        if lease_id is None:
            await self.publish(member)
            return

        async def go(c: aetcd.Client) -> bool:
            reply = await c.refresh_lease(lease_id)
            return reply is not None and reply.TTL > 0

        if not await self._do("keep member", go):
            self._member_lease_id = None  # lapsed: the record went with it
            await self.publish(member)

    async def _put_if_lease(
        self, c: aetcd.Client, key: bytes, value: bytes, expect: int
    ) -> tuple[bool, Any]:
        """Put `key` on our member lease if its lease is `expect` (0: no key); else
        what the key holds."""
        tx = c.transactions
        ok, responses = await c.transaction(
            compare=[_LeaseIs(key) == expect],
            success=[tx.put(key, value, lease=self._member_lease_id)],
            failure=[tx.get(key)],
        )
        return bool(ok), None if ok else (responses[0] if responses else None)

    async def register(self, node_id: str) -> None:
        key = self.roster_prefix + node_id.encode()

        async def go(c: aetcd.Client) -> None:
            tx = c.transactions
            # put if absent: a roster entry is written once, not at every publish
            await c.transaction(
                compare=[tx.version(key) == 0], success=[tx.put(key, b"")], failure=[]
            )

        await self._do("register on the roster", go)

    async def unregister(self, node_id: str) -> bool:
        key = self.roster_prefix + node_id.encode()
        member = self.members_prefix + node_id.encode()

        async def go(c: aetcd.Client) -> tuple[bool, bool]:
            tx = c.transactions
            # only while no live record exists: a live member stays counted
            ok, responses = await c.transaction(
                compare=[tx.version(member) == 0],
                success=[tx.delete(key)],
                failure=[tx.get(member)],
            )
            if not ok:
                return False, True
            # aetcd hands back the ResponseOp of each operation
            op = responses[0] if responses else None
            deleted = op.response_delete_range.deleted if op is not None else 0
            return deleted > 0, False

        removed, live = await self._do("remove from the roster", go)
        if live:
            raise NodeIdTaken(f"member {node_id!r} is live: stop it before removing it")
        return removed

    async def claim_cluster_id(self, proposed: str) -> str:
        async def go(c: aetcd.Client) -> str:
            tx = c.transactions
            ok, responses = await c.transaction(
                compare=[tx.version(self.id_key) == 0],
                success=[tx.put(self.id_key, proposed.encode())],
                failure=[tx.get(self.id_key)],
            )
            if ok:
                return proposed
            return bytes(responses[0][0][0]).decode()

        return await self._do("claim the cluster id", go)

    async def member_lease_left(self, node_id: str) -> int | None:
        key = self.members_prefix + node_id.encode()

        async def go(c: aetcd.Client) -> int | None:
            got = await c.get(key)
            if got is None:
                return None
            # TTL is -1 for a lease already gone (the key goes with it), and a lease past
            # its end but not yet revoked reports 0: both are "lapsing"
            info = await c.get_lease_info(got.lease, keys=False)
            return max(0, int(info.TTL))

        return await self._do("read a member's lease", go)

    async def world(self) -> World:
        async def go(c: aetcd.Client) -> Any:
            return await c.get_prefix(self.root.encode())

        got = await self._do("read cluster", go)
        leader: LeaderInfo | None = None
        members: dict[str, MemberInfo] = {}
        revisions: dict[str, int] = {}
        term: int | None = None
        cluster_id: str | None = None
        roster: set[str] = set()
        config: dict[str, Any] | None = None
        config_revision = 0
        for kv in got:
            key, value = kv.key, kv.value
            if key == self.leader_key:
                leader = _leader(value, kv.create_revision)
            elif key == self.term_key:
                term = _term(value)
            elif key == self.id_key:
                cluster_id = value.decode(errors="replace")
            elif key == self.config_key:
                config, config_revision = _config(value), kv.mod_revision
            elif key.startswith(self.roster_prefix):
                roster.add(key[len(self.roster_prefix) :].decode(errors="replace"))
            elif key.startswith(self.members_prefix):
                m = _member(value)
                if m is None:
                    log.warning("ignoring a malformed member record %r", key)
                    continue
                members[m.node_id] = m
                revisions[m.node_id] = kv.mod_revision
        self._read_revision = got.header.revision
        return World(
            leader,
            members,
            got.header.revision,
            revisions,
            term,
            cluster_id,
            frozenset(roster),
            config,
            config_revision,
        )

    async def close(self) -> None:
        if self._watching is not None:
            await stop_task(self._watching, "the etcd watch")
            self._watching = None
        member_lease, self._member_lease_id = self._member_lease_id, None
        if member_lease is not None and self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.revoke_lease(member_lease)
        await self._reset()


async def _close(client: aetcd.Client) -> None:
    with contextlib.suppress(Exception, TimeoutError):
        async with asyncio.timeout(1.0):
            await client.close()


class _LeaseIs(aetcd.transactions.BaseCompare):  # type: ignore[misc]
    """Compare a key's lease id (0 for a key that does not exist); aetcd has no
    helper for etcd's LEASE compare target."""

    def __init__(self, key: bytes) -> None:
        super().__init__(key)

    def build_compare(self, compare: Any) -> None:
        compare.target = rpc.Compare.LEASE
        compare.lease = int(self.value)


def _config(value: bytes) -> dict[str, Any] | None:
    try:
        d = orjson.loads(value)
    except ValueError:
        log.warning("ignoring a malformed cluster config %r", value[:200])
        return None
    return d if isinstance(d, dict) else None


def _member(value: bytes) -> MemberInfo | None:
    try:
        d = orjson.loads(value)
        return MemberInfo(
            d["node_id"],
            d["role"],
            d["address"],
            int(d["last_event_id"]),
            int(d["last_term"]),
            str(d.get("peer_address") or ""),
            bool(d.get("shell", False)),
            int(d.get("known_term", 0)),
            str(d.get("instance") or ""),
            str(d.get("handover") or ""),
        )
    except (ValueError, KeyError, TypeError):
        return None


def _leader(value: bytes, create_revision: int) -> LeaderInfo | None:
    try:
        d = orjson.loads(value)
        # the term written with the key; a value from before the term key has none
        # (or the create revision, copied in): the create revision was its term then
        term = int(d.get("term") or create_revision)
        return LeaderInfo(str(d["node_id"]), str(d["address"]), term)
    except (ValueError, KeyError, TypeError, AttributeError):
        log.warning("the leader key holds something unreadable: %r", value[:100])
        return None


def _term(value: bytes) -> int:
    """The term key's value; 0 for something unreadable (the campaign's CAS still
    compares the key's revision, and min_term keeps the new term above the logs)."""
    try:
        return int(value)
    except ValueError:
        log.warning("the term key holds something unreadable: %r", value[:100])
        return 0
