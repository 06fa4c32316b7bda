"""The addresses that made an authenticated call lately (scheduler/api/knownsources.py),
spared when the gRPC ports shed new connections."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address

from apollo11.scheduler.api.knownsources import KnownSources, parse_peer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_peer_string_gives_its_address() -> None:
    assert parse_peer("ipv4:10.0.0.7:5123") == IPv4Address("10.0.0.7")
    assert parse_peer("ipv6:[::1]:5123") == IPv6Address("::1")
    assert parse_peer("ipv6:[fe80::1%eth0]:5123") == IPv6Address("fe80::1")
    assert parse_peer("ipv6:[::ffff:10.1.2.3]:80") == IPv4Address("10.1.2.3"), "as its packets"
    assert parse_peer("unix:/tmp/sock") is None
    assert parse_peer("ipv4:not-an-address:1") is None
    assert parse_peer("") is None


def test_addresses_seen_within_the_ttl_are_known_and_then_forgotten() -> None:
    clock = Clock()
    known = KnownSources(clock=clock, ttl_s=60)
    known.note("ipv4:10.0.0.2:1")
    known.note("ipv6:[2001:db8::1]:1")
    known.note("ipv4:10.0.0.1:2")
    known.note("ipv4:10.0.0.2:3")  # the same address, another connection
    assert known.current() == (
        (IPv4Address("10.0.0.1"), IPv4Address("10.0.0.2")),
        (IPv6Address("2001:db8::1"),),
    )
    clock.now += 50
    known.note("ipv4:10.0.0.1:2")  # seen again: its hour starts again
    clock.now += 20
    assert known.current() == ((IPv4Address("10.0.0.1"),), ())
    clock.now += 61
    assert known.current() == ((), ())


def test_past_the_cap_the_least_recently_seen_goes() -> None:
    known = KnownSources(clock=Clock(), most=3)
    for last in (1, 2, 3, 1, 4):  # 1 seen again before 4 comes: 2 is the oldest
        known.note(f"ipv4:10.0.0.{last}:9")
    assert known.current()[0] == tuple(IPv4Address(f"10.0.0.{i}") for i in (1, 3, 4))


def test_a_peer_with_no_address_is_not_noted() -> None:
    known = KnownSources(clock=Clock())
    known.note("unix:/run/apollo11.sock")
    known.note("unix:/run/apollo11.sock")
    assert known.current() == ((), ())


def test_a_node_welcomes_strangers_after_it_starts_and_after_it_takes_over() -> None:
    clock = Clock()
    known = KnownSources(clock=clock, welcome_s=120)
    assert known.welcoming(), "just started: everyone is new to it"
    clock.now += 121
    assert not known.welcoming()
    known.welcome()  # took over
    clock.now += 119
    assert known.welcoming()
    clock.now += 2
    assert not known.welcoming()
    assert not KnownSources(clock=clock, welcome_s=0).welcoming(), "0: never"
