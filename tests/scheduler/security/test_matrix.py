"""Every method of every service, called with every kind of credential, on a real
node with real TLS on loopback: each cell is allowed or refused with the right
status. The methods come from the service descriptors, so an RPC added without a
role in the policy fails here."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor

from apollo11.scheduler.security.roles import METHOD_ROLES, OPEN_METHODS, Role, grants
from apollo11.v1 import replication_pb2, scheduler_pb2, worker_pb2
from tests.nodes import NodeProc
from tests.secure import Pki, make_pki, start_secure_node

# Who calls: a token of each role, nobody, a node's peer certificate, and a
# certificate that another CA signed.
CALLERS = ("anonymous", "reader", "submitter", "operator", "worker", "node", "foreign")
DENIED = {grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED}


def _methods() -> list[MethodDescriptor]:
    out = []
    for module in (scheduler_pb2, replication_pb2, worker_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            out.extend(service.methods)
    return out


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NodeProc, Pki]]:
    root = tmp_path_factory.mktemp("matrix")
    pki = make_pki(root)
    # remote execution: the Workers service is served too. The matrix opens some 300
    # TLS connections in a burst: by the node's measure a flood, which it sheds by
    # dropping new connections' SYNs for some seconds after (api/connshed.py). Off
    # here, or the next test's client may find its connection dropped and be told
    # "took no connection" (CI, Dec 7).
    env = {"APOLLO11_GRPC_THREADS_CPU_BUDGET": "0"}
    node = start_secure_node(root, pki, "--execution", "remote", env=env)
    yield node, pki
    assert node.stop() == 0


def test_every_method_has_a_role_in_the_policy() -> None:
    names = {f"/{m.containing_service.full_name}/{m.name}" for m in _methods()}
    assert names - set(METHOD_ROLES) == set(), "an RPC without a role"
    assert set(METHOD_ROLES) - names == set(), "a role for an RPC that does not exist"


def _call(address: str, creds: grpc.ChannelCredentials, token: str | None, m: MethodDescriptor):  # type: ignore[no-untyped-def]
    """One call of `m` with an empty (or, for Follow, a Hello) request: its status code."""
    name = f"/{m.containing_service.full_name}/{m.name}"
    request_cls: Any = message_factory.GetMessageClass(m.input_type)
    response_cls: Any = message_factory.GetMessageClass(m.output_type)
    metadata = (("authorization", f"Bearer {token}"),) if token else None
    kw = {
        "request_serializer": request_cls.SerializeToString,
        "response_deserializer": response_cls.FromString,
    }
    # The certificates name n1 (and 127.0.0.1): the node's own name is what we check.
    options = [("grpc.ssl_target_name_override", "n1")]
    with grpc.secure_channel(address, creds, options=options) as ch:
        try:
            if m.client_streaming:
                if m.name == "Connect":  # a worker's stream: a registration opens it
                    # a default name: beneath whichever credential calls (worker_names.py)
                    reg = worker_pb2.Register(name="w", instance="i", slots=1, default_name=True)
                    first = request_cls(register=reg)
                else:
                    first = request_cls(hello=replication_pb2.Hello(node_id="n1", address="x:1"))
                call = ch.stream_stream(name, **kw)(iter([first]), timeout=5, metadata=metadata)
                next(call)  # the first answer is enough: the stream was admitted
                call.cancel()
            elif m.server_streaming:
                for _ in ch.unary_stream(name, **kw)(request_cls(), timeout=5, metadata=metadata):
                    break
            else:
                ch.unary_unary(name, **kw)(request_cls(), timeout=5, metadata=metadata)
        except grpc.RpcError as e:
            if e.code() is grpc.StatusCode.CANCELLED:
                return grpc.StatusCode.OK
            return e.code()
    return grpc.StatusCode.OK


def _expected(caller: str, need: Role, on_peer_port: bool) -> str:
    if on_peer_port:
        # Only a certificate of the cluster CA gets through the handshake, and only
        # replication is served there.
        if caller != "node":
            return "no handshake"
        return "allowed" if need is Role.NODE else "unimplemented"
    if need is Role.NODE:
        return "unimplemented"  # replication is not served on the public port
    if caller in ("anonymous", "node", "foreign"):
        return "unauthenticated"  # the public port asks for no certificate: only tokens
    return "allowed" if grants(Role(caller), need) else "permission denied"


def _outcome(code: grpc.StatusCode) -> str:
    if code is grpc.StatusCode.UNAUTHENTICATED:
        return "unauthenticated"
    if code is grpc.StatusCode.PERMISSION_DENIED:
        return "permission denied"
    if code is grpc.StatusCode.UNIMPLEMENTED:
        return "unimplemented"
    if code is grpc.StatusCode.UNAVAILABLE:
        return "no handshake"
    return "allowed"  # OK, or the handler's own answer to an empty request


@pytest.mark.parametrize("port", ["public", "peer"])
def test_role_by_rpc_matrix(secured: tuple[NodeProc, Pki], port: str) -> None:
    node, pki = secured
    address = f"127.0.0.1:{node.port if port == 'public' else node.peer_port}"
    got: dict[tuple[str, str], str] = {}
    want: dict[tuple[str, str], str] = {}
    for m in _methods():
        name = f"/{m.containing_service.full_name}/{m.name}"
        for caller in CALLERS:
            token = pki.tokens.get(caller)
            cert = {"node": "n1", "foreign": "foreign"}.get(caller)
            code = _call(address, pki.channel_creds(cert), token, m)
            got[(m.name, caller)] = _outcome(code)
            want[(m.name, caller)] = _expected(caller, METHOD_ROLES[name], port == "peer")
    assert got == want
    assert len(got) == len(_methods()) * len(CALLERS)


def test_refusals_name_the_role_needed(secured: tuple[NodeProc, Pki]) -> None:
    node, pki = secured
    cancel = scheduler_pb2.DESCRIPTOR.services_by_name["Scheduler"].methods_by_name["CancelTask"]
    with grpc.secure_channel(
        f"127.0.0.1:{node.port}",
        pki.channel_creds(),
        options=[("grpc.ssl_target_name_override", "n1")],
    ) as ch:
        stub = ch.unary_unary(
            "/apollo11.v1.Scheduler/CancelTask",
            request_serializer=scheduler_pb2.CancelTaskRequest.SerializeToString,
            response_deserializer=scheduler_pb2.ActionResponse.FromString,
        )
        with pytest.raises(grpc.RpcError) as e:
            stub(scheduler_pb2.CancelTaskRequest(task_id="t"), timeout=5)
        assert e.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert "needs a credential with role operator" in (e.value.details() or "")
        with pytest.raises(grpc.RpcError) as e:
            stub(
                scheduler_pb2.CancelTaskRequest(task_id="t"),
                timeout=5,
                metadata=(("authorization", f"Bearer {pki.tokens['reader']}"),),
            )
        assert e.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert e.value.details() == "CancelTask needs role operator; reader-user has role reader"
        with pytest.raises(grpc.RpcError) as e:
            stub(
                scheduler_pb2.CancelTaskRequest(task_id="t"),
                timeout=5,
                metadata=(("authorization", "Bearer a11_not-a-real-token"),),
            )
        assert e.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert "not valid (unknown or revoked)" in (e.value.details() or "")
    assert cancel.name == "CancelTask"


def test_health_and_reflection_stay_open(secured: tuple[NodeProc, Pki]) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    node, pki = secured
    with grpc.secure_channel(
        f"127.0.0.1:{node.port}",
        pki.channel_creds(),
        options=[("grpc.ssl_target_name_override", "n1")],
    ) as ch:
        reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    assert {"/grpc.health.v1.Health/Check"} <= OPEN_METHODS


def test_plaintext_to_a_tls_node_fails(secured: tuple[NodeProc, Pki], tmp_path: Path) -> None:
    node, _ = secured
    with grpc.insecure_channel(f"127.0.0.1:{node.port}") as ch:
        stub = ch.unary_unary(
            "/apollo11.v1.Cluster/GetStatus",
            request_serializer=scheduler_pb2.GetStatusRequest.SerializeToString,
            response_deserializer=scheduler_pb2.ClusterStatus.FromString,
        )
        with pytest.raises(grpc.RpcError) as e:
            stub(scheduler_pb2.GetStatusRequest(), timeout=3)
    assert e.value.code() is grpc.StatusCode.UNAVAILABLE


def test_a_plaintext_client_is_told_to_pass_the_ca(secured: tuple[NodeProc, Pki]) -> None:
    from apollo11.scheduler.client import SyncClient, UnavailableError

    node, _ = secured
    # a refusal comes at once; the generous deadline is for a loaded machine
    client = SyncClient(node.address, retries=0, connect_timeout_s=30)
    with client as c, pytest.raises(UnavailableError) as e:
        c.tasks()
    assert "pass --ca FILE or set APOLLO11_CA" in str(e.value)
