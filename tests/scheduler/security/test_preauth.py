"""A refused call is answered before its request is read: an anonymous caller must
not make the node receive and decode a message of up to max_message_bytes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from apollo11.scheduler.security.interceptor import (
    Authenticator,
    AuthInterceptor,
    current_principal,
)
from apollo11.scheduler.security.roles import Role
from apollo11.scheduler.security.tokens import Principals, create_token

SUBMIT = "/apollo11.v1.Scheduler/SubmitTasks"  # role submitter
BIG = b"\x00" * (10 << 20)


class _Counting:
    def __init__(self) -> None:
        self.decoded = 0
        self.served: list[str] = []

    def decode(self, raw: bytes) -> bytes:
        self.decoded += 1
        return raw

    async def submit(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        self.served.append(current_principal().name)
        return b""


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[str, dict[str, str], _Counting]]:
    path = tmp_path / "tokens"
    tokens = {
        "reader": create_token(path, "rita", Role.READER),
        "submitter": create_token(path, "sam", Role.SUBMITTER),
    }
    seen = _Counting()
    server = grpc.aio.server(
        options=[("grpc.max_receive_message_length", 16 << 20)],
        interceptors=[AuthInterceptor(Authenticator(Principals(path)))],
    )
    handler = grpc.unary_unary_rpc_method_handler(seen.submit, request_deserializer=seen.decode)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("apollo11.v1.Scheduler", {"SubmitTasks": handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}", tokens, seen
    finally:
        await server.stop(0)


async def _call(address: str, token: str | None, auth: str | None = None) -> Any:
    metadata = None
    if auth is not None or token is not None:
        metadata = (("authorization", auth if auth is not None else f"Bearer {token}"),)
    async with grpc.aio.insecure_channel(
        address, options=[("grpc.max_send_message_length", 16 << 20)]
    ) as channel:
        call = channel.unary_unary(SUBMIT)
        try:
            await call(BIG, metadata=metadata, timeout=20)
        except grpc.aio.AioRpcError as e:
            return e.code(), e.details()
        return grpc.StatusCode.OK, ""


@pytest.mark.parametrize(
    ("who", "auth", "code", "says"),
    [
        (None, None, grpc.StatusCode.UNAUTHENTICATED, "pass a bearer token"),
        ("nobody", None, grpc.StatusCode.UNAUTHENTICATED, "unknown or revoked"),
        (None, "Basic abc", grpc.StatusCode.UNAUTHENTICATED, "must be 'Bearer <token>'"),
        ("reader", None, grpc.StatusCode.PERMISSION_DENIED, "needs role submitter"),
    ],
)
async def test_a_refused_call_never_decodes_its_request(
    served: tuple[str, dict[str, str], _Counting],
    who: str | None,
    auth: str | None,
    code: grpc.StatusCode,
    says: str,
) -> None:
    address, tokens, seen = served
    token = tokens.get(who, "a11_not-a-token") if who else None
    got_code, details = await _call(address, token, auth)
    assert got_code is code
    assert says in details
    assert seen.decoded == 0, "the 10 MiB request was read before the credential was checked"
    assert seen.served == []


async def test_an_admitted_call_is_served_as_its_principal(
    served: tuple[str, dict[str, str], _Counting],
) -> None:
    address, tokens, seen = served
    assert await _call(address, tokens["submitter"]) == (grpc.StatusCode.OK, "")
    assert seen.decoded == 1
    assert seen.served == ["sam"]
