"""`apollo11 dev`: a bundled etcd and a three-node cluster on localhost, one command.

Data lives under ./.apollo11-dev/ (etcd, n1, n2, n3, and their logs). Ctrl-C
stops everything (nodes with SIGTERM, so they drain and hand over cleanly).
With `--workers N` the nodes run remote (`--execution remote`) and N worker
processes (w1, w2, ...) run the steps.

It refuses to start when one of its ports is taken: a second `apollo11 dev`
once failed to start its etcd, printed the address anyway, and its nodes
joined the first one's cluster (issue 15). It prints the addresses once a
primary answers, the pid of everything it starts, and says when one of them
dies.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apollo11.lease import LocalEtcd
from apollo11.scheduler.errors import ApolloError


class PortTaken(ApolloError):
    """A port `apollo11 dev` needs is in use."""


def port_taken(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something listens on host:port (bound as the servers bind: with
    SO_REUSEADDR, so a port in TIME_WAIT counts as free)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False


@dataclass
class DevCluster:
    root: Path
    nodes: int = 3
    base_port: int = 7411
    etcd_port: int = 23790
    lease_ttl: float = 5.0
    http_base_port: int = 0  # web UI and /metrics of n1 (n2 +1, ...); 0: none
    workflows: str = "apollo11.scheduler.examples"
    workers: int = 0  # worker processes; with any, the nodes only dispatch
    worker_slots: int = 8
    extra: Sequence[str] = ()
    env: dict[str, str] = field(default_factory=dict)
    etcd: LocalEtcd | None = None
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    worker_procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    # pids ended on purpose (kill, stop), and those whose unexpected end was told
    _meant: set[int] = field(default_factory=set)
    _told: set[int] = field(default_factory=set)

    @property
    def endpoints(self) -> list[str]:
        return [f"127.0.0.1:{self.base_port + i}" for i in range(self.nodes)]

    def node_args(self, i: int) -> list[str]:
        node_id = f"n{i + 1}"
        return [
            sys.executable,
            "-m",
            "apollo11.scheduler.cli",
            "node",
            "--node-id",
            node_id,
            "--data-dir",
            str(self.root / node_id),
            "--listen",
            f"127.0.0.1:{self.base_port + i}",
            "--workflows",
            self.workflows,
            "--etcd",
            self.etcd.url if self.etcd else "",
            "--cluster",
            "dev",
            "--lease-ttl",
            str(self.lease_ttl),
            *(["--http", self.http_endpoints[i]] if self.http_base_port else []),
            *(["--execution", "remote"] if self.workers else []),
            *self.extra,
        ]

    def worker_args(self, i: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "apollo11.scheduler.cli",
            "worker",
            "--server",
            ",".join(self.endpoints),
            "--workflows",
            self.workflows,
            "--name",
            f"w{i + 1}",
            "--slots",
            str(self.worker_slots),
        ]

    def start_worker(self, i: int) -> subprocess.Popen[bytes]:
        name = f"w{i + 1}"
        out = open(self.root / f"{name}.log", "ab")  # noqa: SIM115
        proc = subprocess.Popen(
            self.worker_args(i),
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.env},
        )
        out.close()
        self.worker_procs[name] = proc
        self._note(name, f"started {name} (pid {proc.pid})")
        return proc

    @property
    def http_endpoints(self) -> list[str]:
        if not self.http_base_port:
            return []
        return [f"127.0.0.1:{self.http_base_port + i}" for i in range(self.nodes)]

    def start_node(self, i: int) -> subprocess.Popen[bytes]:
        node_id = f"n{i + 1}"
        out = open(self.root / f"{node_id}.log", "ab")  # noqa: SIM115
        proc = subprocess.Popen(
            self.node_args(i), stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **self.env}
        )
        out.close()
        self.procs[node_id] = proc
        self._note(node_id, f"started {node_id} (pid {proc.pid})")
        return proc

    def _note(self, node_id: str, sentence: str) -> None:
        """A line in the node's log from its supervisor: a node that dies by SIGKILL (the
        OOM killer, a kill loop) cannot write its own last line."""
        stamp = time.strftime("%H:%M:%S")
        with open(self.root / f"{node_id}.log", "a") as f:
            f.write(f"{stamp} apollo11 dev: {sentence}\n")

    def kill(self, node_id: str, sig: int = signal.SIGKILL) -> int:
        """Send `sig` to a node and wait for it to end (its exit status); its log says
        this was on purpose."""
        proc = self.procs.get(node_id) or self.worker_procs[node_id]
        self._meant.add(proc.pid)
        proc.send_signal(sig)
        code = proc.wait()
        self._note(node_id, f"{node_id} (pid {proc.pid}) {_how(code)}: sent on purpose")
        return code

    def unexpected_exits(self) -> dict[str, str]:
        """Nodes that ended although nobody killed or stopped them through this object:
        node id -> a sentence naming the exit status and the node's last words, once
        for each process (and a line in its log)."""
        out = {}
        for node_id, proc in (*self.procs.items(), *self.worker_procs.items()):
            code = proc.poll()
            if code is None or proc.pid in self._meant or proc.pid in self._told:
                continue
            self._told.add(proc.pid)
            out[node_id] = _died(self, node_id, proc.pid, code)
            self._note(node_id, f"{node_id} (pid {proc.pid}) {_how(code)}, not stopped by anyone")
        return out

    def ports(self) -> list[tuple[int, str]]:
        """Every fixed port this cluster listens on, and what for."""
        ports = [(self.etcd_port, "etcd")]
        ports += [(self.base_port + i, f"node n{i + 1}") for i in range(self.nodes)]
        if self.http_base_port:
            ports += [(self.http_base_port + i, f"n{i + 1}'s web UI") for i in range(self.nodes)]
        return ports

    def check_ports(self) -> None:
        taken = [(p, what) for p, what in self.ports() if port_taken(p)]
        if taken:
            listed = ", ".join(f"{p} ({what})" for p, what in taken)
            raise PortTaken(
                f"port(s) in use: {listed}. Is another `apollo11 dev` running? Stop it (Ctrl-C "
                f"in its terminal), or give this one other ports with --etcd-port, "
                f"--base-port and --http-base-port (`ss -ltnp` shows who holds them). Nothing "
                f"was started."
            )

    def start(self) -> None:
        self.check_ports()
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self.etcd = LocalEtcd(self.root / "etcd", client_port=self.etcd_port).start()
        except RuntimeError as e:
            raise ApolloError(f"etcd did not start on port {self.etcd_port}: {e}") from e
        self.prune_roster()
        for i in range(self.nodes):
            self.start_node(i)
        for i in range(self.workers):
            self.start_worker(i)

    def prune_roster(self) -> None:
        """This cluster is n1..nN now: members of an earlier run with more nodes (its
        etcd data stays in the directory) would hold every election up."""
        import asyncio

        from apollo11.lease import EtcdLease

        assert self.etcd is not None
        url = self.etcd.url
        mine = {f"n{i + 1}" for i in range(self.nodes)}

        async def prune() -> None:
            lease = EtcdLease([url], cluster="dev", ttl_s=self.lease_ttl)
            try:
                for node_id in (await lease.world()).roster - mine:
                    await lease.unregister(node_id)
            finally:
                await lease.close()

        asyncio.run(prune())

    def pids(self) -> dict[str, int]:
        """What it started: etcd and each node, by name."""
        out = {}
        if self.etcd is not None and self.etcd.proc is not None:
            out["etcd"] = self.etcd.proc.pid
        out.update({name: proc.pid for name, proc in self.procs.items()})
        out.update({name: proc.pid for name, proc in self.worker_procs.items()})
        return out

    def exited(self) -> dict[str, int]:
        """Which of what it started has exited, with the exit status."""
        out = {}
        etcd = self.etcd.proc if self.etcd is not None else None
        if etcd is not None and (code := etcd.poll()) is not None:
            out["etcd"] = code
        for name, proc in self.procs.items():
            if (code := proc.poll()) is not None:
                out[name] = code
        return out

    def status(self, node: str) -> dict[str, Any] | None:
        """One quick look at a node's status (None when it does not answer)."""
        from apollo11.scheduler.client import SyncClient

        try:
            with SyncClient(self.endpoints[int(node[1:]) - 1], retries=0, timeout_s=1) as c:
                return c.status().to_json()
        except Exception:
            return None

    def primary(
        self, exclude: str | None = None, timeout: float = 60
    ) -> tuple[str, dict[str, Any]]:
        """The live node that says it is primary, and its status."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for node, proc in self.procs.items():
                if node == exclude or proc.poll() is not None:
                    continue
                s = self.status(node)
                if s and s["role"] == "primary":
                    return node, s
            time.sleep(0.05)
        raise RuntimeError(f"no primary within {timeout:g}s")

    def stop(self) -> None:
        everything = [*self.worker_procs.values(), *self.procs.values()]
        for proc in everything:
            if proc.poll() is None:
                self._meant.add(proc.pid)
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        for proc in everything:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        if self.etcd is not None:
            self.etcd.stop()


def run(
    root: Path,
    nodes: int,
    base_port: int,
    lease_ttl: float,
    workflows: str,
    http_base_port: int,
    etcd_port: int = 23790,
    workers: int = 0,
) -> int:
    dev = DevCluster(
        root,
        nodes,
        base_port,
        etcd_port=etcd_port,
        lease_ttl=lease_ttl,
        workflows=workflows,
        http_base_port=http_base_port,
        workers=workers,
    )
    try:
        dev.start()
    except ApolloError as e:
        dev.stop()
        print(f"apollo11 dev: {e}", file=sys.stderr, flush=True)
        return 1
    # What is printed below invites `apollo11 submit` at once: a script that ran it on
    # a loaded machine met nodes still importing, past the client's connect deadline.
    try:
        dev.primary(timeout=60)
    except RuntimeError as e:
        print(f"apollo11 dev: {e} (the nodes' logs say why)", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        print("\nstopping…", flush=True)
        dev.stop()
        return 0
    pids = dev.pids()
    eps = ",".join(dev.endpoints)
    print(f"etcd      {dev.etcd.url if dev.etcd else ''}   pid {pids.get('etcd')}")
    for i, ep in enumerate(dev.endpoints):
        name = f"n{i + 1}"
        web = f"   web: http://{dev.http_endpoints[i]}/" if http_base_port else ""
        print(f"node {name}   {ep}   pid {pids[name]}{web}   log: {root / f'{name}.log'}")
    for name in dev.worker_procs:
        log = root / f"{name}.log"
        print(f"worker {name}   {dev.worker_slots} slots   pid {pids[name]}   log: {log}")
    print(f"\nexport APOLLO11_SERVER={eps}")
    print("apollo11 status; apollo11 submit etl --input '{\"step_seconds\": 1}' --wait")
    print("Ctrl-C stops everything.", flush=True)
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    etcd_told = False
    try:
        while not stop:
            time.sleep(0.2)
            if stop:
                break
            for line in dev.unexpected_exits().values():
                print(line, flush=True)
            code = dev.exited().get("etcd")
            if code is not None and not etcd_told:
                etcd_told = True
                print(_died(dev, "etcd", pids["etcd"], code), flush=True)
    finally:
        print("\nstopping…", flush=True)
        dev.stop()
    return 0


def _died(dev: DevCluster, name: str, pid: int, code: int) -> str:
    """What to print when something dev started exits: which, how, and its last words."""
    log = dev.root / ("etcd.log" if name == "etcd" else f"{name}.log")
    last = ""
    try:
        lines = log.read_text(errors="replace").splitlines()
        last = "".join(f"\n    {line}" for line in lines[-3:])
    except OSError:
        pass
    return f"!! {name} (pid {pid}) {_how(code)}; its log: {log}{last}"


def _how(code: int) -> str:
    return f"exited ({f'killed by signal {-code}' if code < 0 else f'exit status {code}'})"
