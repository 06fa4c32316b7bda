"""The lease against an etcd that demands TLS client certificates or a password.

A refusal must be a LeaseUnavailable that says what was refused (the node logs
it every cycle), and it must come within the request timeout, never hang.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from apollo11.lease import LeaseUnavailable, MemberInfo
from apollo11.lease.etcd import EtcdLease, parse_endpoints
from apollo11.lease.local_etcd import LocalEtcd
from tests.tlsutil import make_ca, make_leaf

pytestmark = pytest.mark.etcd

TTL = 2.0
USER, PASSWORD = "apollo", "s3cret-pw"


@dataclass(frozen=True)
class Pki:
    dir: Path
    ca: bytes
    cert: bytes  # a client certificate signed by `ca`
    key: bytes
    other_cert: bytes  # a client certificate from another CA
    other_key: bytes

    def ctl_flags(self) -> list[str]:
        """etcdctl's TLS flags, to administer the etcd."""
        return [
            f"--cacert={self.dir / 'ca.pem'}",
            f"--cert={self.dir / 'client.pem'}",
            f"--key={self.dir / 'client-key.pem'}",
        ]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    ca_key, ca = make_ca("apollo11 test CA")
    server_key, server = make_leaf(
        ca_key, ca, "etcd", ["127.0.0.1", "localhost"], client=False, server=True
    )
    key, cert = make_leaf(ca_key, ca, "apollo-node", [], client=True, server=False)
    other_ca_key, other_ca = make_ca("someone else's CA")
    other_key, other = make_leaf(
        other_ca_key, other_ca, "apollo-node", [], client=True, server=False
    )
    files = {
        "ca.pem": ca,
        "server.pem": server,
        "server-key.pem": server_key,
        "client.pem": cert,
        "client-key.pem": key,
    }
    for name, pem in files.items():
        (d / name).write_bytes(pem)
    return Pki(d, ca, cert, key, other, other_key)


def start_tls_etcd(root: Path, pki: Pki) -> LocalEtcd:
    return LocalEtcd(
        root / "member",
        cert_file=pki.dir / "server.pem",
        key_file=pki.dir / "server-key.pem",
        client_ca_file=pki.dir / "ca.pem",
    ).start()


def enable_auth(etcd: LocalEtcd, *tls: str) -> None:
    """A root user (etcd wants one before auth is on) and a user that may use /apollo11/."""
    etcd.ctl(*tls, "user", "add", "root", "--new-user-password", "root-pw")
    etcd.ctl(*tls, "user", "add", USER, "--new-user-password", PASSWORD)
    etcd.ctl(*tls, "role", "add", "apollo11")
    etcd.ctl(
        *tls, "role", "grant-permission", "apollo11", "--prefix=true", "readwrite", "/apollo11/"
    )
    etcd.ctl(*tls, "user", "grant-role", USER, "apollo11")
    etcd.ctl(*tls, "auth", "enable")


@pytest.fixture(scope="module")
def tls_etcd(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[LocalEtcd]:
    server = start_tls_etcd(tmp_path_factory.mktemp("etcd-tls"), pki)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def auth_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalEtcd]:
    server = LocalEtcd(tmp_path_factory.mktemp("etcd-auth") / "member").start()
    enable_auth(server)
    yield server
    server.stop()


async def campaign_renew_publish(lease: EtcdLease) -> None:
    won = await lease.campaign("a", "a:1")
    assert won is not None and won.node_id == "a"
    assert await lease.renew()
    await lease.publish(MemberInfo("a", "primary", "a:1", 3, won.term))
    world = await lease.world()
    assert world.leader == won and set(world.members) == {"a"}
    await lease.resign()


async def refused(lease: EtcdLease, match: str) -> None:
    t0 = time.monotonic()
    with pytest.raises(LeaseUnavailable, match=match):
        await lease.campaign("a", "a:1")
    assert time.monotonic() - t0 < TTL, "a refusal must not hang past the request timeout"
    await lease.close()


# ------------------------------------------------------------------ TLS


async def test_client_certificate_from_the_trusted_ca_works(
    tls_etcd: LocalEtcd, pki: Pki, cluster_name: str
) -> None:
    assert tls_etcd.url.startswith("https://")
    lease = EtcdLease(
        [tls_etcd.url], cluster=cluster_name, ttl_s=TTL, ca=pki.ca, cert=pki.cert, key=pki.key
    )
    await campaign_renew_publish(lease)
    await lease.close()


async def test_without_a_client_certificate_etcd_refuses(
    tls_etcd: LocalEtcd, pki: Pki, cluster_name: str
) -> None:
    lease = EtcdLease([tls_etcd.url], cluster=cluster_name, ttl_s=TTL, ca=pki.ca)
    await refused(lease, "TLS handshake failed: etcd rejected this node's client certificate")


async def test_a_client_certificate_from_another_ca_is_refused(
    tls_etcd: LocalEtcd, pki: Pki, cluster_name: str
) -> None:
    lease = EtcdLease(
        [tls_etcd.url],
        cluster=cluster_name,
        ttl_s=TTL,
        ca=pki.ca,
        cert=pki.other_cert,
        key=pki.other_key,
    )
    await refused(lease, "etcd rejected this node's client certificate")


async def test_an_untrusted_server_certificate_is_refused(
    tls_etcd: LocalEtcd, pki: Pki, cluster_name: str
) -> None:
    # no CA given: grpc's default roots, which never signed the test CA
    lease = EtcdLease([tls_etcd.url], cluster=cluster_name, ttl_s=TTL, cert=pki.cert, key=pki.key)
    await refused(lease, "etcd's server certificate is not trusted")


async def test_plain_http_to_a_tls_etcd_does_not_hang(
    tls_etcd: LocalEtcd, cluster_name: str
) -> None:
    lease = EtcdLease([f"http://127.0.0.1:{tls_etcd.client_port}"], cluster=cluster_name, ttl_s=TTL)
    await refused(lease, "etcd")


# ------------------------------------------------------- user/password


async def test_the_right_password_works(auth_etcd: LocalEtcd, cluster_name: str) -> None:
    lease = EtcdLease(
        [auth_etcd.url], cluster=cluster_name, ttl_s=TTL, username=USER, password=PASSWORD
    )
    await campaign_renew_publish(lease)
    await lease.close()


async def test_a_wrong_password_is_an_authentication_failure(
    auth_etcd: LocalEtcd, cluster_name: str
) -> None:
    lease = EtcdLease(
        [auth_etcd.url], cluster=cluster_name, ttl_s=TTL, username=USER, password="wrong"
    )
    await refused(lease, "authentication failed")


async def test_no_credentials_on_an_etcd_with_auth_says_so(
    auth_etcd: LocalEtcd, cluster_name: str
) -> None:
    lease = EtcdLease([auth_etcd.url], cluster=cluster_name, ttl_s=TTL)
    await refused(lease, "etcd requires authentication")


async def test_a_token_etcd_forgot_is_replaced_without_failing_a_renewal(
    tmp_path: Path, cluster_name: str
) -> None:
    # etcd keeps simple tokens in memory: after a restart the one we hold is invalid.
    etcd = LocalEtcd(tmp_path / "member").start()
    try:
        enable_auth(etcd)
        lease = EtcdLease(
            [etcd.url], cluster=cluster_name, ttl_s=TTL, username=USER, password=PASSWORD
        )
        assert await lease.campaign("a", "a:1") is not None
        etcd.stop()
        etcd.start()
        assert await lease.renew(), "one renewal after the restart re-authenticates"
        await lease.close()
    finally:
        etcd.stop()


# ------------------------------------------------------------- endpoints


def test_https_means_tls_and_mixing_it_with_http_is_refused() -> None:
    assert parse_endpoints(["https://a:2379", "b:2380"]).tls
    assert not parse_endpoints(["http://a", "b:2380"]).tls
    assert parse_endpoints(["b:2380"], tls_files=True).tls
    with pytest.raises(ValueError, match="use https:// for every endpoint"):
        parse_endpoints(["https://a", "http://b"])
    with pytest.raises(ValueError, match="use https://"):
        parse_endpoints(["http://a"], tls_files=True)
    with pytest.raises(ValueError, match="scheme must be"):
        parse_endpoints(["grpcs://a:2379"])


def test_half_a_credential_is_refused() -> None:
    with pytest.raises(ValueError, match="both a user name and a password"):
        EtcdLease(["https://a"], cluster="x", ttl_s=TTL, username="u")
    with pytest.raises(ValueError, match="certificate needs its key"):
        EtcdLease(["https://a"], cluster="x", ttl_s=TTL, cert=b"pem")


# ------------------------------------------------------------------ a node


@pytest.mark.cluster
def test_a_node_with_the_etcd_flags_becomes_primary(tmp_path: Path, pki: Pki) -> None:
    from tests.cluster import Cluster

    # Both at once: https with client-cert auth, and etcd's user/password auth on top.
    etcd = start_tls_etcd(tmp_path / "etcd", pki)
    try:
        enable_auth(etcd, *pki.ctl_flags())
        password = tmp_path / "etcd-password"
        password.write_text(PASSWORD + "\n")
        flags = [
            "--etcd-ca",
            str(pki.dir / "ca.pem"),
            "--etcd-cert",
            str(pki.dir / "client.pem"),
            "--etcd-key",
            str(pki.dir / "client-key.pem"),
            "--etcd-user",
            USER,
            "--etcd-password-file",
            str(password),
        ]
        (tmp_path / "nodes").mkdir()
        c = Cluster.create(tmp_path / "nodes", etcd.url, "secure", 1, *flags)
        c.start()
        try:
            primary = c.primary(timeout=20)
            assert PASSWORD not in primary.log_text(), "the password is never logged"
        finally:
            c.stop()
    finally:
        etcd.stop()
