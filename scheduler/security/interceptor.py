"""The one place every RPC's credential and role are checked.

A grpc.aio server interceptor wraps each method's handler: before the handler
runs, the caller's principal is established from its credential (a bearer
token in the `authorization` metadata, or the certificate its TLS connection
verified) and checked against the role the policy table gives the method.
Whatever the metadata alone decides (a bad token, no credential where no client
certificate could stand in, the wrong role) is refused before the request is
read, by a handler that never reads it; only a certificate needs the behavior's
context to check.
No credential is UNAUTHENTICATED, the wrong role PERMISSION_DENIED; both name
the role needed. Handlers read who is calling with `current_principal()`,
never from a field of the request.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from apollo11.scheduler.security.roles import (
    ANONYMOUS,
    OPEN_METHODS,
    Principal,
    Role,
    required_role,
)
from apollo11.scheduler.security.tls import peer_name
from apollo11.scheduler.security.tokens import Principals

_principal: contextvars.ContextVar[Principal] = contextvars.ContextVar(
    "apollo11_principal", default=ANONYMOUS
)


def current_principal() -> Principal:
    """Who the RPC being served runs as (the anonymous principal outside one)."""
    return _principal.get()


class CallRefused(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _needs(need: Role) -> str:
    return f"this call needs a credential with role {need.value}"


class Authenticator:
    """How a caller on one port proves who it is.

    `principals` None: authentication is off (a loopback node, or --insecure):
    every caller is the anonymous principal. `peer`: the port of the cluster's
    nodes, whose callers are proven by the cluster CA during the TLS handshake.
    """

    def __init__(self, principals: Principals | None, *, peer: bool = False, mtls: bool = False):
        self.principals = principals
        self.peer = peer
        self.mtls = mtls

    def from_metadata(self, metadata: Any, need: Role) -> Principal | None:
        """The principal if the call's metadata alone decides it, or CallRefused; None
        when only the TLS peer can tell (a certificate port, or no token on a port
        that takes client certificates). Needs no context: the interceptor calls it
        before the request is read."""
        if self.peer:
            return None if self.mtls else ANONYMOUS
        if self.principals is None:
            return ANONYMOUS
        auth = ""
        for key, value in metadata or ():
            if key == "authorization":
                auth = str(value)
        if auth:
            scheme, _, token = auth.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise CallRefused(
                    grpc.StatusCode.UNAUTHENTICATED,
                    "the authorization metadata must be 'Bearer <token>'",
                )
            found = self.principals.by_token(token.strip())
            if found is None:
                raise CallRefused(
                    grpc.StatusCode.UNAUTHENTICATED,
                    f"the bearer token is not valid (unknown or revoked); {_needs(need)}",
                )
            return found
        if self.mtls:
            return None
        raise _no_credential(need)

    def __call__(self, context: Any, need: Role) -> Principal:
        found = self.from_metadata(context.invocation_metadata(), need)
        if found is not None:
            return found
        name = peer_name(context)
        if self.peer:
            if name is None:  # cannot happen: the handshake requires a certificate
                raise CallRefused(grpc.StatusCode.UNAUTHENTICATED, _needs(need))
            return Principal(name, Role.NODE, "peer certificate")
        assert self.principals is not None  # from_metadata answered ANONYMOUS otherwise
        if name is not None:
            found = self.principals.by_certificate(name)
            if found is None:
                raise CallRefused(
                    grpc.StatusCode.UNAUTHENTICATED,
                    f"the client certificate {name!r} is not in the tokens file; {_needs(need)}",
                )
            return found
        raise _no_credential(need)


def _no_credential(need: Role) -> CallRefused:
    return CallRefused(
        grpc.StatusCode.UNAUTHENTICATED,
        f"{_needs(need)}: pass a bearer token (--token or APOLLO11_TOKEN; "
        f"`apollo11 token create` makes one)",
    )


def _required(method: str) -> Role | None:
    try:
        return required_role(method)
    except KeyError:
        raise CallRefused(
            grpc.StatusCode.PERMISSION_DENIED, f"{method} has no role in the policy: refused"
        ) from None


def _admitted(principal: Principal, need: Role, method: str) -> Principal:
    if not principal.may(need):
        have = principal.role.value if principal.role else "none"
        raise CallRefused(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{method.rsplit('/', 1)[-1]} needs role {need.value}; "
            f"{principal.name} has role {have}",
        )
    return principal


def authorize(authenticate: Authenticator, context: Any, method: str) -> Principal:
    """The principal for this call, or CallRefused."""
    need = _required(method)
    if need is None:
        return ANONYMOUS
    return _admitted(authenticate(context, need), need, method)


def authorize_early(authenticate: Authenticator, metadata: Any, method: str) -> Principal | None:
    """As authorize, from the call's metadata alone, before its request is read:
    the principal, CallRefused, or None when only the TLS peer can decide."""
    need = _required(method)
    if need is None:
        return ANONYMOUS
    principal = authenticate.from_metadata(metadata, need)
    return None if principal is None else _admitted(principal, need, method)


Behavior = Callable[[Any, grpc.aio.ServicerContext], Any]


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(
        self,
        authenticate: Authenticator,
        admitted: Callable[[str], Callable[[], None] | None] | None = None,
    ) -> None:
        """`admitted`: told the gRPC peer string of each call whose caller proved who
        it is, and returns what to call when that call ends (api/knownsources.py: those
        addresses are spared when SYNs are shed)."""
        self.authenticate = authenticate
        self.admitted = admitted
        # The server hands out the same handler for a method every time: wrap it once.
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method
        if method in OPEN_METHODS:
            return handler
        # Refuse before the request is read: gRPC reads and decodes a unary call's
        # request (up to max_message_bytes) before the behavior runs, so a check in
        # the behavior alone let anonymous callers make the node hold 16 MiB each.
        try:
            authorize_early(self.authenticate, handler_call_details.invocation_metadata, method)
        except CallRefused as e:
            return _refusal(e)
        known = self._wrapped.get(method)
        if known is not None and known[0] is handler:
            return known[1]
        authenticate, admitted = self.authenticate, self.admitted

        def check(ctx: Any) -> tuple[Principal, Callable[[], None] | None]:
            principal = authorize(authenticate, ctx, method)
            if admitted is not None and principal is not ANONYMOUS:
                return principal, admitted(ctx.peer())
            return principal, None

        wrapped = _guarded(handler, check)
        self._wrapped[method] = (handler, wrapped)
        return wrapped


def _refusal(refused: CallRefused) -> grpc.RpcMethodHandler:
    """A handler that answers `refused` without reading the request: a
    client-streaming handler reads request messages only when asked, and this one
    never asks (and could not decode them: no deserializer)."""

    async def behavior(requests: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(refused.code, str(refused))

    return grpc.stream_unary_rpc_method_handler(behavior)


def _guarded(
    handler: grpc.RpcMethodHandler,
    check: Callable[[Any], tuple[Principal, Callable[[], None] | None]],
) -> grpc.RpcMethodHandler:
    # Each RPC is served in a task of its own, with a copy of the context: the
    # principal set here is that call's alone, and needs no reset.
    async def admit(context: grpc.aio.ServicerContext) -> Callable[[], None] | None:
        """Who calls (or the call is aborted), and what to call when the call ends."""
        try:
            principal, ended = check(context)
        except CallRefused as e:
            await context.abort(e.code, str(e))
        _principal.set(principal)
        return ended

    def unary(inner: Behavior) -> Behavior:
        async def behavior(request: Any, context: grpc.aio.ServicerContext) -> Any:
            ended = await admit(context)
            try:
                return await inner(request, context)
            finally:
                if ended is not None:
                    ended()

        return behavior

    def streaming(inner: Behavior) -> Behavior:
        async def behavior(request: Any, context: grpc.aio.ServicerContext) -> Any:
            ended = await admit(context)
            try:
                out = inner(request, context)
                if inspect.isasyncgen(out):
                    async for item in out:
                        yield item
                else:
                    await out
            finally:
                if ended is not None:
                    ended()

        return behavior

    kw = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(unary(handler.unary_unary), **kw)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(unary(handler.stream_unary), **kw)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(streaming(handler.unary_stream), **kw)
    return grpc.stream_stream_rpc_method_handler(streaming(handler.stream_stream), **kw)
