"""`apollo11 dev`: a bundled etcd and a three-node cluster on localhost, one command.

Data lives under ./.apollo11-dev/ (etcd, n1, n2, n3, and their logs). Ctrl-C
stops everything (nodes with SIGTERM, so they drain and hand over cleanly).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lease.local_etcd import LocalEtcd


@dataclass
class DevCluster:
    root: Path
    nodes: int = 3
    base_port: int = 7411
    etcd_port: int = 23790
    lease_ttl: float = 5.0
    http_base_port: int = 0  # web UI and /metrics of n1 (n2 +1, ...); 0: none
    workflows: str = "scheduler.examples"
    extra: Sequence[str] = ()
    env: dict[str, str] = field(default_factory=dict)
    etcd: LocalEtcd | None = None
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def endpoints(self) -> list[str]:
        return [f"127.0.0.1:{self.base_port + i}" for i in range(self.nodes)]

    def node_args(self, i: int) -> list[str]:
        node_id = f"n{i + 1}"
        return [
            sys.executable,
            "-m",
            "scheduler.cli",
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
            *self.extra,
        ]

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
        return proc

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.etcd = LocalEtcd(self.root / "etcd", client_port=self.etcd_port).start()
        for i in range(self.nodes):
            self.start_node(i)

    def status(self, node: str) -> dict[str, Any] | None:
        """One quick look at a node's status (None when it does not answer)."""
        from scheduler.client import SyncClient

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
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        if self.etcd is not None:
            self.etcd.stop()


def run(
    root: Path, nodes: int, base_port: int, lease_ttl: float, workflows: str, http_base_port: int
) -> int:
    dev = DevCluster(
        root,
        nodes,
        base_port,
        lease_ttl=lease_ttl,
        workflows=workflows,
        http_base_port=http_base_port,
    )
    dev.start()
    eps = ",".join(dev.endpoints)
    print(f"etcd      {dev.etcd.url if dev.etcd else ''}")
    for i, ep in enumerate(dev.endpoints):
        web = f"   web: http://{dev.http_endpoints[i]}/" if http_base_port else ""
        print(f"node n{i + 1}   {ep}{web}   log: {root / f'n{i + 1}.log'}")
    print(f"\nexport APOLLO11_SERVER={eps}")
    print("apollo11 status; apollo11 submit etl --input '{\"step_seconds\": 1}' --wait")
    print("Ctrl-C stops everything.", flush=True)
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        while not stop:
            time.sleep(0.2)
    finally:
        print("\nstopping…", flush=True)
        dev.stop()
    return 0
