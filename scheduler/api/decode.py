"""Requests that are not the message they claim to be are INVALID_ARGUMENT.

gRPC Python decodes a request before any handler runs and answers a failure
with UNKNOWN ("Exception deserializing request!"), which says nothing useful and
is not the status for a caller's mistake. So the services are registered here,
from their descriptors, with a deserializer that never raises: bytes that do
not parse (a truncated message, a string field holding invalid UTF-8) become an
`Undecodable`, which the handlers' error wrapper answers INVALID_ARGUMENT naming
the message type. No interceptor: nothing is added to a well-formed call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError


@dataclass(frozen=True, slots=True)
class Undecodable:
    """What arrived instead of a request message."""

    message_type: str
    error: str

    def describe(self) -> str:
        return f"the request is not a valid {self.message_type}: {self.error}"


def _tolerant(cls: Any) -> Callable[[bytes], Any]:
    name = cls.DESCRIPTOR.full_name
    parse = cls.FromString

    def decode(raw: bytes) -> Any:
        try:
            return parse(raw)
        except (DecodeError, UnicodeDecodeError, ValueError) as e:
            return Undecodable(name, str(e) or type(e).__name__)

    return decode


_MAKERS = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def add_service(server: grpc.aio.Server, service: ServiceDescriptor, servicer: Any) -> None:
    """What the generated add_*Servicer_to_server does, with tolerant decoding of
    single request messages (a stream's messages are the replication protocol's,
    checked by its handler)."""
    handlers = {}
    for m in service.methods:
        request = message_factory.GetMessageClass(m.input_type)
        response = message_factory.GetMessageClass(m.output_type)
        handlers[m.name] = _MAKERS[(m.client_streaming, m.server_streaming)](
            getattr(servicer, m.name),
            request_deserializer=request.FromString if m.client_streaming else _tolerant(request),
            response_serializer=response.SerializeToString,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
    server.add_registered_method_handlers(service.full_name, handlers)
