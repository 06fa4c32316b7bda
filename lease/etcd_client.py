"""How the lease connects to etcd: plain or TLS, with or without a user and password.

aetcd 1.0 opens only insecure channels: `Client.connect` creates the channel
with `grpc.aio.insecure_channel` and then, on that channel, authenticates and
builds the stubs. `TlsClient` overrides `connect` alone, with the same steps on
`grpc.aio.secure_channel`; every request method stays aetcd's.

User/password auth is etcd's Auth API: `Authenticate(name, password)` returns a
token, and aetcd sends it as the `token` metadata of every request (each
method passes `metadata=self.metadata`), which grpc carries the same on a TLS
channel. A token can stop being valid (a JWT expires; simple tokens are lost when
the etcd member restarts): etcd then answers UNAUTHENTICATED, and a new
connection authenticates again (EtcdLease does that once per request).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import aetcd
import aetcd.exceptions
import grpc
from aetcd import rpc, watcher


@dataclass(frozen=True, slots=True)
class EtcdCredentials:
    """What the lease presents to etcd. `tls` without `ca` trusts grpc's default roots."""

    username: str | None = None
    password: str | None = field(default=None, repr=False)  # never in a log line
    tls: bool = False
    ca: bytes | None = field(default=None, repr=False)
    cert: bytes | None = field(default=None, repr=False)
    key: bytes | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if (self.username is None) != (self.password is None):
            raise ValueError("etcd authentication needs both a user name and a password")
        if (self.cert is None) != (self.key is None):
            raise ValueError("an etcd client certificate needs its key, and a key its certificate")
        if not self.tls and (self.ca or self.cert):
            raise ValueError("a CA or client certificate for etcd needs TLS (https:// endpoints)")

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca, private_key=self.key, certificate_chain=self.cert
        )


def make_client(host: str, port: int, creds: EtcdCredentials, timeout: float) -> aetcd.Client:
    kw: dict[str, Any] = {
        "host": host,
        "port": port,
        "username": creds.username,
        "password": creds.password,
        "timeout": timeout,
    }
    if creds.tls:
        return TlsClient(credentials=creds.channel_credentials(), **kw)
    return aetcd.Client(**kw)


class TlsClient(aetcd.Client):  # type: ignore[misc]  # aetcd is untyped
    """aetcd's client on a TLS channel (see the module docstring)."""

    _is_connecting: bool  # aetcd's, set in its __init__

    def __init__(self, *, credentials: grpc.ChannelCredentials, **kw: Any) -> None:
        super().__init__(**kw)
        self._credentials = credentials

    async def connect(self) -> None:
        # aetcd 1.0.0's Client.connect, with secure_channel for insecure_channel.
        if self._connected.is_set():
            return
        if self._is_connecting:
            # another task is connecting this client: wait for it, as aetcd does
            await asyncio.wait_for(self._connected.wait(), self._connect_wait_timeout)
            return
        try:
            self._is_connecting = True
            target = f"{self._host}:{self._port}"
            self.channel = grpc.aio.secure_channel(
                target, self._credentials, options=list(self._options.items())
            )
            if self._username is not None and self._password is not None:
                self.auth_stub = rpc.AuthStub(self.channel)
                request = rpc.AuthenticateRequest(name=self._username, password=self._password)
                resp = await self.auth_stub.Authenticate(request, timeout=self._timeout)
                self.metadata = (("token", resp.token),)
            self.kvstub = rpc.KVStub(self.channel)
            self.clusterstub = rpc.ClusterStub(self.channel)
            self.leasestub = rpc.LeaseStub(self.channel)
            self.maintenancestub = rpc.MaintenanceStub(self.channel)
            self._watcher = watcher.Watcher(
                rpc.WatchStub(self.channel), timeout=self._timeout, metadata=self.metadata
            )
            self._connected.set()
        except grpc.aio.AioRpcError as e:
            # the same mapping to aetcd's errors that its own connect applies
            aetcd.exceptions._handle_exception(e)
        finally:
            self._is_connecting = False


def explain_refusal(e: BaseException) -> str | None:
    """What to tell an operator when etcd refused us (rather than did not answer)."""
    text = str(e)
    low = text.lower()
    if "authentication failed" in low:
        return (
            f"authentication failed: etcd refused the user name or password ({text}); "
            "check --etcd-user and --etcd-password-file (or APOLLO11_ETCD_PASSWORD)"
        )
    if "user name is empty" in low:
        return (
            f"etcd requires authentication ({text}): give --etcd-user and "
            "--etcd-password-file (or APOLLO11_ETCD_PASSWORD)"
        )
    if "permission denied" in low:
        return (
            f"{text}: the etcd user needs a role with readwrite on the /apollo11/ prefix "
            "(etcdctl role grant-permission ROLE --prefix=true readwrite /apollo11/)"
        )
    if "handshake failed" in low:
        if "bad_certificate" in low or "certificate_required" in low:
            why = (
                "etcd rejected this node's client certificate (none given, or not signed "
                "by a CA etcd trusts): check --etcd-cert and --etcd-key"
            )
        elif "certificate_verify_failed" in low:
            why = (
                "etcd's server certificate is not trusted or does not name the endpoint's "
                "host: check --etcd-ca and the certificate's names"
            )
        else:
            why = "is the endpoint's scheme (https:// or http://) the one etcd serves?"
        return f"TLS handshake failed: {why} ({text})"
    return None
