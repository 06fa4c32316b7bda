"""Tokens, shell steps, protected mode and the recorded operator, on real node
processes: what a user of each credential can and cannot do."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import grpc
import pytest

from apollo11.scheduler.client import ApiError, SyncClient
from apollo11.scheduler.errors import FailedPreconditionError
from apollo11.scheduler.security.roles import Role
from apollo11.scheduler.security.tokens import create_token, revoke
from tests.nodes import APOLLO11, ROOT, cli, start_node
from tests.secure import Pki, make_pki, start_secure_node


def _client(node: object, pki: Pki, token: str | None) -> SyncClient:
    return SyncClient(node.address, ca=pki.dir / "ca.pem", token=token, retries=0)  # type: ignore[attr-defined]


def test_a_deleted_token_is_refused_after_sighup(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    node = start_secure_node(tmp_path, pki)
    try:
        carol = create_token(pki.tokens_file, "carol", Role.READER)
        node.proc.send_signal(signal.SIGHUP)  # she is added...
        deadline = time.monotonic() + 10
        while True:
            try:
                with _client(node, pki, carol) as c:
                    c.status()
                break
            except ApiError:
                assert time.monotonic() < deadline, "the new token was never accepted"
                time.sleep(0.1)
        assert revoke(pki.tokens_file, "carol") == 1
        node.proc.send_signal(signal.SIGHUP)  # ...and removed: her token replayed
        deadline = time.monotonic() + 10
        while True:
            try:
                with _client(node, pki, carol) as c:
                    c.status()
            except ApiError as e:
                assert e.code is grpc.StatusCode.UNAUTHENTICATED
                assert "unknown or revoked" in str(e)
                break
            assert time.monotonic() < deadline, "the deleted token still works"
            time.sleep(0.1)
        with _client(node, pki, pki.tokens["reader"]) as c:
            assert c.status().role == "primary", "the others' tokens still work"
        # A file that no longer parses leaves the entries in force.
        pki.tokens_file.write_text(pki.tokens_file.read_text() + "broken line\n")
        node.proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        with _client(node, pki, pki.tokens["reader"]) as c:
            assert c.status().role == "primary"
    finally:
        assert node.stop() == 0
    assert any("not reloaded, the previous entries stay in force" in ln for ln in _rest(node))


def _rest(node: object) -> list[str]:
    proc = node.proc  # type: ignore[attr-defined]
    assert proc.stdout is not None
    return [*node.lines, *proc.stdout.read().splitlines()]  # type: ignore[attr-defined]


SHELL = {
    "name": "marker",
    "steps": [{"name": "touch", "run": "touch {marker}", "idempotency": "idempotent"}],
}


def _dag(marker: Path) -> dict[str, object]:
    steps = [{**SHELL["steps"][0], "run": f"touch {marker}"}]  # type: ignore[index]
    return {**SHELL, "steps": steps}


def test_shell_steps_are_off_by_default(tmp_path: Path) -> None:
    node = start_node(tmp_path / "d")
    marker = tmp_path / "pwned"
    try:
        with SyncClient(node.address, retries=0) as c:
            with pytest.raises(FailedPreconditionError, match="start the nodes with --allow-shell"):
                c.submit_shell(_dag(marker))
            # ...and not through SubmitTask with the workflow named "shell" either.
            with pytest.raises(Exception, match="is submitted with SubmitShell"):
                c.submit("shell", _dag(marker))
        res = cli("submit", "shell", "--input", json.dumps(_dag(marker)), server=node.address)
        assert res.returncode == 1 and "--allow-shell" in res.stderr, res.stderr
        time.sleep(1.0)
        assert not marker.exists(), "no process was started"
    finally:
        assert node.stop() == 0


def test_with_allow_shell_only_an_operator_runs_commands(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    node = start_secure_node(tmp_path, pki, "--allow-shell")
    marker = tmp_path / "made-by-operator"
    try:
        for role in ("reader", "submitter"):
            with _client(node, pki, pki.tokens[role]) as c, pytest.raises(ApiError) as e:
                c.submit_shell(_dag(marker))
            assert e.value.code is grpc.StatusCode.PERMISSION_DENIED
            assert "SubmitShell needs role operator" in str(e.value)
        with _client(node, pki, pki.tokens["operator"]) as c:
            sub = c.submit_shell(_dag(marker))
            assert c.wait(sub.task_id).state == "SUCCEEDED"
        assert marker.exists()
    finally:
        assert node.stop() == 0


def test_the_operator_on_record_is_the_authenticated_one(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    node = start_secure_node(tmp_path, pki)
    try:
        with _client(node, pki, pki.tokens["submitter"]) as c:
            sub = c.submit("etl", {"step_seconds": 30})
        env_args = ["--ca", str(pki.dir / "ca.pem"), "--token", pki.tokens["operator"]]
        res = cli(
            *env_args,
            "cancel",
            sub.task_id,
            "--reason",
            "wrong input",
            "--operator",
            "root",  # typed: shown beside the principal, never instead of it
            server=node.address,
        )
        assert res.returncode == 0, res.stderr
        res = cli(*env_args, "events", "--task", sub.task_id, "--json", server=node.address)
        events = [json.loads(line) for line in res.stdout.splitlines()]
        cancel = next(e for e in events if e["event_type"] == "TASK_CANCELLED")
        assert cancel["payload"]["operator"] == "operator-user"
        assert cancel["payload"]["as"] == "root"
        with _client(node, pki, pki.tokens["reader"]) as c:
            t = c.task(sub.task_id)
        assert t.cancelled is not None and t.cancelled["operator"] == "operator-user"
        res = cli(*env_args, "events", "--task", sub.task_id, server=node.address)
        assert "CANCELLED — by operator-user (as root): wrong input" in res.stdout, res.stdout
    finally:
        assert node.stop() == 0


def _node_cmd(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [*APOLLO11, "node", "--data-dir", str(tmp_path / "d"), *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_protected_mode_refuses_an_open_node_beyond_loopback(tmp_path: Path) -> None:
    res = _node_cmd(tmp_path, "--listen", "0.0.0.0:0")
    assert res.returncode != 0
    assert "refusing to start" in res.stderr and "--tls-cert" in res.stderr, res.stderr
    assert "--tokens-file" in res.stderr and "--insecure" in res.stderr
    assert not (tmp_path / "d").exists() or not any((tmp_path / "d").rglob("*.seg"))


def test_insecure_starts_and_says_so(tmp_path: Path) -> None:
    node = start_node(tmp_path / "d", "--insecure")  # listens on 127.0.0.1 in tests...
    node.stop()
    node = start_node(tmp_path / "e", "--insecure", "--http", "0.0.0.0:0")  # ...this does not
    try:
        with SyncClient(node.address, retries=0) as c:
            s = c.status()
        assert s.security.startswith("INSECURE (--insecure)"), s.security
        res = cli("status", server=node.address)
        assert "INSECURE" in res.stdout, res.stdout
    finally:
        node.stop()
    assert any("INSECURE" in ln for ln in _rest(node))


def test_a_secure_node_beyond_loopback_starts(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    node = start_secure_node(tmp_path, pki, "--http", "0.0.0.0:0")
    try:
        with _client(node, pki, pki.tokens["reader"]) as c:
            s = c.status()
        assert not s.security.startswith("INSECURE") and "tokens" in s.security
    finally:
        assert node.stop() == 0


def test_client_certificates_map_to_principals(tmp_path: Path) -> None:
    from apollo11.scheduler.security.certs import make_ca, make_leaf

    pki = make_pki(tmp_path)
    ca_key, ca_cert = make_ca("clients")
    (tmp_path / "clients.pem").write_bytes(ca_cert)
    with pki.tokens_file.open("a") as f:
        f.write("grafana reader cert\n")
    certs = {}
    for name in ("grafana", "mallory"):
        key, cert = make_leaf(ca_key, ca_cert, name, [], client=True, server=False)
        (tmp_path / f"{name}.pem").write_bytes(cert)
        (tmp_path / f"{name}-key.pem").write_bytes(key)
        certs[name] = (tmp_path / f"{name}.pem", tmp_path / f"{name}-key.pem")
    node = start_secure_node(tmp_path, pki, "--client-ca", str(tmp_path / "clients.pem"))
    try:
        cert, key = certs["grafana"]
        with SyncClient(node.address, ca=pki.dir / "ca.pem", cert=cert, key=key) as c:
            assert c.status().role == "primary"
            with pytest.raises(ApiError) as e:
                c.cancel("t", reason="r")
            assert e.value.code is grpc.StatusCode.PERMISSION_DENIED
            assert "grafana has role reader" in str(e.value)
        cert, key = certs["mallory"]
        with SyncClient(node.address, ca=pki.dir / "ca.pem", cert=cert, key=key, retries=0) as c:
            with pytest.raises(ApiError) as e:
                c.status()
            assert e.value.code is grpc.StatusCode.UNAUTHENTICATED
            assert "'mallory' is not in the tokens file" in str(e.value)
    finally:
        assert node.stop() == 0


def test_a_replication_port_never_serves_the_log_open(tmp_path: Path) -> None:
    """Red-team finding: a standalone node with --peer-listen and no peer certificates
    streamed every record, in plaintext, to anyone (even with TLS and tokens on)."""
    pki = make_pki(tmp_path)
    res = _node_cmd(
        tmp_path,
        *pki.tls_args("n1"),
        "--tokens-file",
        str(pki.tokens_file),
        "--peer-listen",
        "127.0.0.1:0",
    )
    assert res.returncode != 0 and "--peer-listen with --tokens-file needs" in res.stderr
    res = _node_cmd(tmp_path, "--peer-listen", "0.0.0.0:0")
    assert res.returncode != 0 and "refusing to start" in res.stderr, res.stderr
    assert "0.0.0.0:0" in res.stderr and "mutual TLS between nodes" in res.stderr


def test_a_revoked_tokens_open_watch_stream_is_ended(tmp_path: Path) -> None:
    """A token revoked (SIGHUP) was refused for new calls, but a WatchTask stream it
    had opened went on delivering the task's events for as long as the task ran."""
    import threading

    pki = make_pki(tmp_path)
    # the task's step runs on: the stop need not wait for it
    node = start_secure_node(tmp_path, pki, env={"APOLLO11_DRAIN_TIMEOUT": "0"})
    try:
        dave = create_token(pki.tokens_file, "dave", Role.READER)
        node.proc.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        with _client(node, pki, pki.tokens["submitter"]) as c:
            task_id = c.submit("etl", {"step_seconds": 120}).task_id
        outcome: list[object] = []
        opened = threading.Event()

        def watch() -> None:
            try:
                with _client(node, pki, dave) as c:
                    for _ in c.watch(task_id):
                        opened.set()
                outcome.append("ended")
            except ApiError as e:
                outcome.append(e)

        t = threading.Thread(target=watch, daemon=True)
        t.start()
        assert opened.wait(20), "the stream delivered nothing"
        assert revoke(pki.tokens_file, "dave") == 1
        node.proc.send_signal(signal.SIGHUP)
        t.join(30)
        assert outcome, "the revoked token's stream is still open"
        err = outcome[0]
        assert isinstance(err, ApiError) and err.code is grpc.StatusCode.UNAUTHENTICATED
        assert "revoked" in str(err)
    finally:
        node.stop()
