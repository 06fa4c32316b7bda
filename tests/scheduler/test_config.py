from __future__ import annotations

from pathlib import Path

import pytest

from apollo11.scheduler.config import load_settings


def test_environment_lists_are_comma_separated(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("APOLLO11_WORKFLOWS", "apollo11.scheduler.examples,mypkg.flows")
    monkeypatch.setenv("APOLLO11_ETCD", "http://etcd1:2379,http://etcd2:2379")
    s = load_settings(data_dir=tmp_path)
    assert s.workflows == ["apollo11.scheduler.examples", "mypkg.flows"]
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


def test_etcd_password_file_wins_over_the_environment_and_is_never_shown(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("APOLLO11_ETCD_PASSWORD", "from-env")
    s = load_settings(data_dir=tmp_path, etcd_user="apollo")
    assert s.etcd_security()["password"] == "from-env"
    pw = tmp_path / "etcd-password"
    pw.write_text("from-file\n")
    s = load_settings(data_dir=tmp_path, etcd_user="apollo", etcd_password_file=pw)
    security = s.etcd_security()
    assert (security["username"], security["password"]) == ("apollo", "from-file")
    assert "from-env" not in repr(s) and "from-env" not in str(s.model_dump())


def test_etcd_tls_files_are_read(tmp_path: Path) -> None:
    for name in ("ca.pem", "cert.pem", "key.pem"):
        (tmp_path / name).write_bytes(name.encode())
    s = load_settings(
        data_dir=tmp_path,
        etcd_ca=tmp_path / "ca.pem",
        etcd_cert=tmp_path / "cert.pem",
        etcd_key=tmp_path / "key.pem",
    )
    security = s.etcd_security()
    assert (security["ca"], security["cert"], security["key"]) == (
        b"ca.pem",
        b"cert.pem",
        b"key.pem",
    )
    assert security["username"] is None and security["password"] is None


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        ({"etcd_ca": "missing.pem"}, "--etcd-ca (APOLLO11_ETCD_CA): file"),
        ({"etcd_password_file": "missing"}, "--etcd-password-file (APOLLO11_ETCD_PASSWORD_FILE)"),
        ({"etcd_cert": "cert.pem"}, "--etcd-key (APOLLO11_ETCD_KEY): --etcd-cert and --etcd-key"),
        ({"etcd_key": "cert.pem"}, "--etcd-cert and --etcd-key go together"),
        (
            {"etcd_user": "apollo"},
            "--etcd-user (APOLLO11_ETCD_USER): an etcd user needs a password",
        ),
        ({"etcd_password": "pw"}, "needs the user name it belongs to"),
    ],
)
def test_etcd_security_settings_are_checked(
    tmp_path: Path, flags: dict[str, str], needle: str
) -> None:
    (tmp_path / "cert.pem").write_text("pem")
    paths = ("etcd_ca", "etcd_cert", "etcd_key", "etcd_password_file")
    given = {k: tmp_path / v if k in paths else v for k, v in flags.items()}
    with pytest.raises(ValueError, match="invalid node settings") as exc:
        load_settings(data_dir=tmp_path, **given)
    assert needle in str(exc.value)


def test_examples_dir_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert load_settings(data_dir=tmp_path).examples_dir is None
    monkeypatch.setenv("APOLLO11_EXAMPLES_DIR", str(tmp_path / "ledgers"))
    assert load_settings(data_dir=tmp_path).examples_dir == tmp_path / "ledgers"


def test_grpc_limits_default_and_are_checked(tmp_path: Path) -> None:
    s = load_settings(data_dir=tmp_path)
    assert (s.max_watch_streams, s.max_streams_per_connection, s.max_message_bytes) == (
        1000,
        1000,
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


def test_the_retry_budget_is_a_node_setting_and_zero_turns_it_off(tmp_path: Path) -> None:
    from apollo11.scheduler.node.options import engine_options
    from apollo11.scheduler.retrypace import RetryBudget

    on = engine_options(load_settings(data_dir=tmp_path))["retry_budget"]
    assert on == RetryBudget()
    tuned = load_settings(data_dir=tmp_path, retry_budget=0.5, retry_budget_min=10)
    assert engine_options(tuned)["retry_budget"] == RetryBudget(min_per_s=10, share=0.5)
    off = load_settings(data_dir=tmp_path, retry_budget_min=0)
    assert engine_options(off)["retry_budget"] is None
