"""Security: who may reach a node, who a caller is, and what each role may do.

roles.py        the roles, the principal, the method -> role and route -> role tables
tokens.py       the principals file (token hashes, certificate names), SIGHUP reload
interceptor.py  the one interceptor that authenticates and authorizes every RPC
tls.py          PEM files and gRPC credentials (public port, peer port)
certs.py        a cluster's CA and certificates (apollo11 certs create)
protect.py      protected mode: what a node refuses to start without
worker_names.py which worker names a principal may register under

The names below load their module on first use, not with the package: the
client makes its channel credentials with tls.py (which imports only grpc) and
must not load the server's interceptor and principals file along with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_HOME = {
    "ANONYMOUS": "roles",
    "APART": "roles",
    "LADDER": "roles",
    "LANDING": "roles",
    "METHOD_ROLES": "roles",
    "OPEN_METHODS": "roles",
    "OPEN_ROUTES": "roles",
    "ROUTE_ROLES": "roles",
    "Principal": "roles",
    "Role": "roles",
    "grants": "roles",
    "route_role": "roles",
    "AuthInterceptor": "interceptor",
    "Authenticator": "interceptor",
    "CallRefused": "interceptor",
    "authorize": "interceptor",
    "current_principal": "interceptor",
    "Principals": "tokens",
    "create_token": "tokens",
    "WorkerNameRefused": "worker_names",
    "worker_name": "worker_names",
    "KeyPair": "tls",
    "read_pem": "tls",
    "server_credentials": "tls",
    "channel_credentials": "tls",
    "create_cluster_certs": "certs",
    "list_tokens": "tokens:list_entries",
    "revoke_token": "tokens:revoke",
    "protection_refusal": "protect:refusal",
    "protection_missing": "protect:missing",
    "describe_protection": "protect:describe",
}

if TYPE_CHECKING:
    from apollo11.scheduler.security.certs import create_cluster_certs
    from apollo11.scheduler.security.interceptor import (
        Authenticator,
        AuthInterceptor,
        CallRefused,
        authorize,
        current_principal,
    )
    from apollo11.scheduler.security.protect import describe as describe_protection
    from apollo11.scheduler.security.protect import missing as protection_missing
    from apollo11.scheduler.security.protect import refusal as protection_refusal
    from apollo11.scheduler.security.roles import (
        ANONYMOUS,
        APART,
        LADDER,
        LANDING,
        METHOD_ROLES,
        OPEN_METHODS,
        OPEN_ROUTES,
        ROUTE_ROLES,
        Principal,
        Role,
        grants,
        route_role,
    )
    from apollo11.scheduler.security.tls import (
        KeyPair,
        channel_credentials,
        read_pem,
        server_credentials,
    )
    from apollo11.scheduler.security.tokens import Principals, create_token
    from apollo11.scheduler.security.tokens import list_entries as list_tokens
    from apollo11.scheduler.security.tokens import revoke as revoke_token
    from apollo11.scheduler.security.worker_names import WorkerNameRefused, worker_name
else:

    def __getattr__(name: str) -> object:
        home = _HOME.get(name)
        if home is None:  # also how `from apollo11.scheduler.security import tokens` finds a module
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        home, _, attr = home.partition(":")
        value = getattr(importlib.import_module(f"{__name__}.{home}"), attr or name)
        globals()[name] = value
        return value


__all__ = [
    "ANONYMOUS",
    "APART",
    "LADDER",
    "LANDING",
    "METHOD_ROLES",
    "OPEN_METHODS",
    "OPEN_ROUTES",
    "ROUTE_ROLES",
    "AuthInterceptor",
    "Authenticator",
    "CallRefused",
    "KeyPair",
    "Principal",
    "Principals",
    "Role",
    "WorkerNameRefused",
    "authorize",
    "channel_credentials",
    "create_cluster_certs",
    "create_token",
    "current_principal",
    "describe_protection",
    "grants",
    "list_tokens",
    "protection_missing",
    "protection_refusal",
    "read_pem",
    "revoke_token",
    "route_role",
    "server_credentials",
    "worker_name",
]
