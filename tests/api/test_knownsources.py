"""The addresses that made an authenticated call lately (scheduler/api/knownsources.py),
spared when the gRPC ports shed new connections."""

from __future__ import annotations

import asyncio
from ipaddress import IPv4Address, IPv6Address

import grpc
from grpc import aio

from apollo11.scheduler.api.knownsources import LOOPBACK, KnownSources, parse_peer
from apollo11.scheduler.clock import FakeClock

V4_LOOP, V6_LOOP = LOOPBACK


def _call(known: KnownSources, peer: str) -> None:
    """A unary call from `peer`: begins and ends."""
    ended = known.begin(peer)
    assert ended is not None
    ended()


def test_a_peer_string_gives_its_address() -> None:
    assert parse_peer("ipv4:10.0.0.7:5123") == IPv4Address("10.0.0.7")
    assert parse_peer("ipv6:%5B::1%5D:5123") == IPv6Address("::1"), "as grpcio writes it"
    assert parse_peer("ipv6:[2001:db8::7]:5123") == IPv6Address("2001:db8::7")
    assert parse_peer("ipv6:%5Bfe80::1%25eth0%5D:5123") == IPv6Address("fe80::1")
    assert parse_peer("ipv6:%5B::ffff:10.1.2.3%5D:80") == IPv4Address("10.1.2.3"), "as on the wire"
    assert parse_peer("unix:/tmp/sock") is None
    assert parse_peer("ipv4:not-an-address:1") is None
    assert parse_peer("") is None


def test_the_peer_strings_grpc_gives_are_understood() -> None:
    """Before: grpcio's percent-encoded IPv6 peers ("ipv6:%5B::1%5D:PORT") were not
    parsed, and no IPv6 client was ever known."""

    async def peers() -> list[str]:
        seen: list[str] = []

        async def handle(request: bytes, context: aio.ServicerContext) -> bytes:
            seen.append(context.peer())
            return b""

        server = aio.server()
        method = {"M": grpc.unary_unary_rpc_method_handler(handle)}
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("t.T", method)])
        v4 = server.add_insecure_port("127.0.0.1:0")
        try:
            v6 = server.add_insecure_port("[::1]:0")
        except RuntimeError:
            v6 = 0  # no IPv6 loopback here
        await server.start()
        try:
            for target in [f"127.0.0.1:{v4}", *([f"[::1]:{v6}"] if v6 else [])]:
                async with aio.insecure_channel(target) as channel:
                    await channel.unary_unary("/t.T/M")(b"")
        finally:
            await server.stop(0)
        return seen

    seen = asyncio.run(peers())
    assert parse_peer(seen[0]) == V4_LOOP, seen
    if len(seen) > 1:
        assert parse_peer(seen[1]) == V6_LOOP, seen


def test_addresses_seen_within_the_ttl_are_known_and_then_forgotten() -> None:
    clock = FakeClock()
    known = KnownSources(clock=clock.now, ttl_s=60)
    _call(known, "ipv4:10.0.0.2:1")
    _call(known, "ipv6:%5B2001:db8::1%5D:1")
    _call(known, "ipv4:10.0.0.1:2")
    _call(known, "ipv4:10.0.0.2:3")  # the same address, another connection
    v4, v6 = known.current()
    assert v4 == (V4_LOOP, IPv4Address("10.0.0.2"), IPv4Address("10.0.0.1")), "latest first"
    assert v6 == (V6_LOOP, IPv6Address("2001:db8::1"))
    assert known.noted == 3, "the loopback ones are not counted"
    clock.advance(50)
    _call(known, "ipv4:10.0.0.1:2")  # seen again: its hour starts again
    clock.advance(20)
    assert known.current() == ((V4_LOOP, IPv4Address("10.0.0.1")), (V6_LOOP,))
    clock.advance(61)
    assert known.current() == ((V4_LOOP,), (V6_LOOP,))
    assert known.noted == 0


def test_an_address_with_a_call_open_stays_known_however_long_it_lasts() -> None:
    """Before: noted when a call began only, a worker's or a standby's one stream,
    open for days, made it a stranger again after the TTL."""
    clock = FakeClock()
    known = KnownSources(clock=clock.now, ttl_s=60)
    ended = known.begin("ipv4:10.0.0.9:7")
    assert ended is not None
    clock.advance(10 * 60)
    assert IPv4Address("10.0.0.9") in known.current()[0], "its stream is open"
    ended()
    clock.advance(59)
    assert IPv4Address("10.0.0.9") in known.current()[0], "its hour counts from the end"
    clock.advance(2)
    assert IPv4Address("10.0.0.9") not in known.current()[0]


def test_past_the_cap_the_least_recently_seen_without_a_call_open_goes() -> None:
    known = KnownSources(clock=FakeClock().now, most=3)
    streaming = known.begin("ipv4:10.0.0.1:9")  # the oldest, but open
    for last in (2, 3, 2, 4):  # 2 seen again before 4 comes: 3 is the oldest closed
        _call(known, f"ipv4:10.0.0.{last}:9")
    assert set(known.current()[0]) == {V4_LOOP, *(IPv4Address(f"10.0.0.{i}") for i in (1, 2, 4))}
    assert streaming is not None


def test_a_peer_with_no_address_is_not_noted() -> None:
    known = KnownSources(clock=FakeClock().now)
    assert known.begin("unix:/run/apollo11.sock") is None
    assert known.noted == 0


def test_a_node_welcomes_strangers_after_it_starts_and_after_it_takes_over() -> None:
    clock = FakeClock()
    known = KnownSources(clock=clock.now, welcome_s=120)
    assert known.welcoming(), "just started: everyone is new to it"
    clock.advance(121)
    assert not known.welcoming()
    known.welcome()  # took over
    clock.advance(119)
    assert known.welcoming()
    clock.advance(2)
    assert not known.welcoming()
    assert not KnownSources(clock=clock.now, welcome_s=0).welcoming(), "0: never"
