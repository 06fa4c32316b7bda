"""A real node on a real SeaweedFS, with tiny segments and local log retention: once
a task's segments are gone from its disk, `apollo11 events --task`, `apollo11 task`
(and its --as-of) and an offline `apollo11 replay --until` answer from the bucket as
they answered from the disk, and say so; a corrupt object is reported, never
skipped; without an archive the answer says what is gone."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from apollo11.lease.local_etcd import free_port
from apollo11.scheduler.bucket import BucketHistory, load_catalog, open_bucket
from apollo11.scheduler.client import SyncClient
from apollo11.scheduler.log import parse_segment_name
from apollo11.scheduler.testing.seaweed import BUCKET, LocalSeaweed
from tests.nodes import APOLLO11, ROOT, NodeProc, start_node

pytestmark = pytest.mark.timeout(600)

ARGS = ("--segment-max-bytes", "4096", "--snapshot-interval", "60", "--log-retention", "snapshots")


def _start(data: Path, env: dict[str, str], *args: str) -> NodeProc:
    return start_node(data, *ARGS, *args, env=env).drained()


def _cli(*args: str, server: str = "", env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **env}
    if server:
        full["APOLLO11_SERVER"] = server
    return subprocess.run(
        [*APOLLO11, *args], cwd=ROOT, capture_output=True, text=True, timeout=120, env=full
    )


_as_of = re.compile(r"of event \d+")


def _attempts(html: str) -> str:
    """The task page's attempts table (steps, attempts, states): from its events."""
    table = html[html.index('<table id="attempts">') :].split("</table>")[0]
    assert 'class="attempt"' in table, "the task's attempts are listed"
    return table


def _exported(out: Path, task_id: str, server: str, env: dict[str, str]) -> tuple[dict, str]:  # type: ignore[type-arg]
    """`apollo11 export` into `out`: the task's line, and what the command said."""
    out.unlink(missing_ok=True)
    done = _cli("export", "--output", str(out), server=server, env=env)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    return next(t for t in lines if t["task_id"] == task_id), done.stderr


def _first_on_disk(data: Path) -> int:
    return min(f for p in (data / "log").iterdir() if (f := parse_segment_name(p.name)))


def _until(cond, timeout: float = 180.0, what: str = "") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _run_tasks(c: SyncClient, n: int) -> list[str]:
    ids = [c.submit("etl", {"step_seconds": 0}).task_id for _ in range(n)]
    for task_id in ids:
        assert c.wait(task_id, timeout=60).state == "SUCCEEDED"
    return ids


def _drop_until_gone(node: NodeProc, data: Path, last: int) -> None:
    """More work until local retention has deleted every segment up to event `last`
    (it deletes only what the bucket holds, after a snapshot: both come with work)."""
    deadline = time.monotonic() + 240
    with SyncClient(node.address) as c:
        while _first_on_disk(data) <= last:
            assert time.monotonic() < deadline, "retention never dropped the segments"
            _run_tasks(c, 3)


def test_old_events_come_back_from_the_bucket_and_a_corrupt_object_is_reported(
    tmp_path: Path, archive_url: str, s3_server: LocalSeaweed
) -> None:
    env = s3_server.env()
    data = tmp_path / "n1"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    node = _start(data, env, "--archive-url", archive_url, "--http", f"127.0.0.1:{port}")
    try:
        with SyncClient(node.address) as c:
            task_id = _run_tasks(c, 4)[0]
            evs, _ = c.events(task_id=task_id, limit=1000)
        last = max(e.event_id for e in evs)
        at = evs[len(evs) // 2].event_id
        events_before = _cli("events", "--task", task_id, "--json", server=node.address, env=env)
        task_before = _cli("task", task_id, server=node.address, env=env)
        as_of_before = _cli(
            "task", task_id, "--as-of", str(at), "--json", server=node.address, env=env
        )
        assert events_before.returncode == 0 and task_before.returncode == 0
        assert "bucket" not in events_before.stderr, "all on disk so far"
        page_before = httpx.get(f"{base}/tasks/{task_id}").text
        assert 'id="history-note"' not in page_before
        line_before, _ = _exported(tmp_path / "e.jsonl", task_id, node.address, env)
        assert "incomplete" not in line_before

        _drop_until_gone(node, data, last)
        assert load_catalog(open_bucket(archive_url)).segments[0].first == 1

        events_after = _cli("events", "--task", task_id, "--json", server=node.address, env=env)
        assert events_after.returncode == 0, events_after.stderr
        assert events_after.stdout == events_before.stdout
        first = _first_on_disk(data)
        assert f"(events before {first} read from the bucket)" in events_after.stderr
        task_after = _cli("task", task_id, server=node.address, env=env)
        assert task_after.returncode == 0, task_after.stderr
        # the same but for the event the node's view is as of
        assert _as_of.sub("", task_after.stdout) == _as_of.sub("", task_before.stdout)
        assert "read from the bucket" in task_after.stderr
        as_of_after = _cli(
            "task", task_id, "--as-of", str(at), "--json", server=node.address, env=env
        )
        assert as_of_after.returncode == 0, as_of_after.stderr
        assert as_of_after.stdout == as_of_before.stdout
        # the web timeline and the task's events page: the same events, and they say so
        page = httpx.get(f"{base}/tasks/{task_id}")
        assert page.status_code == 200
        assert f"(events before {first} read from the bucket; slower)" in page.text
        assert _attempts(page.text) == _attempts(page_before)
        listed = httpx.get(f"{base}/events", params={"task": task_id}).text
        assert re.findall(r"<tr><td>(\d+)</td>", listed) == [str(e.event_id) for e in evs]
        assert "read from the bucket" in listed
        # export reads the task's oldest events back from the bucket too: the same line
        line_after, said = _exported(tmp_path / "e.jsonl", task_id, node.address, env)
        assert line_after == line_before
        assert "incomplete" not in said
        assert node.stop() == 0
    finally:
        if node.alive():
            node.stop(signal.SIGKILL)

    # Offline: the data directory alone no longer reaches back to `at`.
    alone = _cli("replay", "--data-dir", str(data), "--until", str(at), "--task", task_id, env={})
    assert alone.returncode == 2
    assert "no --archive-url is set" in alone.stderr
    replayed = _cli(
        "replay", "--data-dir", str(data), "--until", str(at), "--task", task_id, "--json",
        "--archive-url", archive_url, env=env,
    )  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr
    assert "read from the bucket" in replayed.stderr
    past = json.loads(replayed.stdout)
    view = json.loads(as_of_before.stdout)
    assert past["task_id"] == task_id
    assert {s["name"]: (s["status"], s["attempt"]) for s in past["steps"]} == {
        s["name"]: (s["state"], s["attempt"]) for s in view["steps"]
    }

    # A damaged object in the bucket: the answer fails naming it, never a hole.
    objects = open_bucket(archive_url)
    entry = BucketHistory(objects).catalog().segments[0]
    prefix = archive_url.split("/", 3)[3]
    s3_server.client().put_object(Bucket=BUCKET, Key=f"{prefix}/{entry.key}", Body=b"damaged")
    node = _start(data, env, "--archive-url", archive_url)
    try:
        broken = _cli("events", "--task", task_id, server=node.address, env=env)
        assert broken.returncode != 0
        assert entry.key in broken.stderr and "does not decompress" in broken.stderr
        assert node.stop() == 0
    finally:
        if node.alive():
            node.stop(signal.SIGKILL)

    # The same node without its archive: what is on disk, and a sentence for the rest.
    node = _start(data, env)
    try:
        bare = _cli("events", "--task", task_id, "--json", server=node.address, env=env)
        assert bare.returncode == 0, bare.stderr
        first = _first_on_disk(data)
        assert (
            f"(events before {first} are no longer on this node's disk and no --archive-url "
            f"is set)" in bare.stderr
        )
        assert len(bare.stdout.splitlines()) < len(events_before.stdout.splitlines())
        # export says which lines lack their oldest events, and stays idempotent
        line, said = _exported(tmp_path / "a.jsonl", task_id, node.address, env)
        again, _ = _exported(tmp_path / "b.jsonl", task_id, node.address, env)
        assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
        assert line == again
        assert line["events_from"] == first
        assert line["incomplete"] == (
            f"events before {first} are no longer on this node's disk and no --archive-url is set"
        )
        assert len(line["events"]) < len(line_before["events"])
        assert re.search(r"incomplete: \d+ exported task\(s\) lack their oldest events", said)
        assert node.stop() == 0
    finally:
        if node.alive():
            node.stop(signal.SIGKILL)
