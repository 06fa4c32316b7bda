"""A real node process archiving to a real SeaweedFS: killed with SIGKILL while an
upload is in flight (resumed by the next start: no duplicate, no hole), then wiped,
restored with `apollo11 restore`, and started again with every acknowledged task."""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import time
from pathlib import Path

from apollo11.scheduler.bucket import load_catalog, open_bucket, verify_archive
from apollo11.scheduler.client import SyncClient
from apollo11.scheduler.log import parse_segment_name
from apollo11.scheduler.state.snapshot import watermark_of
from apollo11.scheduler.testing.seaweed import BUCKET, LocalSeaweed
from tests.nodes import NodeProc, cli, start_node

ARGS = ("--segment-max-bytes", "4096", "--snapshot-interval", "60")


def _start(data: Path, url: str, env: dict[str, str]) -> NodeProc:
    return start_node(data, "--archive-url", url, *ARGS, env=env).drained()


def _sealed_end(data: Path) -> int:
    """The last event of the newest sealed segment on disk (0: none sealed)."""
    firsts = sorted(f for p in (data / "log").iterdir() if (f := parse_segment_name(p.name)))
    return firsts[-1] - 1 if len(firsts) > 1 else 0


def _until(cond, timeout: float = 60.0, what: str = "") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _quiet(node: NodeProc, for_s: float = 2.0) -> None:
    """Wait until the node has said nothing of its archive for `for_s` seconds."""
    seen, since = -1, time.monotonic()
    deadline = since + 60
    while time.monotonic() - since < for_s:
        said = sum("archive:" in line for line in node.lines)
        if said != seen:
            seen, since = said, time.monotonic()
        assert time.monotonic() < deadline, "the archive never went quiet"
        time.sleep(0.2)


def _through(objects) -> int:  # type: ignore[no-untyped-def]
    try:
        return int(load_catalog(objects).through)
    except Exception:
        return 0


def _caught_up(objects, data: Path) -> bool:  # type: ignore[no-untyped-def]
    """The bucket holds every sealed segment and the newest snapshot on disk: with no
    new events the shipper has nothing left to put (plan.decide says idle)."""
    try:
        catalog = load_catalog(objects)
    except Exception:
        return False
    sealed = _sealed_end(data)
    if not catalog.through >= sealed > 0:
        return False
    marks = [m for p in (data / "snapshots").iterdir() if (m := watermark_of(p.name))]
    newest = max((m for m in marks if m <= catalog.through), default=None)
    held = catalog.snapshots[-1].watermark if catalog.snapshots else None
    return newest is None or (held is not None and held >= newest)


def _submit(c: SyncClient, n: int) -> dict[str, int]:
    """n etl tasks, run to the end: task id -> the event id of its last event."""
    ids = [c.submit("etl", {"step_seconds": 0}).task_id for _ in range(n)]
    done = {}
    for task_id in ids:
        assert c.wait(task_id, timeout=60).state == "SUCCEEDED"
        events, _ = c.events(task_id=task_id, limit=1000)
        done[task_id] = max(e.event_id for e in events)
    return done


def test_kill_9_mid_upload_then_wiped_and_restored(
    tmp_path: Path, archive_url: str, s3_server: LocalSeaweed
) -> None:
    env = s3_server.env()
    objects = open_bucket(archive_url)
    data = tmp_path / "n1"
    node = _start(data, archive_url, env)
    acked: dict[str, int] = {}
    try:
        with SyncClient(node.address) as c:
            acked |= _submit(c, 15)
        # The shipper caught up and quiet before the bucket stalls: stopped in the middle
        # of a call (a lagging bucket under load, a snapshot going up), it would fail
        # that call after its timeout and then fail to read the catalog again and again,
        # never saying the upload this test kills it in. The snapshot counts: it goes up
        # only once the segments are all in, so on a loaded machine its upload is what
        # is still in flight when the segments' end is already in the catalog.
        _until(lambda: _caught_up(objects, data), what="the uploads")
        _quiet(node)

        # The bucket stalls (SIGSTOP: connections hang, as a black-holed network), the
        # node goes on, seals more segments, starts uploading one: kill -9 it then.
        assert s3_server.proc is not None
        s3_server.proc.send_signal(signal.SIGSTOP)
        try:
            stalled_at = _sealed_end(data)
            with SyncClient(node.address) as c:
                acked |= _submit(c, 15)
            assert _sealed_end(data) > stalled_at, "segments were sealed meanwhile"
            uploading = f"archive: uploading segment {stalled_at + 1}.."
            _until(lambda: any(uploading in line for line in node.lines), what=uploading)
            time.sleep(0.5)  # in its PUT (the step is said before it is carried out)
            node.stop(signal.SIGKILL)
        finally:
            s3_server.proc.send_signal(signal.SIGCONT)
        assert _through(objects) <= stalled_at

        node = _start(data, archive_url, env)
        with SyncClient(node.address) as c:
            need = max(acked.values())
            while _sealed_end(data) < need:  # fill the open segment until they are sealed
                _submit(c, 3)
        _until(lambda: _through(objects) >= need, what="the resumed uploads")
        catalog = load_catalog(objects)
        assert catalog.problems() == []
        firsts = [e.first for e in catalog.segments]
        assert firsts == sorted(set(firsts))
        assert all(b.first == a.last + 1 for a, b in itertools.pairwise(catalog.segments))
        prefix = archive_url.split("/", 3)[3]
        listed = s3_server.client().list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/segments/")
        keys = sorted(o["Key"][len(prefix) + 1 :] for o in listed.get("Contents", ()))
        assert keys == sorted(e.key for e in catalog.segments), "no duplicate, no stray object"
        assert verify_archive(objects).ok
        assert node.stop() == 0
    finally:
        if node.alive():
            node.stop(signal.SIGKILL)

    # The disk is lost; the node comes back from the bucket alone.
    shutil.rmtree(data)
    done = cli("restore", "--archive-url", archive_url, "--data-dir", str(data))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "restored" in done.stdout
    checked = cli("archive", "verify", "--archive-url", archive_url)
    assert checked.returncode == 0 and "all sound" in checked.stdout, (
        checked.stdout + checked.stderr
    )
    node = _start(data, archive_url, env)
    try:
        with SyncClient(node.address) as c:
            for task_id in acked:
                assert c.task(task_id).state == "SUCCEEDED", task_id
            # and it works on: a new task, a new term
            assert c.wait(c.submit("etl", {"step_seconds": 0}).task_id).state == "SUCCEEDED"
    finally:
        assert node.stop() == 0


def test_a_node_refuses_to_start_on_a_wrong_url_or_without_credentials(
    tmp_path: Path, s3_server: LocalSeaweed
) -> None:
    import subprocess

    from tests.nodes import APOLLO11, ROOT

    def node(url: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        cmd = [*APOLLO11, "node", "--data-dir", str(tmp_path / "d"), "--archive-url", url]
        cmd += ["--listen", "127.0.0.1:0"]
        return subprocess.run(
            cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False
        )

    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    wrong = node("https://apollo-archive/x", {**base, **s3_server.env()})
    assert wrong.returncode == 2
    assert "--archive-url must start with s3://" in wrong.stderr
    no_creds = {k: v for k, v in s3_server.env().items() if "ACCESS_KEY" not in k}
    missing = node(f"s3://{BUCKET}/x", {**base, **no_creds})
    assert missing.returncode != 0
    assert "no S3 credentials" in missing.stderr and "AWS_ACCESS_KEY_ID" in missing.stderr
    nobucket = node("s3://no-such-bucket/x", {**base, **s3_server.env()})
    assert nobucket.returncode != 0 and "'no-such-bucket' does not exist" in nobucket.stderr
