"""`apollo11 bench archive --restore-events N`: a node restored from the bucket,
measured for real at N events (10^7 for issue 34's target), not extrapolated.

1. The bucket (built once; `--keep DIR` keeps it, and a second run on the same DIR
   measures again without building): N events of etl histories (tasks of five
   steps, payloads as every bench here uses: testing/history.py) appended by the
   product's own store (its log writer, its state, its snapshots as a node takes
   them: every 1,000 events, at most one a second; segments of the node's default
   100 MB; fsync off: what is measured is the restore, not the writer), the
   shipper running meanwhile as on a primary (it uploads sealed segments, and a
   snapshot once the segments reach it). The writer goes on until a sealed
   segment holds event N: the bucket ends at the last sealed segment, as on a
   node, so it holds N events or a little more.
   Then a second prefix with the same segment objects and a catalog without
   snapshots: the worst case, every event replayed.
2. `apollo11 restore --archive-url URL --data-dir DIR` as a user runs it (a
   subprocess): its wall time and peak RSS, for each prefix.
3. `apollo11 node --data-dir DIR` (standalone) started on what it built: the time
   until it serves (its state rebuilt), its peak RSS, and the first and last task
   of the history answered by it.

Beside each figure, the machine's load while it ran (the load average and
/proc/pressure/cpu, sampled): this machine's two cores are shared.
Target: restore + node ready <= 300 s for 10^7 events.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from apollo11.scheduler import defaults
from apollo11.scheduler.bucket import CATALOG, Catalog, Shipper, load_catalog, open_bucket
from apollo11.scheduler.client import SyncClient
from apollo11.scheduler.errors import BucketError
from apollo11.scheduler.log import Draft, EventType, FsyncPolicy, LogConfig
from apollo11.scheduler.state import Store, StoreConfig
from apollo11.scheduler.testing import LocalSeaweed, etl_history
from apollo11.scheduler.tools.bench.shipping import ship_until_idle

TARGET_S = 300.0
SEGMENT_BYTES = defaults.SEGMENT_MAX_BYTES  # as a node writes them
SNAPSHOT_MIN_INTERVAL_S = 1.0  # a node's default (scheduler/config.py)
WRITE_BATCH = 1000
SAMPLE_S = 2.0
STATE_FILE = "restore-bench.json"  # in --keep DIR: the built bucket, to measure again
APOLLO11 = [sys.executable, "-m", "apollo11.scheduler.cli"]


def history_config(
    segment_bytes: int = SEGMENT_BYTES, snapshot_min_interval_s: float = SNAPSHOT_MIN_INTERVAL_S
) -> StoreConfig:
    return StoreConfig(
        log=LogConfig(segment_max_bytes=segment_bytes, fsync=FsyncPolicy.UNSAFE_NEVER),
        snapshot_interval=defaults.SNAPSHOT_INTERVAL,
        snapshot_min_interval_s=snapshot_min_interval_s,
    )


@dataclasses.dataclass
class _Host:
    """The node as the shipper sees it: a primary with a store."""

    store: Store | None
    role: str = "primary"
    cluster_id: str = "restore-bench"
    reshaping: bool = False
    notices: list[str] = dataclasses.field(default_factory=list)

    def notice(self, text: str) -> None:
        self.notices.append(text)


def _sealed_end(store: Store) -> int:
    segs = store.log.segments
    return segs[-2].last_id if len(segs) > 1 else 0


async def build_history(
    root: Path,
    url: str,
    events: int,
    *,
    segment_bytes: int = SEGMENT_BYTES,
    snapshot_min_interval_s: float = SNAPSHOT_MIN_INTERVAL_S,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """A primary's data directory at `root` with at least `events` events in sealed
    segments, shipped to `url` as it was written, and a snapshot in the bucket that
    a restore can start from; what it took."""
    config = history_config(segment_bytes, snapshot_min_interval_s)
    store = Store.open(root, config=config, instance_id="n1")
    it = etl_history(10**9, seed=3, concurrency=50)
    ship = Shipper(
        _Host(store), open_bucket(url), node_id="n1", cluster="bench", poll_s=0.2, backoff_max_s=1
    )
    running = asyncio.create_task(ship.run())
    t0 = time.perf_counter()
    await _write_until(store, it, events, ship, progress)
    write_s = time.perf_counter() - t0
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    t1 = time.perf_counter()
    await ship_until_idle(ship)
    # The snapshot last uploaded may be past the last sealed segment (the writer
    # outran the shipper, which uploads one once the segments are in): a node writes
    # on, and so does this, a segment more, after which the segments reach it.
    for _ in range(3):
        if ship.catalog is not None and ship.catalog.restorable() is not None:
            break
        await _write_until(store, it, _sealed_end(store) + 1, ship, progress)
        await ship_until_idle(ship)
    if ship.catalog is None or ship.catalog.restorable() is None:
        raise RuntimeError(f"no restorable snapshot in the bucket: {ship.sentence}")
    ship_s = time.perf_counter() - t1
    raw = sum(s.size for s in store.log.segments)
    through = ship.catalog.through if ship.catalog is not None else 0
    check = _first_and_last_task(store, through)
    written = store.log.durable_id
    await store.close()
    return {
        "events_written": written,
        "raw_log_bytes": raw,
        "write_s": round(write_s, 1),
        "ship_rest_s": round(ship_s, 1),
        "check_tasks": check,
    }


async def _write_until(
    store: Store,
    it: Iterator[Draft],
    events: int,
    ship: Shipper,
    progress: Callable[[str], None],
) -> None:
    """Append until a sealed segment holds event `events`."""
    t0 = said = time.perf_counter()
    while _sealed_end(store) < events:
        await store.log.append_many(list(itertools.islice(it, WRITE_BATCH)))
        if time.perf_counter() - said >= 30:
            said = time.perf_counter()
            through = ship.catalog.through if ship.catalog is not None else 0
            progress(
                f"written {store.log.durable_id:,} events in {said - t0:.0f} s; "
                f"{through:,} in the bucket"
            )


def _first_and_last_task(store: Store, through: int) -> list[str]:
    """The first and the last task submitted in events 1..`through`: what the node
    started on the restored directory is asked for."""
    first = next(store.log.read(1, 1)).task_id
    last = first
    for e in store.log.read(max(1, through - 10_000), through):
        if e.event_type == EventType.TASK_SUBMITTED:
            last = e.task_id
    return [first, last]


def without_snapshots(src_url: str, dst_url: str) -> Catalog:
    """`dst_url` holds the segments of `src_url` and a catalog naming no snapshot: a
    restore from it replays every event (the worst case)."""
    src, dst = open_bucket(src_url), open_bucket(dst_url)
    catalog = load_catalog(src)
    for s in catalog.segments:
        data = src.get(s.key)
        if data is None:
            raise BucketError(f"{s.key} is named by the catalog of {src_url} but missing")
        dst.put(s.key, data)
    bare = dataclasses.replace(catalog, snapshots=())
    dst.put(CATALOG, bare.encode())
    return bare


def bucket_figures(url: str) -> dict[str, Any]:
    c = load_catalog(open_bucket(url))
    snap = c.restorable()
    out: dict[str, Any] = {
        "events": c.through,
        "segments": len(c.segments),
        "raw_bytes": sum(s.size for s in c.segments),
        "stored_bytes": sum(s.stored for s in c.segments),
        "snapshot": None,
    }
    if snap is not None:
        files = (*snap.chunks, snap.file)
        out["snapshot"] = {
            "watermark": snap.watermark,
            "tail_events": c.through - snap.watermark,
            "chunks": len(snap.chunks),
            "raw_bytes": sum(f.size for f in files),
            "stored_bytes": sum(f.stored for f in files),
        }
    return out


# ------------------------------------------------------------------ the load


class LoadSampler:
    """The load average and the CPU pressure, sampled on a thread while a figure is
    taken: what else ran on the machine meanwhile."""

    def __init__(self, every_s: float = SAMPLE_S) -> None:
        self.every_s = every_s
        self.samples: list[tuple[float, float]] = []  # (load1, cpu some avg10)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load-sampler", daemon=True)

    def __enter__(self) -> LoadSampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._sample()

    def _sample(self) -> None:
        self.samples.append((os.getloadavg()[0], cpu_pressure()))

    def summary(self) -> dict[str, Any]:
        return summarize_load(self.samples)


def cpu_pressure(text: str | None = None) -> float:
    """/proc/pressure/cpu's "some avg10" (% of the last 10 s some task waited for a
    CPU); -1 where the kernel has no PSI."""
    if text is None:
        try:
            text = Path("/proc/pressure/cpu").read_text()
        except OSError:
            return -1.0
    m = re.search(r"^some avg10=([0-9.]+)", text, re.M)
    return float(m.group(1)) if m else -1.0


def summarize_load(samples: list[tuple[float, float]]) -> dict[str, Any]:
    if not samples:
        return {}
    loads = [s[0] for s in samples]
    psi = [s[1] for s in samples if s[1] >= 0]
    out: dict[str, Any] = {
        "samples": len(samples),
        "load1_min": round(min(loads), 2),
        "load1_mean": round(sum(loads) / len(loads), 2),
        "load1_max": round(max(loads), 2),
    }
    if psi:
        out["cpu_some_avg10_mean"] = round(sum(psi) / len(psi), 1)
        out["cpu_some_avg10_max"] = round(max(psi), 1)
    return out


# ----------------------------------------------------- the restore, as a user


def _rss_mb(kb: int) -> float:
    return round(kb / 1024, 1)


def run_restore(url: str, data_dir: Path, env: Mapping[str, str]) -> dict[str, Any]:
    """`apollo11 restore` in a subprocess: wall time, its peak RSS, its last line."""
    cmd = [*APOLLO11, "restore", "--archive-url", url, "--data-dir", str(data_dir)]
    with LoadSampler() as load:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            cmd, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        assert proc.stdout is not None
        out = proc.stdout.read()
        # wait4, not wait: the child's own peak RSS comes with its status
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
    text = out.decode(errors="replace").strip()
    if proc.returncode != 0:
        raise RuntimeError(f"apollo11 restore exited {proc.returncode}: {text[-2000:]}")
    return {
        "command": " ".join(cmd[3:]),
        "wall_s": round(wall, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "rss_peak_mb": _rss_mb(usage.ru_maxrss),
        "said": text.splitlines()[-1] if text else "",
        "load": load.summary(),
    }


def _cpu_s(pid: int) -> float:
    """The process's CPU time so far (user + system, /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_rss_kb(pid: int) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    m = re.search(r"^VmHWM:\s+(\d+) kB", text, re.M)
    return int(m.group(1)) if m else 0


def start_node(
    data_dir: Path, env: Mapping[str, str], check: list[str], timeout_s: float = 3600
) -> dict[str, Any]:
    """`apollo11 node` (standalone) on the restored directory: the time until it
    serves, its peak RSS by then, and the tasks `check` as it answers them."""
    log_path = data_dir.with_name(data_dir.name + "-node.log")
    cmd = [
        *APOLLO11,
        "node",
        "--data-dir",
        str(data_dir),
        "--listen",
        "127.0.0.1:0",
        "--workflows",
        "apollo11.scheduler.examples",
    ]
    with LoadSampler() as load, open(log_path, "wb") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=log, stderr=log)
        try:
            port = _wait_serving(proc, log_path, t0 + timeout_s)
            ready = time.perf_counter() - t0
            rss = _peak_rss_kb(proc.pid)
            cpu = _cpu_s(proc.pid)
            with SyncClient(f"127.0.0.1:{port}") as client:
                states = {t: client.task(t).state for t in check}
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    line = next(
        (ln for ln in log_path.read_text(errors="replace").splitlines() if "serving on" in ln), ""
    )
    return {
        "ready_s": round(ready, 1),
        "cpu_s": round(cpu, 1),
        "rss_peak_mb": _rss_mb(rss),
        "tasks": states,
        "said": line.strip()[-300:],
        "load": load.summary(),
    }


def _wait_serving(proc: subprocess.Popen[bytes], log_path: Path, deadline: float) -> int:
    while time.perf_counter() < deadline:
        m = re.search(r"serving on port (\d+)", log_path.read_text(errors="replace"))
        if m:
            return int(m.group(1))
        if proc.poll() is not None:
            raise RuntimeError(f"the node exited {proc.returncode}: see {log_path}")
        time.sleep(0.2)
    raise RuntimeError(f"the node did not serve in time: see {log_path}")


# ------------------------------------------------------------------- the run


@dataclasses.dataclass
class _Kept:
    """A built bucket, kept in --keep DIR to be measured again."""

    root: Path
    ports: dict[str, int]
    urls: dict[str, str]  # "snapshot" / "no_snapshot" -> url
    build: dict[str, Any]

    def save(self) -> None:
        (self.root / STATE_FILE).write_text(
            json.dumps({"ports": self.ports, "urls": self.urls, "build": self.build}, indent=1)
        )

    @classmethod
    def load(cls, root: Path) -> _Kept | None:
        try:
            d = json.loads((root / STATE_FILE).read_text())
        except FileNotFoundError:
            return None
        return cls(root, d["ports"], d["urls"], d["build"])


def _server(root: Path, ports: dict[str, int] | None) -> LocalSeaweed:
    server = LocalSeaweed(root / "s3")
    if ports is not None:
        server.ports = ports  # its data names them: the same server again
    return server


def run(
    events: int,
    workdir: str | None,
    progress: Callable[[str], None],
    *,
    keep: str | None = None,
    segment_bytes: int = SEGMENT_BYTES,
    cases: tuple[str, ...] = ("snapshot", "no_snapshot"),
) -> dict[str, Any]:
    base = Path(keep or workdir or os.getcwd()).resolve() / (
        "" if keep else f"apollo11-restore-bench-{os.getpid()}"
    )
    base.mkdir(parents=True, exist_ok=True)
    kept = _Kept.load(base) if keep else None
    if kept is not None and kept.build.get("events_asked") != events:
        raise RuntimeError(
            f"{base} holds a bucket of {kept.build.get('events_asked')} events, not {events}: "
            f"name another --keep"
        )
    server = _server(base, kept.ports if kept else None)
    result: dict[str, Any] = {"events_asked": events, "uptime_before": _uptime()}
    try:
        progress("starting SeaweedFS on loopback")
        server.start()
        env = server.env()
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            if kept is None:
                kept = _build(base, server, events, segment_bytes, progress)
            result["build"] = kept.build
            check = list(kept.build["check_tasks"])
            for case in cases:
                result[case] = _measure(base, kept.urls[case], case, env, check, progress)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    finally:
        server.stop()
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
    result["uptime_after"] = _uptime()
    result["targets"] = {c: result[c]["total_s"] <= TARGET_S for c in cases if c in result}
    return result


def _build(
    base: Path,
    server: LocalSeaweed,
    events: int,
    segment_bytes: int,
    progress: Callable[[str], None],
) -> _Kept:
    prefix = f"s3://{server.bucket}/restore-{events}-{int(time.time())}"
    urls = {"snapshot": f"{prefix}/with-snapshot", "no_snapshot": f"{prefix}/no-snapshot"}
    progress(f"building the bucket: {events:,} events written and shipped")
    with LoadSampler(every_s=10) as load:
        built = asyncio.run(
            build_history(
                base / "primary",
                urls["snapshot"],
                events,
                segment_bytes=segment_bytes,
                progress=progress,
            )
        )
        progress("copying the segments to a prefix without snapshots")
        without_snapshots(urls["snapshot"], urls["no_snapshot"])
    built.update(
        {
            "events_asked": events,
            "segment_bytes": segment_bytes,
            "bucket": bucket_figures(urls["snapshot"]),
            "load": load.summary(),
        }
    )
    shutil.rmtree(base / "primary", ignore_errors=True)  # the bucket is what is measured
    kept = _Kept(base, server.ports, urls, built)
    kept.save()
    return kept


def _measure(
    base: Path,
    url: str,
    case: str,
    env: Mapping[str, str],
    check: list[str],
    progress: Callable[[str], None],
) -> dict[str, Any]:
    target = base / f"restored-{case}"
    shutil.rmtree(target, ignore_errors=True)
    progress(f"{case}: apollo11 restore")
    restore = run_restore(url, target, env)
    progress(f"{case}: restored in {restore['wall_s']} s; starting a node on it")
    node = start_node(target, env, check)
    out = {
        "bucket": bucket_figures(url),
        "restore": restore,
        "node": node,
        "total_s": round(restore["wall_s"] + node["ready_s"], 1),
    }
    out["events_per_s"] = round(out["bucket"]["events"] / max(out["total_s"], 1e-9))
    shutil.rmtree(target, ignore_errors=True)
    return out


def _uptime() -> str:
    try:
        return subprocess.run(
            ["uptime"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        return f"load average {os.getloadavg()}"


def failed(r: Mapping[str, Any]) -> str:
    missed = [k for k, ok in r.get("targets", {}).items() if not ok]
    return f"missed: restore {', '.join(missed)}" if missed else ""


def summary_rows(r: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    b = r["build"]
    bk = b["bucket"]
    mb = 1024 * 1024
    yield (
        f"bucket: {bk['events']:,} events in {bk['segments']} segments",
        f"{bk['raw_bytes'] / mb:,.0f} MB raw, {bk['stored_bytes'] / mb:,.0f} MB stored "
        f"({bk['raw_bytes'] / max(1, bk['stored_bytes']):.1f}x); built in {b['write_s']} s "
        f"+ {b['ship_rest_s']} s",
    )
    for case in ("snapshot", "no_snapshot"):
        if case not in r:
            continue
        c = r[case]
        rs, nd = c["restore"], c["node"]
        snap = c["bucket"]["snapshot"]
        what = (
            f"snapshot {snap['watermark']:,} + {snap['tail_events']:,} events"
            if snap
            else "no snapshot: every event replayed"
        )
        ok = "met" if r["targets"][case] else "MISSED"
        yield (
            f"restore, {what}",
            f"{rs['wall_s']} s, {rs['cpu_s']} s CPU (RSS peak {rs['rss_peak_mb']} MB; load1 mean "
            f"{rs['load'].get('load1_mean')}, cpu some avg10 mean "
            f"{rs['load'].get('cpu_some_avg10_mean')} %)",
        )
        yield (
            "  node on it, until it serves",
            f"{nd['ready_s']} s, {nd['cpu_s']} s CPU (RSS peak {nd['rss_peak_mb']} MB); "
            f"tasks {nd['tasks']}",
        )
        yield (
            "  restore + node ready",
            f"{c['total_s']} s, {c['events_per_s']:,} events/s (target <= {TARGET_S:.0f} s: {ok})",
        )
