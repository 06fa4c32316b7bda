"""EtcdLease.wait_change on a real etcd: what changed since the last read wakes it."""

from __future__ import annotations

import time

import pytest

from apollo11.lease import MemberInfo
from apollo11.lease.etcd import EtcdLease
from apollo11.lease.local_etcd import LocalEtcd

pytestmark = pytest.mark.etcd

TTL = 60.0  # no record lapses (a change of its own) while a wait waits


async def test_a_change_between_the_read_and_the_first_wait_wakes_it(
    etcd_server: LocalEtcd, cluster_name: str
) -> None:
    # Before: the watch began when wait_change was first called, so a record put
    # between a leader's read and its idle wait was seen only at the wait's end: a
    # primary then refused `switchover --to` a standby it had not seen yet (a CI run).
    a = EtcdLease([etcd_server.url], cluster=cluster_name, ttl_s=TTL)
    b = EtcdLease([etcd_server.url], cluster=cluster_name, ttl_s=TTL)
    try:
        await a.world()
        await b.publish(MemberInfo("b", "standby", "b:1", 0, 1))
        began = time.monotonic()
        await a.wait_change(20)
        assert time.monotonic() - began < 10, "woken by the put, not by the timeout"
        # and the watch goes on from there: a later put wakes the next wait
        await b.publish(MemberInfo("b", "standby", "b:1", 5, 1))
        began = time.monotonic()
        await a.wait_change(20)
        assert time.monotonic() - began < 10
    finally:
        await a.close()
        await b.close()
