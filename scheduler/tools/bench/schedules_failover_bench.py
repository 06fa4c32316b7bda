"""Schedules across kill -9 failovers: how late the times that came during each outage
fire, against the failover itself.

A real etcd and three node processes (scheduler/tools/dev.py), as `bench failover`
runs them, TTL 5 s; SCHEDULES schedules fire a one-step no-op every second (`every
1s`, overlap allow-all), so that nominal times fall inside every outage. The primary
is killed (SIGKILL) 3 times (--quick 1), the kills spread over the second: the first
5 ms after a nominal time, when the dead primary may not have fired it yet (the
latest an outage can make a time). After each kill the bench waits for the new
primary to fire, starts the killed node again and waits for it to catch up, then
lets the schedules fire for SETTLE_S before the next kill. For each kill, in the
same run:

* the failover: SIGKILL to the first write acknowledged by the new primary, as
  `bench failover` measures it (a client submitting every 10 ms to the live nodes);
  beside it, from the log, the new term's TERM_STARTED, its first fire and the last
  of its late ones (the catch-up's end);
* the outage's occurrences: those the new primary fired with a nominal time before
  its first fire, i.e. every time that came while no primary fired (and any the
  dead primary had not fired yet); their lateness is the TASK_SUBMITTED's time
  minus the nominal time (no jitter here).

At the issue's scale (`--schedules 10000 --every 1m`): every schedule is due at the
same instant once a minute, so a new primary has 10,000 times to catch up at once.
With a period of LONG_PERIOD_MS or more, each kill comes LEAD_MS before a nominal
time, so that the whole instant's fires fall to the next primary (the failover takes
longer than LEAD_MS), and a whole period of steady firing separates the outages. The
creates go through the API, CREATING at a time (there is no batch create), and the
result says how long they took.

The target (issue 30): the outages' lateness p99 within the run's failover p99 plus
1 s. Beside it, every other fire's lateness (the steady state), and the log checked:
each schedule's nominal times from its first to its last have exactly one outcome
each, and none fired twice (two TASK_SUBMITTED for one `schedule:{id}:{nominal}`);
`failed()` names a check that did not hold. The log is the last primary's, read
once every node has stopped.

The load is the schedules, which the nodes run themselves. The bench's own process
only probes during an outage (not niced, as in `bench failover`: its wait would be
the figure) and asks a status a few times a second in between.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from apollo11.lease import free_port
from apollo11.scheduler.log import Event, EventLog, EventType
from apollo11.scheduler.schedules import parse_duration
from apollo11.scheduler.tools.bench.failover_bench import _free_run, _pct, _restart_the_dead
from apollo11.scheduler.tools.dev import DevCluster

FLOWS = "apollo11.scheduler.tools.bench.schedules_flows"
WORKFLOW = "bench_tick"
# An outage of ~5 s then holds about a thousand nominal times, while the cluster
# stays far from busy (a load average near 1 on the 2 cores, Dec 5).
SCHEDULES = 200
EVERY = "1s"
EVERY_MS = 1000
PHASE_MS = 5  # with a short period, the first kill comes this long after a nominal time
SETTLE_S = 5.0  # steady firing before each kill, and after the last
MARGIN_MS = 1000  # the target: outage lateness p99 <= failover p99 + this
# A period this long or longer (`every 1m`: the 10,000 schedules) is killed
# LEAD_MS before a nominal time: a failover takes 4-5.5 s at TTL 5 s (Dec 5), so the
# whole instant's fires fall to the next primary, which must catch them all up at once.
LONG_PERIOD_MS = 10_000
LEAD_MS = 3_000
CREATING = 64  # creates in flight at a time


# ------------------------------------------------------------ the log, read


@dataclass(frozen=True, slots=True)
class Fire:
    schedule: str
    nominal_ms: int
    at_ms: int  # its TASK_SUBMITTED's timestamp
    term: int


@dataclass(frozen=True, slots=True)
class History:
    """What the figures need of a log, in log order."""

    terms: tuple[tuple[int, int], ...]  # (term, its TERM_STARTED's ms)
    fires: tuple[Fire, ...]  # TASK_SUBMITTED of a nominal time (no trigger, no backfill)
    others: tuple[tuple[str, int, str], ...]  # OCCURRENCE: (schedule, nominal ms, outcome)


def history(events: Iterable[Event]) -> History:
    terms: list[tuple[int, int]] = []
    fires: list[Fire] = []
    others: list[tuple[str, int, str]] = []
    for e in events:
        if e.event_type is EventType.TERM_STARTED:
            terms.append((e.term, e.timestamp))
        elif e.event_type is EventType.TASK_SUBMITTED:
            s = e.payload.get("schedule")
            if s and not s.get("triggered") and not s.get("backfill"):
                fires.append(Fire(str(s["id"]), int(s["nominal_ms"]), e.timestamp, e.term))
        elif e.event_type is EventType.OCCURRENCE:
            p = e.payload
            others.append((str(p["schedule"]), int(p["nominal_ms"]), str(p["outcome"])))
    return History(tuple(terms), tuple(fires), tuple(others))


@dataclass(frozen=True, slots=True)
class Outage:
    """One kill, as the log tells it: the term that followed, and what it fired late."""

    killed_ms: int
    term: int | None  # the first term started after the kill (None: no primary followed)
    term_started_ms: int | None
    first_fire_ms: int | None  # that term's first fire
    last_late_ms: int | None  # its last fire of a nominal time before its first fire
    lateness_ms: tuple[int, ...]  # its fires of nominal times before its first fire, sorted
    before_kill: int  # how many of those came before the kill (the dead one had not fired)

    def window(self) -> tuple[int, int] | None:
        """The nominal times that came while no primary fired: [kill, first fire)."""
        if self.first_fire_ms is None:
            return None
        return self.killed_ms, self.first_fire_ms


def outages(h: History, kills_ms: Sequence[int]) -> list[Outage]:
    out = []
    for killed in kills_ms:
        after = [(t, ms) for t, ms in h.terms if ms >= killed]
        if not after:
            out.append(Outage(killed, None, None, None, None, (), 0))
            continue
        term, started = after[0]
        mine = [f for f in h.fires if f.term == term]
        first = min((f.at_ms for f in mine), default=None)
        late = [f for f in mine if first is not None and f.nominal_ms < first]
        lateness = tuple(sorted(f.at_ms - f.nominal_ms for f in late))
        before = sum(1 for f in late if f.nominal_ms < killed)
        last = max((f.at_ms for f in late), default=None)
        out.append(Outage(killed, term, started, first, last, lateness, before))
    return out


def steady_lateness(h: History, found: Sequence[Outage]) -> list[int]:
    """Every other fire's lateness, sorted: those no outage delayed."""
    first = {o.term: o.first_fire_ms for o in found if o.first_fire_ms is not None}
    return sorted(
        f.at_ms - f.nominal_ms
        for f in h.fires
        if not (f.term in first and f.nominal_ms < first[f.term])
    )


def outcomes(h: History, every_ms: int, windows: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """Each schedule's nominal times from its first to its last: how many there are,
    those with exactly one outcome, those fired twice, those with none (gaps), the
    outcomes counted; and the same for the times inside `windows` ([from, to) ms)."""
    seen: dict[tuple[str, int], list[str]] = defaultdict(list)
    for f in h.fires:
        seen[(f.schedule, f.nominal_ms)].append("fired")
    for sid, nominal, outcome in h.others:
        seen[(sid, nominal)].append(outcome)
    # a time buffered and then fired has one outcome: fired
    final = {k: [o for o in v if o != "buffered"] if "fired" in v else v for k, v in seen.items()}
    span: dict[str, list[int]] = defaultdict(list)
    for sid, nominal in final:
        span[sid].append(nominal)
    times = sum((max(t) - min(t)) // every_ms + 1 for t in span.values())
    one = sum(1 for v in final.values() if len(v) == 1)
    in_windows = expected = 0
    for lo, hi in windows:
        due = -(-hi // every_ms) - -(-lo // every_ms)  # multiples of every_ms in [lo, hi)
        expected += due * len(span)
        in_windows += sum(1 for (_, t), v in final.items() if lo <= t < hi and len(v) == 1)
    return {
        "schedules": len(span),
        "times": times,
        "with_one_outcome": one,
        "without_outcome": times - len(final),
        "fired_twice": sum(1 for v in final.values() if v.count("fired") > 1),
        "more_than_one_outcome": sum(1 for v in final.values() if len(v) > 1),
        "off_the_grid": sum(1 for _, t in final if t % every_ms),
        "outcomes": dict(Counter(o for v in final.values() for o in v)),
        "outage_times": expected,
        "outage_times_with_one_outcome": in_windows,
    }


def _spread(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p99": None, "max": None}
    return {
        "p50": round(_pct(list(values), 0.5)),
        "p99": round(_pct(list(values), 0.99)),
        "max": round(max(values)),
    }


# ------------------------------------------------------------ the cluster


@dataclass(frozen=True, slots=True)
class Kill:
    killed: str
    new_primary: str
    at_ms: int  # wall clock, once the killed process had ended
    failover_s: float  # to the first write the new primary acknowledged
    rejoined_s: float | None  # the killed node restarted and caught up (None: not in 60 s)


def kill_phases(every_ms: int, kills: int) -> list[int]:
    """Where in the period each kill lands (ms after a nominal time): a short period's
    kills spread over it, the first PHASE_MS after a nominal time; a long one's all
    LEAD_MS before the next."""
    if every_ms >= LONG_PERIOD_MS:
        return [every_ms - LEAD_MS] * kills
    return [PHASE_MS + n * every_ms // kills for n in range(kills)]


def next_at(not_before_ms: int, every_ms: int, phase_ms: int) -> int:
    """The first wall time (ms) at or after `not_before_ms` that lies `phase_ms` after a
    nominal time (an `every` counts from the Unix epoch)."""
    k = -(-(not_before_ms - phase_ms) // every_ms)
    return k * every_ms + phase_ms


def run(
    quick: bool,
    workdir: str | None,
    progress: Callable[[str], None],
    kills: int | None = None,
    ttl: float = 5.0,
    schedules: int = SCHEDULES,
    every: str = EVERY,
) -> dict[str, Any]:
    kills = kills if kills is not None else (1 if quick else 3)
    every_ms = int(parse_duration(every).total_seconds() * 1000)
    base = Path(tempfile.mkdtemp(prefix="apollo11-bench-", dir=workdir or os.getcwd()))
    result: dict[str, Any] = {
        "quick": quick,
        "schedules": schedules,
        "every": every,
        "every_ms": every_ms,
        "lease_ttl_s": ttl,
        "kills": kills,
        "load_average_1m": [round(os.getloadavg()[0], 2)],
    }
    keep = False
    try:
        dev = DevCluster(
            base, 3, _free_run(), etcd_port=free_port(), lease_ttl=ttl, workflows=FLOWS
        )
        deaths: list[str] = []
        try:
            dev.start()
            dev.primary()
            progress(f"{schedules:,} schedules firing every {every} on three nodes, TTL {ttl:g}s")
            result["create"] = _create(dev, schedules, every)
            progress(
                f"created {schedules:,} in {result['create']['seconds']:.1f}s "
                f"({result['create']['per_s']:,.0f}/s)"
            )
            # steady firing before the first kill: at least one whole period (and 2 settles)
            wait_ms = max(int(2 * SETTLE_S * 1000), every_ms)
            done = []
            for n, phase in enumerate(kill_phases(every_ms, kills)):
                deaths += _restart_the_dead(dev, progress)
                at_ms = next_at(int(time.time() * 1000) + wait_ms, every_ms, phase)
                done.append(_kill(dev, progress, f"kill {n + 1}/{kills}", at_ms))
                wait_ms = max(int(SETTLE_S * 1000), every_ms)
            time.sleep(SETTLE_S)
            deaths += _restart_the_dead(dev, progress)
            last = dev.primary()[0]
        finally:
            dev.stop()
        result["load_average_1m"].append(round(os.getloadavg()[0], 2))
        log = EventLog.open(base / last, read_only=True)
        try:
            h = history(log.read())
        finally:
            log.close_sync()
        result.update(figures(h, done, every_ms))
        result["unexpected_exits"] = deaths
        keep = bool(deaths) or bool(failed(result))
        if keep:
            result["logs_kept"] = str(base)  # the evidence
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
    return result


def _create(dev: DevCluster, schedules: int, every: str) -> dict[str, Any]:
    """Create the schedules through the API, CREATING in flight at a time (there is no
    batch create); how long that took."""
    t0 = time.monotonic()
    retried = asyncio.run(_create_all(dev.endpoints, schedules, every))
    seconds = time.monotonic() - t0
    return {
        "seconds": round(seconds, 1),
        "per_s": round(schedules / seconds, 1),
        "in_flight": CREATING,
        "retried": retried,
    }


async def _create_all(endpoints: Sequence[str], schedules: int, every: str) -> int:
    from apollo11.scheduler.client import AlreadyExistsError, Client, UnavailableError

    ids = iter(range(schedules))
    retried = 0

    async def one(c: Client, i: int) -> None:
        nonlocal retried
        # A create is not retried by the client (it may have been written): a node
        # just elected can still answer UNAVAILABLE, and a try that went in is there.
        for _ in range(100):
            try:
                await c.create_schedule(f"s{i}", WORKFLOW, every=every, overlap="allow-all")
                return
            except AlreadyExistsError:
                return
            except UnavailableError:
                retried += 1
                await asyncio.sleep(0.1)
        raise RuntimeError(f"schedule s{i} was not created after 100 tries")

    async def creator(c: Client) -> None:
        for i in ids:  # one shared iterator: each id is taken once
            await one(c, i)

    async with Client(",".join(endpoints)) as c:
        await asyncio.gather(*(creator(c) for _ in range(CREATING)))
    return retried


def _kill(dev: DevCluster, progress: Callable[[str], None], name: str, at_ms: int) -> Kill:
    """Kill the primary at `at_ms` (wall clock; `next_at` puts it at its phase), then
    wait for the new primary to fire, start the killed node again and wait for it to
    catch up."""
    old = dev.primary()[0]
    i = int(old[1:]) - 1
    time.sleep(max(0.0, at_ms / 1000 - time.time()))
    dev.kill(old, signal.SIGKILL)
    at_ms, t0 = int(time.time() * 1000), time.monotonic()
    failover = _first_ack(dev, i) - t0
    new = dev.primary(exclude=old)[0]
    fired = _fired_since(dev, new, at_ms)
    progress(
        f"{name}: {old} -> {new} acknowledged after {failover:.2f}s"
        + (f", fired after {fired:.2f}s" if fired is not None else ", did not fire in 60 s")
    )
    dev.start_node(i)
    rejoined = _rejoined(dev, old)
    return Kill(old, new, at_ms, failover, rejoined)


def _first_ack(dev: DevCluster, dead: int) -> float:
    """When a submission to the live nodes was first acknowledged (monotonic): the
    probe of `bench failover`, every 10 ms."""
    from apollo11.scheduler.client import SyncClient

    live = ",".join(ep for k, ep in enumerate(dev.endpoints) if k != dead)
    deadline = time.monotonic() + 60
    with SyncClient(live, retries=0, timeout_s=1) as probe:
        while time.monotonic() < deadline:
            try:
                probe.submit(WORKFLOW, None)
                return time.monotonic()
            except Exception:
                time.sleep(0.01)
    raise RuntimeError("no primary acknowledged a write within 60 s of the kill")


def _fired_since(dev: DevCluster, node: str, at_ms: int) -> float | None:
    """Seconds from the kill until `node` has decided a nominal time after it (s0's
    watermark, as the node's state has it); None after 60 s."""
    from apollo11.scheduler.client import SyncClient

    deadline = time.monotonic() + 60
    with SyncClient(dev.endpoints[int(node[1:]) - 1], retries=0, timeout_s=1) as c:
        while time.monotonic() < deadline:
            try:
                mark = c.describe_schedule("s0", page_size=1).schedule.watermark
            except Exception:
                mark = None
            if mark and datetime.fromisoformat(mark).timestamp() * 1000 >= at_ms:
                return time.time() - at_ms / 1000
            time.sleep(0.1)
    return None


def _rejoined(dev: DevCluster, node: str) -> float | None:
    """Seconds until the restarted node is a standby with nothing to catch up (the
    wait of `bench failover`); None after 60 s."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60:
        s = dev.status(node)
        if (
            s
            and s["role"] == "standby"
            and all(m["lag_events"] == 0 for m in s["members"] if m["node_id"] == node)
        ):
            return time.monotonic() - t0
        time.sleep(0.25)
    return None


def figures(h: History, done: Sequence[Kill], every_ms: int = EVERY_MS) -> dict[str, Any]:
    """The result's figures, from the log and the kills as the bench saw them.

    Beside the target, a stricter reading: the kill to each outage's last late fire
    against the same bound, as if every time had come due at the kill itself (a kill
    LEAD_MS before a nominal time gives the catch-up those LEAD_MS to spare)."""
    found = outages(h, [k.at_ms for k in done])
    per_kill = []
    for k, o in zip(done, found, strict=True):
        per_kill.append(
            {
                "killed": k.killed,
                "new_primary": k.new_primary,
                "after_a_nominal_time_ms": k.at_ms % every_ms,
                "failover_ms": round(k.failover_s * 1000),
                "term_started_after_ms": _since(o.term_started_ms, o.killed_ms),
                "first_fire_after_ms": _since(o.first_fire_ms, o.killed_ms),
                "last_late_fire_after_ms": _since(o.last_late_ms, o.killed_ms),
                "catchup_ms": None
                if o.last_late_ms is None or o.term_started_ms is None
                else o.last_late_ms - o.term_started_ms,
                "outage_fires": len(o.lateness_ms),
                "before_the_kill": o.before_kill,
                "lateness_ms": _spread(o.lateness_ms),
                "rejoined_s": None if k.rejoined_s is None else round(k.rejoined_s, 1),
            }
        )
    failover = _spread([k.failover_s * 1000 for k in done])
    late = sorted(t for o in found for t in o.lateness_ms)
    outage = _spread(late)
    target = None if failover["p99"] is None else failover["p99"] + MARGIN_MS
    windows = [w for o in found if (w := o.window()) is not None]
    ends = _spread([o.last_late_ms - o.killed_ms for o in found if o.last_late_ms is not None])
    return {
        "per_kill": per_kill,
        "failover_ms": failover,
        "outage_fires": len(late),
        "outage_lateness_ms": outage,
        "target_ms": target,
        "met": None if target is None or outage["p99"] is None else outage["p99"] <= target,
        "last_late_fire_after_ms": ends,
        "met_from_the_kill": None
        if target is None or ends["max"] is None
        else ends["max"] <= target,
        "steady_lateness_ms": _spread(steady_lateness(h, found)),
        "log": outcomes(h, every_ms, windows),
        "terms_started": len(h.terms),
    }


def _since(ms: int | None, killed_ms: int) -> int | None:
    return None if ms is None else ms - killed_ms


def failed(r: dict[str, Any]) -> str:
    """What the log says went wrong ("" when nothing): a time fired twice, one with no
    outcome or more than one, an outage with no primary after it."""
    c = r["log"]
    why = []
    if c["fired_twice"]:
        why.append(f"{c['fired_twice']} nominal times fired twice")
    if c["without_outcome"]:
        why.append(f"{c['without_outcome']} nominal times without an outcome")
    if c["more_than_one_outcome"]:
        why.append(f"{c['more_than_one_outcome']} nominal times with more than one outcome")
    if c["outage_times_with_one_outcome"] != c["outage_times"]:
        why.append(
            f"of {c['outage_times']} nominal times in the outages, "
            f"{c['outage_times_with_one_outcome']} have one outcome"
        )
    if any(k["first_fire_after_ms"] is None for k in r["per_kill"]):
        why.append("a kill after which no primary fired")
    return "; ".join(why)


def summary_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    def spread(s: dict[str, Any]) -> str:
        return f"{s['p50']} / {s['p99']} / {s['max']} ms"

    every = r.get("every", "1s")
    rows = [
        (
            f"schedules (every {every}, allow-all); kills of the primary",
            f"{r['schedules']:,}; {r['kills']} (TTL {r['lease_ttl_s']:g} s)",
        )
    ]
    if "create" in r:
        made = r["create"]
        rows.append(
            (
                f"created through the API, {made['in_flight']} in flight",
                f"{made['seconds']} s ({made['per_s']:,} a second)",
            )
        )
    for n, k in enumerate(r["per_kill"]):
        rows.append(
            (
                f"kill {n + 1}: {k['killed']} -> {k['new_primary']}, "
                f"{k['after_a_nominal_time_ms']:,} ms after a nominal time",
                f"acknowledged {k['failover_ms']} ms, TERM_STARTED "
                f"{k['term_started_after_ms']} ms, first fire {k['first_fire_after_ms']} ms, "
                f"last late fire {k.get('last_late_fire_after_ms')} ms; "
                f"{k['outage_fires']:,} late fires ({k['before_the_kill']} due before the "
                f"kill), lateness {spread(k['lateness_ms'])}",
            )
        )
    verdict = {True: "met", False: "missed", None: "n/a"}
    c = r["log"]
    rows += [
        ("failover p50 / p99 / max (SIGKILL -> a write acknowledged)", spread(r["failover_ms"])),
        (
            f"lateness of the outages' {r['outage_fires']:,} fires p50 / p99 / max",
            spread(r["outage_lateness_ms"]),
        ),
        (
            "target: outage p99 <= failover p99 + 1 s",
            f"{r['outage_lateness_ms']['p99']} <= {r['target_ms']} ms: {verdict[r['met']]}",
        ),
        (
            "stricter: SIGKILL -> an outage's last late fire, max <= the same",
            f"{r['last_late_fire_after_ms']['max']} <= {r['target_ms']} ms: "
            f"{verdict[r['met_from_the_kill']]}",
        ),
        ("lateness of every other fire p50 / p99 / max", spread(r["steady_lateness_ms"])),
        (
            "nominal times with exactly one outcome (in the outages)",
            f"{c['with_one_outcome']:,} of {c['times']:,} "
            f"({c['outage_times_with_one_outcome']:,} of {c['outage_times']:,})",
        ),
        (
            "fired twice; without an outcome; outcomes",
            f"{c['fired_twice']}; {c['without_outcome']}; "
            + ", ".join(f"{k} {v:,}" for k, v in sorted(c["outcomes"].items())),
        ),
        (
            "nodes that exited without being killed",
            f"{len(r['unexpected_exits'])}"
            + (f" (logs kept in {r['logs_kept']})" if r.get("logs_kept") else ""),
        ),
        ("load average (1 min), start / end", " / ".join(map(str, r["load_average_1m"]))),
    ]
    return rows
