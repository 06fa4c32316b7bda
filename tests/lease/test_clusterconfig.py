"""The cluster-wide settings' values: what is taken, what is refused and how it says so."""

from __future__ import annotations

import pytest

from apollo11.lease.clusterconfig import ClusterConfig


def test_stored_values_over_the_defaults_and_unknown_keys_ignored() -> None:
    c = ClusterConfig.of({"sync_replicas": 2, "later_setting": 1}, ClusterConfig(3.0, 1, "strict"))
    assert c == ClusterConfig(3.0, 2, "strict")


@pytest.mark.parametrize(
    ("key", "raw", "error"),
    [
        ("lease_ttl", "1.5", "lease_ttl must be at least 2 s"),
        ("lease_ttl", "soon", "lease_ttl must be a number of seconds"),
        ("sync_replicas", "9", "sync_replicas must be 0 to 8"),
        ("sync_replicas", "1.5", "sync_replicas must be a whole number"),
        ("sync_replicas", True, "sync_replicas must be a whole number"),
        ("sync_mode", "eventually", "sync_mode must be one of strict, relaxed"),
        ("ttl", "3", "unknown cluster setting 'ttl'"),
    ],
)
def test_a_bad_value_is_refused_naming_the_setting(key: str, raw: object, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        ClusterConfig().with_value(key, raw)


def test_values_from_the_command_line() -> None:
    c = ClusterConfig().with_value("lease_ttl", "3").with_value("sync_replicas", " 0 ")
    assert c.with_value("sync_mode", "relaxed") == ClusterConfig(3.0, 0, "relaxed")
