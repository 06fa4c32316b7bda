"""Checks run from the host against the compose cluster (called by deploy/e2e.sh).

Everything goes through the published ports and the real CLI, as a user would,
with the credentials deploy/secrets.sh made (APOLLO11_CA and APOLLO11_TOKEN_FILE,
or deploy/secrets/ca.pem and operator.token): first that the cluster is closed
(TLS, tokens, peer mTLS; operator actions name the token's principal), then the
failover.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc

from apollo11.scheduler.client import ApiError, SyncClient, UnavailableError
from apollo11.scheduler.security.tokens import list_entries, token_hash

NODES = {"node1": "127.0.0.1:7411", "node2": "127.0.0.1:7421", "node3": "127.0.0.1:7431"}
HTTP = {"node1": "127.0.0.1:7412", "node2": "127.0.0.1:7422", "node3": "127.0.0.1:7432"}
SERVERS = ",".join(NODES.values())
CLI = [sys.executable, "-m", "apollo11.scheduler.cli"]
SECRETS = Path(__file__).resolve().parent / "secrets"
# Taken out of the environment: each call below says which credentials it uses (the
# client would otherwise pick them up from there even where a check wants none).
CA = os.environ.pop("APOLLO11_CA", "") or str(SECRETS / "ca.pem")
TOKEN_FILE = os.environ.pop("APOLLO11_TOKEN_FILE", "") or str(SECRETS / "operator.token")
os.environ.pop("APOLLO11_TOKEN", None)
TOKEN = Path(TOKEN_FILE).read_text().strip()


def say(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} e2e: {msg}", flush=True)


def cli(*args: str, timeout: float = 60, token: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "APOLLO11_SERVER": SERVERS, "APOLLO11_CA": CA}
    if token:
        env["APOLLO11_TOKEN_FILE"] = TOKEN_FILE
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, env=env)


def status(address: str) -> dict | None:  # type: ignore[type-arg]
    """One quick look (polled often, so not through the CLI's patient retries)."""
    try:
        with SyncClient(address, retries=0, timeout_s=2, ca=CA, token=TOKEN) as c:
            return c.status().to_json()
    except Exception:
        return None


def check_closed(address: str, security: str) -> None:
    """From the host: TLS, tokens and peer mTLS on, and nothing gets in without them."""
    assert security.startswith("tls, tokens") and "peer mTLS" in security, security
    with SyncClient(address, retries=0, timeout_s=5, ca=CA) as c:
        try:
            c.status()
            raise AssertionError("a call without a token was answered")
        except ApiError as e:
            assert e.code is grpc.StatusCode.UNAUTHENTICATED, e
    r = cli("status", "--server", address, token=False)
    assert r.returncode != 0 and "UNAUTHENTICATED" in r.stderr, (r.stdout, r.stderr)
    # No CA: a plaintext channel, which the TLS port must not answer at all (an open
    # port would say UNAUTHENTICATED; no token goes out in the clear).
    with SyncClient(address, retries=0, timeout_s=5, tls=False) as c:
        try:
            c.status()
            raise AssertionError("a plaintext call was answered")
        except UnavailableError:
            pass
    r = cli("status", "--json")
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)["security"]
    assert not shown.startswith("INSECURE"), shown
    say(f"closed: {shown}; no token: UNAUTHENTICATED; plaintext: refused")


def http_status(url: str, token: str | None = None) -> int | str:
    """The HTTP status of a GET (trusting the cluster CA), or why there was none."""
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    ctx = ssl.create_default_context(cafile=CA)
    try:
        with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except (urllib.error.URLError, OSError) as e:
        return f"no answer ({e})"


def check_http_closed(address: str) -> None:
    """The HTTP side as Prometheus sees it: https with the cluster CA, /metrics with
    the reader token deploy/prometheus/prometheus.yml uses, nothing in plaintext."""
    reader = (Path(CA).parent / "prometheus.token").read_text().strip()
    assert http_status(f"https://{address}/metrics", reader) == 200
    assert http_status(f"https://{address}/metrics") == 401
    plain = http_status(f"http://{address}/metrics", reader)
    assert isinstance(plain, str), f"plaintext HTTP answered {plain}"
    say(f"HTTP at {address}: https; /metrics with the reader token only; plaintext: no answer")


def check_operator_is_principal(address: str) -> None:
    """An operator action records who the token belongs to, not a name one typed.

    Sent to the primary's published port: a standby would redirect it to the
    primary's advertised name (node1:7411), which only resolves inside the compose
    network, and a cancel is not retried elsewhere (it is not safe to repeat).
    """
    principal = next(
        e.name
        for e in list_entries(Path(TOKEN_FILE).parent / "tokens")
        if e.secret == token_hash(TOKEN)
    )
    r = cli("submit", "etl", "--input", json.dumps({"step_seconds": 5}), "--json")
    assert r.returncode == 0, r.stderr
    task = json.loads(r.stdout)["task_id"]
    r = cli(
        "cancel",
        task,
        "--reason",
        "e2e: operator check",
        "--operator",
        "someone-else",
        "--server",
        address,
    )
    assert r.returncode == 0, r.stderr
    r = cli("events", "--task", task, "--json")
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    cancel = next(e for e in events if e["event_type"] == "TASK_CANCELLED")
    assert cancel["payload"]["operator"] == principal, cancel
    assert cancel["payload"].get("as") == "someone-else", cancel
    say(f"cancel of {task} recorded as {principal!r} (typed name kept beside it)")


def primary(exclude: str | None = None, timeout: float = 120) -> tuple[str, dict]:  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for node, addr in NODES.items():
            if node == exclude:
                continue
            s = status(addr)
            if s and s["role"] == "primary":
                return node, s
        time.sleep(0.1)
    raise SystemExit("no primary")


def etcd_health(address: str, *, tls: bool, cert: bool, peer_cert: bool = False) -> bytes:
    """GET /health from an etcd member as a client: what it answered (b"" if nothing)."""
    host, _, port = address.rpartition(":")
    request = b"GET /health HTTP/1.1\r\nHost: etcd1\r\nConnection: close\r\n\r\n"
    etcd_pki = Path(CA).parent / "etcd"  # etcd's own CA (deploy/secrets.sh)
    ctx = ssl.create_default_context(cafile=etcd_pki / "ca.pem")
    if cert:
        ctx.load_cert_chain(etcd_pki / "node1.pem", etcd_pki / "node1-key.pem")
    elif peer_cert:  # node1's certificate of the cluster CA, not of etcd's
        ctx.load_cert_chain(Path(CA).parent / "node1.pem", Path(CA).parent / "node1-key.pem")
    answer = b""
    try:
        with socket.create_connection((host, int(port)), timeout=5) as raw:
            conn = ctx.wrap_socket(raw, server_hostname="etcd1") if tls else raw
            conn.sendall(request)
            while chunk := conn.recv(4096):
                answer += chunk
    except (OSError, ssl.SSLError):
        pass
    return answer


def check_etcd_closed(address: str) -> None:
    """etcd answers TLS clients with a certificate its CA signed, and no one else (not
    even a node's peer certificate: the cluster CA is another trust domain)."""
    healthy = b'"health":"true"'
    assert healthy in etcd_health(address, tls=True, cert=True), "etcd did not answer a node"
    assert healthy not in etcd_health(address, tls=True, cert=False), "etcd needs no client cert"
    assert healthy not in etcd_health(address, tls=True, cert=False, peer_cert=True), (
        "etcd takes a certificate of the cluster CA"
    )
    assert healthy not in etcd_health(address, tls=False, cert=False), "etcd answers plaintext"
    say(f"etcd at {address}: TLS with a client certificate only")


def wait_for_workers(address: str, timeout: float = 60) -> list[dict]:  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout
    while True:
        s = status(address)
        if s and s.get("workers"):
            return list(s["workers"])
        assert time.monotonic() < deadline, f"no worker connected to {address}: {s}"
        time.sleep(0.3)


def check_nightly_schedule() -> None:
    """The examples' nightly schedule (apollo11.scheduler.examples.nightly), declared in
    code: reconciled into the log by the first primary, held by the new one after the
    kill, its next time 03:00 in Berlin."""
    r = cli("schedule", "describe", "nightly-etl", "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert (s["source"], s["spec"]["cron"], s["spec"]["tz"]) == (
        "code",
        "0 3 * * *",
        "Europe/Berlin",
    ), s
    r = cli("schedule", "next", "nightly-etl", "--count", "3", "--json")
    assert r.returncode == 0, r.stderr
    local = [t["local"] for t in json.loads(r.stdout)["next"]]
    assert all(t[11:16] == "03:00" for t in local), local
    say(f"the declared nightly-etl schedule is held across the failover: next {local[0]}")


def in_container(node: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """A command in a node's container: its environment holds the archive's URL, the
    S3 endpoint, CA and credentials file (the bucket publishes no port)."""
    return subprocess.run(
        ["docker", "exec", f"apollo11-{node}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


ARCHIVED_THROUGH = (
    "import os\n"
    "from apollo11.scheduler.bucket import load_catalog, open_bucket\n"
    "try:\n"
    "    print(load_catalog(open_bucket(os.environ['APOLLO11_ARCHIVE_URL'])).through)\n"
    "except Exception as e:\n"
    "    print(0, e)\n"
)


def archived_through(node: str) -> int:
    """The last event id the bucket's catalog holds (0 when there is none yet)."""
    r = in_container(node, "python", "-c", ARCHIVED_THROUGH)
    assert r.returncode == 0, r.stderr
    return int(r.stdout.split()[0])


def check_archive(node: str, acked: list[str]) -> None:
    """The history reached the bucket: the sealed segments up to past the end of the
    first acknowledged task (quick filler tasks fill the small segments the e2e sets),
    every object sound by `apollo11 archive verify`, and a node's data directory
    rebuilt from it by `apollo11 restore`."""
    r = cli("events", "--task", acked[0], "--limit", "1000", "--json")
    assert r.returncode == 0, r.stderr
    target = max(json.loads(line)["event_id"] for line in r.stdout.splitlines() if line.strip())
    deadline = time.monotonic() + 180
    fillers = 0
    while (through := archived_through(node)) < target:
        assert time.monotonic() < deadline, f"the bucket holds events through {through} only"
        for _ in range(5):
            r = cli("submit", "etl", "--input", json.dumps({"step_seconds": 0}), "--json")
            assert r.returncode == 0, r.stderr
            fillers += 1
        time.sleep(2)
    say(
        f"the bucket holds events through {through} (task {acked[0]} ends at {target}; "
        f"{fillers} filler tasks)"
    )
    r = in_container(node, "apollo11", "archive", "verify")
    assert r.returncode == 0 and "all sound" in r.stdout, (r.stdout, r.stderr)
    say(f"apollo11 archive verify: {r.stdout.strip().splitlines()[-1]}")
    r = in_container(
        node, "apollo11", "restore", "--data-dir", f"/tmp/e2e-restore-{time.time_ns()}"
    )
    assert r.returncode == 0, (r.stdout, r.stderr)
    say(f"apollo11 restore: {r.stdout.strip().splitlines()[-1]}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ttl", type=float, default=5.0)
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--etcd", help="HOST:PORT of an etcd member's client port, to check it")
    args = ap.parse_args()

    old, s = primary()
    say(f"primary {old}, term {s['term']}")
    check_closed(NODES[old], s["security"])
    check_operator_is_principal(NODES[old])
    check_http_closed(HTTP[old])
    if args.etcd:
        check_etcd_closed(args.etcd)
    workers = wait_for_workers(NODES[old])
    say(f"{len(workers)} worker(s) connected to {old}: " + ", ".join(w["name"] for w in workers))
    acked = []
    for i in range(args.tasks):
        r = cli(
            "submit",
            "etl",
            "--input",
            # long enough that steps are running on the workers when the primary dies
            json.dumps({"step_seconds": 2.0}),
            "--idempotency-key",
            f"e2e-{time.time_ns()}-{i}",
            "--json",
        )
        assert r.returncode == 0, r.stderr
        acked.append(json.loads(r.stdout)["task_id"])
    say(f"{len(acked)} tasks acknowledged; letting them run")
    time.sleep(1.0)
    running = (status(NODES[old]) or {}).get("running_steps", 0)
    say(f"{running} steps running on the workers")

    subprocess.run(["docker", "kill", f"apollo11-{old}"], check=True, capture_output=True)
    killed = time.monotonic()
    say(f"docker kill apollo11-{old}")
    new, s2 = primary(exclude=old, timeout=args.ttl + 30)
    took = time.monotonic() - killed
    say(f"new primary {new}, term {s2['term']} (was {s['term']}), {took:.1f}s after the kill")
    assert s2["term"] > s["term"], "the term only grows"
    assert took <= args.ttl + 2, f"takeover took {took:.1f}s, more than TTL + 2 s"

    deadline = time.monotonic() + 180
    for t in acked:
        while True:
            r = cli("task", t, "--json")
            if r.returncode == 0 and json.loads(r.stdout)["state"] in (
                "SUCCEEDED",
                "FAILED",
                "CANCELLED",
            ):
                state = json.loads(r.stdout)["state"]
                assert state == "SUCCEEDED", f"task {t} ended {state}"
                break
            assert time.monotonic() < deadline, f"task {t} did not complete"
            time.sleep(0.3)
    say(f"all {len(acked)} acknowledged tasks completed")
    # The steps that were running on the workers went on: the new primary adopted them,
    # so none was failed as lost and none ran twice.
    lost = []
    for t in acked:
        r = cli("events", "--task", t, "--limit", "1000", "--json")
        assert r.returncode == 0, r.stderr
        events = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
        lost += [e for e in events if e["event_type"] == "STEP_FAILED"]
    assert not lost, f"steps failed across the failover: {lost}"
    say("no step failed or ran twice: the running ones outlived the primary on their workers")

    subprocess.run(["docker", "start", f"apollo11-{old}"], check=True, capture_output=True)
    say(f"docker start apollo11-{old}")
    deadline = time.monotonic() + 90
    while True:
        s3 = status(NODES[old])
        if s3 and s3["role"] == "standby" and s3["leader"] and s3["leader"]["node_id"] == new:
            me = next(m for m in s3["members"] if m["node_id"] == old)
            if me["lag_events"] == 0:
                break
        assert time.monotonic() < deadline, f"{old} did not rejoin as a standby: {s3}"
        time.sleep(0.5)
    say(f"{old} rejoined as a standby of {new} and caught up")
    check_nightly_schedule()
    check_archive(new, acked)
    print(cli("status").stdout, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
