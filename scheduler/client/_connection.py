"""How the client reaches a node: endpoints, TLS, a token, channel options.

Each comes from an argument or else its APOLLO11_* variable, so the CLI, the
Python client and `apollo11 health` reach a cluster the same way.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import grpc

from apollo11.scheduler.errors import InvalidArgumentError

DEFAULT_SERVER = "127.0.0.1:7411"

# Keepalive while calls are open, so that a watch on a primary that went away fails
# over instead of waiting forever; well within what the server permits
# (scheduler/api/limits.py, and a test checks).
CLIENT_KEEPALIVE_TIME_MS = 30_000
CLIENT_KEEPALIVE_TIMEOUT_MS = 10_000
CLIENT_OPTIONS: list[tuple[str, int]] = [
    ("grpc.keepalive_time_ms", CLIENT_KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", CLIENT_KEEPALIVE_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 0),  # the server would count those as strikes
    # gRPC otherwise stops pinging after 2 pings without data: a quiet watch is the case
    ("grpc.http2.max_pings_without_data", 0),
]


def _read(path: str | Path | None, what: str) -> bytes | None:
    if path is None or str(path) == "":
        return None
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise InvalidArgumentError(f"{what} {path}: {e.strerror}") from None


def channel_credentials_for(
    ca: str | Path | None, cert: str | Path | None, key: str | Path | None, tls: bool | None
) -> grpc.ChannelCredentials | None:
    """TLS credentials from PEM files (or APOLLO11_CA, _CERT, _KEY, _TLS); None: plaintext."""
    ca = ca or os.environ.get("APOLLO11_CA")
    cert = cert or os.environ.get("APOLLO11_CERT")
    key = key or os.environ.get("APOLLO11_KEY")
    if tls is None:
        tls = os.environ.get("APOLLO11_TLS", "") not in ("", "0", "false")
    if not (ca or cert or tls):
        return None
    if bool(cert) != bool(key):
        raise InvalidArgumentError("a client certificate needs its key, and a key its certificate")
    # imported here: a plaintext command (loopback, `apollo11 dev`) never needs it, and
    # every command's start-up counts (docs/benchmarks.md, "CLI start-up")
    from apollo11.scheduler.security.tls import KeyPair, channel_credentials

    root = _read(ca, "--ca")
    cert_pem, key_pem = _read(cert, "--cert"), _read(key, "--key")
    pair = None if cert_pem is None or key_pem is None else KeyPair(cert=cert_pem, key=key_pem)
    return channel_credentials(root, pair)


def token_from_env() -> str | None:
    token = os.environ.get("APOLLO11_TOKEN")
    if token:
        return token.strip()
    path = os.environ.get("APOLLO11_TOKEN_FILE")
    if path:
        raw = _read(path, "APOLLO11_TOKEN_FILE")
        return None if raw is None else raw.decode().strip()
    return None


def endpoints_from(spec: str | Sequence[str] | None) -> list[str]:
    """`a:1,b:2`, a list, or APOLLO11_SERVER, or the default."""
    if spec is None:
        spec = os.environ.get("APOLLO11_SERVER", DEFAULT_SERVER)
    parts = spec.split(",") if isinstance(spec, str) else list(spec)
    eps = [p.strip() for p in parts if p.strip()]
    if not eps:
        raise InvalidArgumentError("no server given: use --server HOST:PORT or APOLLO11_SERVER")
    return eps
