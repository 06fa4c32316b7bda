"""TLS material: reading PEM files and making gRPC credentials from them.

Two trust domains, kept apart on purpose:
* the public port (clients): the node's server certificate, and, with a client
  CA, client certificates mapped to principals by name;
* the peer port (nodes): the cluster CA on both sides of every replication
  stream. A standby verifies that the primary's certificate names the node id
  the lease says is primary, and the primary that a standby's names the node id
  it says hello with, so one node's certificate cannot stand in for another's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc


def read_pem(path: Path, flag: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ValueError(f"{flag} {path}: {e.strerror}") from None
    if b"-----BEGIN " not in data:
        raise ValueError(f"{flag} {path}: not a PEM file")
    return data


@dataclass(frozen=True, slots=True)
class KeyPair:
    cert: bytes
    key: bytes

    @classmethod
    def load(cls, cert: Path, key: Path, flag: str) -> KeyPair:
        return cls(read_pem(cert, f"{flag}-cert"), read_pem(key, f"{flag}-key"))


def server_credentials(pair: KeyPair, client_ca: bytes | None = None) -> grpc.ServerCredentials:
    """With `client_ca`, every client must present a certificate that CA signed (gRPC
    cannot ask for one and accept its absence on the same port)."""
    return grpc.ssl_server_credentials(
        [(pair.key, pair.cert)],
        root_certificates=client_ca,
        require_client_auth=client_ca is not None,
    )


def channel_credentials(ca: bytes | None, pair: KeyPair | None = None) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=ca,
        private_key=None if pair is None else pair.key,
        certificate_chain=None if pair is None else pair.cert,
    )


def peer_name(context: Any) -> str | None:
    """The common name of the verified certificate the caller presented, if any."""
    values = context.auth_context().get("x509_common_name")
    return bytes(values[0]).decode(errors="replace") if values else None
