"""Security: who may reach a node, who a caller is, and what each role may do.

roles.py        the roles, the principal, the method -> role policy table
tokens.py       the principals file (token hashes, certificate names), SIGHUP reload
interceptor.py  the one interceptor that authenticates and authorizes every RPC
tls.py          PEM files and gRPC credentials (public port, peer port)
protect.py      protected mode: what a node refuses to start without
"""

from scheduler.security.interceptor import (
    Authenticator,
    AuthInterceptor,
    Refused,
    authorize,
    current_principal,
)
from scheduler.security.roles import ANONYMOUS, METHOD_ROLES, OPEN_METHODS, Principal, Role
from scheduler.security.tokens import Principals, create_token

__all__ = [
    "ANONYMOUS",
    "METHOD_ROLES",
    "OPEN_METHODS",
    "AuthInterceptor",
    "Authenticator",
    "Principal",
    "Principals",
    "Refused",
    "Role",
    "authorize",
    "create_token",
    "current_principal",
]
