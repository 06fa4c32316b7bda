"""The one place every RPC's credential and role are checked.

A grpc.aio server interceptor wraps each method's handler: before the handler
runs, the caller's principal is established from its credential (a bearer
token in the `authorization` metadata, or the certificate its TLS connection
verified) and checked against the role the policy table gives the method.
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

from scheduler.security.roles import ANONYMOUS, OPEN_METHODS, Principal, Role, required_role
from scheduler.security.tls import peer_name
from scheduler.security.tokens import Principals

_principal: contextvars.ContextVar[Principal] = contextvars.ContextVar(
    "apollo11_principal", default=ANONYMOUS
)


def current_principal() -> Principal:
    """Who the RPC being served runs as (the anonymous principal outside one)."""
    return _principal.get()


class Refused(Exception):
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

    def __call__(self, context: Any, need: Role) -> Principal:
        if self.peer:
            if not self.mtls:
                return ANONYMOUS
            name = peer_name(context)
            if name is None:  # cannot happen: the handshake requires a certificate
                raise Refused(grpc.StatusCode.UNAUTHENTICATED, _needs(need))
            return Principal(name, Role.NODE, "peer certificate")
        if self.principals is None:
            return ANONYMOUS
        auth = ""
        for key, value in context.invocation_metadata() or ():
            if key == "authorization":
                auth = str(value)
        if auth:
            scheme, _, token = auth.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise Refused(
                    grpc.StatusCode.UNAUTHENTICATED,
                    "the authorization metadata must be 'Bearer <token>'",
                )
            found = self.principals.by_token(token.strip())
            if found is None:
                raise Refused(
                    grpc.StatusCode.UNAUTHENTICATED,
                    f"the bearer token is not valid (unknown or revoked); {_needs(need)}",
                )
            return found
        name = peer_name(context) if self.mtls else None
        if name is not None:
            found = self.principals.by_certificate(name)
            if found is None:
                raise Refused(
                    grpc.StatusCode.UNAUTHENTICATED,
                    f"the client certificate {name!r} is not in the tokens file; {_needs(need)}",
                )
            return found
        raise Refused(
            grpc.StatusCode.UNAUTHENTICATED,
            f"{_needs(need)}: pass a bearer token (--token or APOLLO11_TOKEN; "
            f"`apollo11 token create` makes one)",
        )


def authorize(authenticate: Authenticator, context: Any, method: str) -> Principal:
    """The principal for this call, or Refused."""
    try:
        need = required_role(method)
    except KeyError:
        raise Refused(
            grpc.StatusCode.PERMISSION_DENIED, f"{method} has no role in the policy: refused"
        ) from None
    if need is None:
        return ANONYMOUS
    principal = authenticate(context, need)
    if not principal.may(need):
        have = principal.role.value if principal.role else "none"
        raise Refused(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{method.rsplit('/', 1)[-1]} needs role {need.value}; "
            f"{principal.name} has role {have}",
        )
    return principal


Behavior = Callable[[Any, grpc.aio.ServicerContext], Any]


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, authenticate: Authenticator) -> None:
        self.authenticate = authenticate
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
        known = self._wrapped.get(method)
        if known is not None and known[0] is handler:
            return known[1]
        authenticate = self.authenticate
        wrapped = _guarded(handler, lambda ctx: authorize(authenticate, ctx, method))
        self._wrapped[method] = (handler, wrapped)
        return wrapped


def _guarded(
    handler: grpc.RpcMethodHandler, check: Callable[[Any], Principal]
) -> grpc.RpcMethodHandler:
    # Each RPC is served in a task of its own, with a copy of the context: the
    # principal set here is that call's alone, and needs no reset.
    async def admit(context: grpc.aio.ServicerContext) -> None:
        try:
            principal = check(context)
        except Refused as e:
            await context.abort(e.code, str(e))
        _principal.set(principal)

    def unary(inner: Behavior) -> Behavior:
        async def behavior(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await admit(context)
            return await inner(request, context)

        return behavior

    def streaming(inner: Behavior) -> Behavior:
        async def behavior(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await admit(context)
            out = inner(request, context)
            if inspect.isasyncgen(out):
                async for item in out:
                    yield item
            else:
                await out

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
