"""Protected mode: a node reachable from other machines refuses to start open.

Like Redis's protected mode and etcd without --client-cert-auth: a node whose
ports listen beyond loopback must have TLS and authentication (and, in a
cluster, mutual TLS between nodes), or be told `--insecure`, which it then
says at start and in every `apollo11 status`. Loopback-only use (`apollo11
dev`, the quick start) needs no setup at all.
"""

from __future__ import annotations

import ipaddress

from apollo11.scheduler.config import NodeSettings


def is_loopback(hostport: str) -> bool:
    host = hostport.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name, "" or 0.0.0.0: reachable from elsewhere


def missing(s: NodeSettings) -> list[str]:
    """What a node exposed beyond loopback lacks; empty when it is closed or local."""
    out: list[str] = []
    public = [a for a in (s.listen, s.http) if a and not is_loopback(a)]
    if public:
        if s.tls_cert is None:
            out.append("TLS (--tls-cert, --tls-key)")
        if not s.authenticated:
            out.append("authentication (--tokens-file; `apollo11 token create` makes one)")
    replication = s.peer_listen or s.listen
    # A standalone node with --peer-listen serves the log there too: the same rule.
    serves_log = not s.standalone or s.peer_listen is not None
    if serves_log and not is_loopback(replication) and not s.peer_tls:
        out.append("mutual TLS between nodes (--peer-listen, --peer-ca, --peer-cert, --peer-key)")
    return out


def refusal(s: NodeSettings) -> str | None:
    """Why this node must not start as configured (None: it may)."""
    gaps = missing(s)
    if not gaps or s.insecure:
        return None
    exposed = [a for a in (s.listen, s.http, s.peer_listen) if a and not is_loopback(a)]
    return (
        f"refusing to start: this node listens beyond loopback ({', '.join(exposed)}) without "
        + "; ".join(gaps)
        + ". Add them, listen on 127.0.0.1, or pass --insecure to run open anyway"
    )


def describe(s: NodeSettings) -> str:
    """One line for the start-up log and `apollo11 status`."""
    if s.insecure and missing(s):
        return "INSECURE (--insecure): reachable without " + "; ".join(missing(s))
    parts = ["tls" if s.tls_cert else "plaintext (loopback)"]
    parts.append("tokens" if s.authenticated else "no authentication (loopback)")
    if s.client_ca:
        parts.append("client certificates")
    if not s.standalone:
        parts.append("peer mTLS" if s.peer_tls else "peers in plaintext (loopback)")
    parts.append("shell steps allowed" if s.allow_shell else "shell steps off")
    return ", ".join(parts)
