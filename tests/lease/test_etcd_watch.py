"""EtcdLease.wait_change on a real etcd: what changed since the last read wakes it."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from apollo11.lease import MemberInfo
from apollo11.lease.etcd import EtcdLease
from apollo11.lease.local_etcd import LocalEtcd
from apollo11.scheduler import cancelling
from tests.deaf import deaf_once

TTL = 60.0  # no record lapses (a change of its own) while a wait waits


@pytest.mark.etcd
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


async def test_a_cancellation_lost_inside_the_watch_still_ends_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # aetcd's calls are grpc.aio's, which can swallow a cancellation and return the
    # call's own outcome instead (scheduler/cancelling.py): the watch must not go on
    # after close() cancelled it, and close() must not wait for ever.
    calls = 0

    async def conn(self: EtcdLease) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(60)  # close() cancels the call in flight here ...
            raise ConnectionError("connection reset")  # ... and its outcome comes back
        await asyncio.sleep(60)  # a watch that went on

    monkeypatch.setattr(EtcdLease, "_conn", conn)
    lease = EtcdLease(["http://127.0.0.1:1"], cluster="x", ttl_s=TTL)
    await lease.wait_change(0.05)  # starts the watch
    await _closes(lease)
    assert calls == 1, "the watch tried again after it was cancelled"
    assert "cancelling it again" not in caplog.text


async def test_close_cancels_again_a_watch_that_runs_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(EtcdLease, "_watch", deaf_once)
    monkeypatch.setattr(cancelling, "CHECK_S", 0.05)
    lease = EtcdLease(["http://127.0.0.1:1"], cluster="x", ttl_s=TTL)
    await lease.wait_change(0.05)
    await _closes(lease)
    assert "the etcd watch runs on 0.05s after it was cancelled" in caplog.text


async def _closes(lease: EtcdLease) -> None:
    closing = asyncio.create_task(lease.close())
    done, _ = await asyncio.wait({closing}, timeout=30)
    if not done:
        closing.cancel()  # (its cancellation reaches the watch it waits for)
        with contextlib.suppress(asyncio.CancelledError):
            await closing
    assert done, "close() waits for the watch for ever"
