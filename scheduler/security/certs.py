"""X.509 CAs and leaf certificates (PEM bytes in, PEM bytes out), and the cluster's
set of them for `apollo11 certs create` (`make up` runs it once).

EC P-256 keys: generated in a millisecond, where RSA-2048 takes tens, and every
TLS stack in play (grpc's BoringSSL, Go's crypto/tls in etcd) accepts them.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _validity(builder: x509.CertificateBuilder, days: int) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    # a minute in the past: a clock a little behind must not find it not yet valid
    return builder.not_valid_before(now - datetime.timedelta(minutes=1)).not_valid_after(
        now + datetime.timedelta(days=days)
    )


def make_ca(name: str, *, days: int = 1) -> tuple[bytes, bytes]:
    """A self-signed CA: (key_pem, cert_pem)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        _validity(x509.CertificateBuilder(), days)
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _key_pem(key), cert.public_bytes(serialization.Encoding.PEM)


def make_leaf(
    ca_key_pem: bytes,
    ca_cert_pem: bytes,
    name: str,
    sans: list[str],
    *,
    client: bool,
    server: bool,
    days: int = 1,
) -> tuple[bytes, bytes]:
    """A certificate signed by the CA: (key_pem, cert_pem). A SAN that parses as an IP
    address is an IP SAN (127.0.0.1), anything else a DNS name."""
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    key = ec.generate_private_key(ec.SECP256R1())
    alt: list[x509.GeneralName] = []
    for san in sans:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(san)))
        except ValueError:
            alt.append(x509.DNSName(san))
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH] * client + [ExtendedKeyUsageOID.SERVER_AUTH] * server
    builder = (
        _validity(x509.CertificateBuilder(), days)
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if alt:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return _key_pem(key), cert.public_bytes(serialization.Encoding.PEM)


def create_cluster_certs(
    directory: Path, names: Sequence[str], *, sans: Sequence[str] = (), days: int = 825
) -> list[str]:
    """The cluster CA (once) and a certificate for each name that has none yet.

    Each certificate serves and authenticates (both key usages): a node presents
    the same one on its public port, on its peer port and to etcd. Its SANs are
    its name (the node id: standbys check it), localhost, 127.0.0.1 and `sans`.
    This CA signs nodes only: anything it signs may replicate the log, so client
    certificates come from another CA (--client-ca). Returns the files written.
    """
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    written: list[str] = []
    ca_key_path, ca_path = directory / "ca-key.pem", directory / "ca.pem"
    if not ca_path.exists():
        key, cert = make_ca("apollo11 cluster CA", days=days)
        _write(ca_key_path, key, 0o600)
        _write(ca_path, cert, 0o644)
        written += [str(ca_path)]
    ca_key, ca_cert = ca_key_path.read_bytes(), ca_path.read_bytes()
    for name in names:
        cert_path = directory / f"{name}.pem"
        if cert_path.exists():
            continue
        key, cert = make_leaf(
            ca_key,
            ca_cert,
            name,
            [name, "localhost", "127.0.0.1", *sans],
            client=True,
            server=True,
            days=days,
        )
        # Readable by the container user the node runs as (uid 10001): the directory
        # (0700, the operator's) is what keeps the keys private on the host.
        _write(directory / f"{name}-key.pem", key, 0o644)
        _write(cert_path, cert, 0o644)
        written.append(str(cert_path))
    return written


def _write(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
