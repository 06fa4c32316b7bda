"""Requests that are not the message they claim to be are INVALID_ARGUMENT.

gRPC Python decodes a request before any handler runs and answers a failure
with UNKNOWN ("Exception deserializing request!"), which says nothing useful and
is not the status for a caller's mistake. This interceptor takes the decoding
over for methods with a single request message: bytes that do not parse (a
truncated message, a string field holding invalid UTF-8) are answered
INVALID_ARGUMENT naming the message type.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError


class DecodeInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(self) -> None:
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_streaming or handler.request_deserializer is None:
            return handler
        method = handler_call_details.method
        known = self._wrapped.get(method)
        if known is None or known[0] is not handler:
            known = (handler, _decoding(handler, method))
            self._wrapped[method] = known
        return known[1]


def _decoding(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    parse = handler.request_deserializer
    name = getattr(getattr(parse, "__self__", None), "DESCRIPTOR", None)
    what = name.full_name if name is not None else f"request of {method}"

    async def decode(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        try:
            return parse(raw)
        except (DecodeError, UnicodeDecodeError, ValueError) as e:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"the request is not a valid {what}: {e}"
            )

    if handler.unary_unary:
        inner = handler.unary_unary

        async def unary(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            return await inner(await decode(raw, context), context)

        return grpc.unary_unary_rpc_method_handler(
            unary, response_serializer=handler.response_serializer
        )
    inner_stream = handler.unary_stream

    async def streaming(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        request = await decode(raw, context)
        async for item in inner_stream(request, context):
            yield item

    return grpc.unary_stream_rpc_method_handler(
        streaming, response_serializer=handler.response_serializer
    )
