"""A channel from one node to another's peer port."""

from __future__ import annotations

import grpc

from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.security import KeyPair, channel_credentials, read_pem


def peer_channel(settings: NodeSettings, address: str, peer_id: str = "") -> grpc.aio.Channel:
    """Our certificate for the peer to check, and its certificate checked against the
    cluster CA and for the node id we expect there (a certificate of the cluster
    issued to another node does not pass). Plaintext only when the node has no peer
    certificate (a loopback or --insecure cluster)."""
    s = settings
    if s.peer_ca is None or s.peer_cert is None or s.peer_key is None:
        return grpc.aio.insecure_channel(address)
    creds = channel_credentials(
        read_pem(s.peer_ca, "--peer-ca"), KeyPair.load(s.peer_cert, s.peer_key, "--peer")
    )
    options = [("grpc.ssl_target_name_override", peer_id)] if peer_id else []
    return grpc.aio.secure_channel(address, creds, options=options)
