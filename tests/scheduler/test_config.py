from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.config import load_settings


def test_environment_lists_are_comma_separated(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("APOLLO11_WORKFLOWS", "scheduler.examples,mypkg.flows")
    monkeypatch.setenv("APOLLO11_ETCD", "http://etcd1:2379,http://etcd2:2379")
    s = load_settings(data_dir=tmp_path)
    assert s.workflows == ["scheduler.examples", "mypkg.flows"]
    assert s.etcd == ["http://etcd1:2379", "http://etcd2:2379"]
    assert not s.standalone


def test_flags_beat_environment_beats_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cfg = tmp_path / "node.toml"
    cfg.write_text('node_id = "from-file"\nlease_ttl = 7\ncluster = "filecluster"\n')
    monkeypatch.setenv("APOLLO11_LEASE_TTL", "9")
    s = load_settings(cfg, data_dir=tmp_path, node_id="from-flag")
    assert (s.node_id, s.lease_ttl, s.cluster) == ("from-flag", 9.0, "filecluster")


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        ({"lease_ttl": 1.0}, "--lease-ttl (APOLLO11_LEASE_TTL): lease_ttl must be at least 2"),
        ({"listen": "nowhere"}, "--listen"),
        ({"sync_replicas": -1}, "--sync-replicas"),
        ({"node_id": "bad id!"}, "node_id may use"),
    ],
)
def test_invalid_values_name_the_flag(
    tmp_path: Path, flags: dict[str, object], needle: str
) -> None:
    with pytest.raises(ValueError, match="invalid node settings") as exc:
        load_settings(data_dir=tmp_path, **flags)
    assert needle in str(exc.value)


def test_missing_config_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        load_settings(tmp_path / "nope.toml", data_dir=tmp_path)


def test_examples_dir_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert load_settings(data_dir=tmp_path).examples_dir is None
    monkeypatch.setenv("APOLLO11_EXAMPLES_DIR", str(tmp_path / "ledgers"))
    assert load_settings(data_dir=tmp_path).examples_dir == tmp_path / "ledgers"


def test_grpc_limits_default_and_are_checked(tmp_path: Path) -> None:
    s = load_settings(data_dir=tmp_path)
    assert (s.max_watch_streams, s.max_streams_per_connection, s.max_message_bytes) == (
        1000,
        100,
        16 * 1024 * 1024,
    )
    with pytest.raises(ValueError, match="--max-watch-streams"):
        load_settings(data_dir=tmp_path, max_watch_streams=0)
    with pytest.raises(ValueError, match="--max-streams-per-connection"):
        load_settings(data_dir=tmp_path, max_streams_per_connection=0)
    with pytest.raises(
        ValueError, match=r"--max-message-bytes .*at least submit_max_bytes \+ 65536 = 8454144"
    ):
        load_settings(
            data_dir=tmp_path, submit_max_bytes=8 * 1024 * 1024, max_message_bytes=8 << 20
        )
