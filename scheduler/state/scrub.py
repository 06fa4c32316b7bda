"""The scrub: damage in what nothing reads is found before something needs it.

Recovery reads only the log after the newest snapshot, and a read checks only
the range it reads: a flipped byte in an older segment, or in an archive chunk,
stayed unseen until a time-travel query or a standby catching up hit it
(issue 15: `INTERNAL ... offset 32718`). The scrub reads every segment, the one
being written up to its durable end (every record's framing and CRC, ids running on,
terms never going down:
`record.check_record`, what `read_raw` checks before shipping) and every
archive chunk (its index, entries and summaries against their CRCs), and
reports what it finds: `apollo11_log_damage_found_total{kind}`, a log line
naming the file and offset, and the node's status notice. What it finds is
repaired through the node's hook: a damaged segment is mended from another
member's copy of its records (scheduler/log/mend.py), a damaged chunk rebuilt from
the log (Store.rebuild_chunk) while the log still holds its events.

Design constraint: nothing here is on the append path, and a node under load
must not see its replication ack latency move. So the scrub is one daemon
thread, never the event loop; it reads in SCRUB_READ pieces (one pread and a
few hundred CRCs each, a fraction of a millisecond holding the GIL) and sleeps
between them so that it reads at most `mb_per_s` (8 MB/s by default: a 100 MB
segment in ~13 s, and far below what a disk serves the group commit); a full
pass starts at most every `interval_s`. `mb_per_s` 0 turns it off. What it
needs from the loop (the notice, swapping a rebuilt chunk in, the fetch of a
segment's records) is handed over with call_soon_threadsafe.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from apollo11.scheduler import metrics
from apollo11.scheduler.errors import ApolloError, CorruptLogError
from apollo11.scheduler.log import FRAME, HEADER_SIZE, Segment, check_record
from apollo11.scheduler.state.archive import Chunk, ChunkDamaged

log = logging.getLogger(__name__)

SCRUB_READ = 64 * 1024  # bytes read and checked between two pauses
FIRST_PASS_DELAY_S = 60.0  # after start: recovery has just read the tail


@dataclass(frozen=True, slots=True)
class Damage:
    kind: str  # "segment" or "chunk"
    path: str
    offset: int
    reason: str

    def __str__(self) -> str:
        what = "log segment" if self.kind == "segment" else "archive chunk"
        return f"scrub: {what} {self.path} is damaged at offset {self.offset}: {self.reason}"


@dataclass(frozen=True, slots=True)
class Targets:
    """What one pass checks: the sealed segments and the archive's chunk files."""

    segments: Sequence[Segment]
    chunks: Sequence[str]


class Pace:
    """At most `bytes_per_s`, by sleeping on `stop` (so that stopping is immediate)."""

    def __init__(self, bytes_per_s: float, stop: threading.Event) -> None:
        self.rate = bytes_per_s
        self.stop = stop
        self._t0 = time.monotonic()
        self._spent = 0.0
        self.total = 0  # bytes read this pass

    def spend(self, n: int) -> bool:
        """Account for `n` bytes read; False once the scrub is stopping."""
        self._spent += n
        self.total += n
        metrics.SCRUB_BYTES.inc(n)
        due = self._t0 + self._spent / self.rate
        now = time.monotonic()
        if due > now:
            return not self.stop.wait(due - now)
        if now - due > 1.0:  # fell behind (a long rebuild): no burst to catch up
            self._t0, self._spent = now, 0.0
        return not self.stop.is_set()


class Stopped(Exception):
    """The scrub was stopped in the middle of a file."""


def verify_segment(seg: Segment, pace: Pace) -> Damage | None:
    """Check a sealed segment from its first byte to its durable end."""
    path = seg.path
    off, expect, term, want = 0, seg.first_id, 0, SCRUB_READ
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        while off < seg.size:
            n = min(want, seg.size - off)
            buf = os.pread(fd, n, off)
            if len(buf) < n:
                return Damage("segment", path, off + len(buf), "the file ends before its records")
            pos = 0
            try:
                while (info := check_record(buf, pos, path, base=off)) is not None:
                    if info.event_id != expect:
                        why = f"expected event {expect}, found {info.event_id}"
                        return Damage("segment", path, off + pos, why)
                    if info.term < term:
                        why = f"event {info.event_id} has term {info.term} after term {term}"
                        return Damage("segment", path, off + pos, why)
                    expect, term, pos = expect + 1, info.term, info.end
            except CorruptLogError as e:
                return Damage("segment", path, e.offset, e.reason)
            if pos == 0:  # one record longer than the read, or one cut short
                need = 8 + FRAME.unpack_from(buf, 0)[1] if len(buf) >= 8 else HEADER_SIZE
                if off + need > seg.size:
                    return Damage("segment", path, off, "a record runs past the segment's end")
                want = need
                continue
            off += pos
            want = SCRUB_READ
            if not pace.spend(pos):
                raise Stopped
    finally:
        os.close(fd)
    if expect - 1 != seg.last_id:
        why = f"it ends at event {expect - 1}, the next segment starts at {seg.last_id + 1}"
        return Damage("segment", path, off, why)
    return None


def verify_chunk(path: str, pace: Pace) -> Damage | None:
    """Check an archive chunk against its checksums."""
    try:
        chunk = Chunk(path)
    except ChunkDamaged as e:
        return Damage("chunk", path, 0, str(e))
    try:
        done = 0
        for done in chunk.verify():
            if not pace.spend(done):
                raise Stopped
    except ChunkDamaged as e:
        return Damage("chunk", path, _offset_in(str(e)), str(e))
    finally:
        chunk.close()
    return None


def _offset_in(message: str) -> int:
    """The offset a chunk's error names ("... bad entry at offset 812", "... at 812")."""
    numbers = [w for w in message.replace(",", " ").split() if w.isdigit()]
    return int(numbers[-1]) if numbers else 0


class Scrubber:
    """One daemon thread running a pass every `interval_s`, at most `mb_per_s`.

    `targets` says what to check now (called on the thread: it must only copy);
    `report` is called with each damage found that is still current (a file
    retention or a cut removed meanwhile is not damage); `repair` with a damaged
    chunk, returning the sentence to log.
    """

    def __init__(
        self,
        *,
        targets: Callable[[], Targets | None],
        report: Callable[[Damage], None],
        repair: Callable[[Damage], str] | None = None,
        mb_per_s: float,
        interval_s: float,
        first_delay_s: float | None = None,
    ) -> None:
        self.targets = targets
        self.report = report
        self.repair = repair
        self.rate = mb_per_s * 1024 * 1024
        self.interval_s = interval_s
        # A pass more often than the usual first delay asked for: the first one too.
        default_delay = min(FIRST_PASS_DELAY_S, interval_s)
        self.first_delay_s = default_delay if first_delay_s is None else first_delay_s
        self.passes = 0
        self.last = ""  # the sentence of the last pass
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def pause(self) -> bool:
        """A breath between two batches of other work on this thread (a chunk
        rebuild): False once stopping."""
        return not self._stop.wait(0.001)

    def start(self) -> None:
        if not self.enabled or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="apollo11-scrub", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        if self._stop.wait(self.first_delay_s):
            return
        while True:
            started = time.monotonic()
            try:
                self.last = self.run_pass()
                log.info("%s", self.last)
            except Stopped:
                return
            except Exception:  # the scrub must outlive one bad pass
                log.exception("scrub pass failed")
            self.passes += 1
            if self._stop.wait(max(0.0, started + self.interval_s - time.monotonic())):
                return

    def run_pass(self) -> str:
        """Check everything once; the sentence says what was found."""
        t = self.targets()
        if t is None:
            return "scrub: no store open"
        pace = Pace(self.rate, self._stop)
        found = 0
        for seg in t.segments:
            damage = verify_segment(seg, pace) if os.path.exists(seg.path) else None
            if damage is not None and self._current(damage):
                found += 1
                self._found(damage)
                self._repair(damage)
        for path in t.chunks:
            damage = verify_chunk(path, pace) if os.path.exists(path) else None
            if damage is not None and self._current(damage):
                found += 1
                self._found(damage)
                self._repair(damage)
        mb = pace.total / 1e6
        what = f"{len(t.segments)} sealed segments and {len(t.chunks)} archive chunks"
        return f"scrub: checked {what} ({mb:.1f} MB): " + (
            f"{found} damaged" if found else "no damage"
        )

    def _current(self, damage: Damage) -> bool:
        """Still a file the store uses? (One dropped or cut during the pass is not damage.)"""
        t = self.targets()
        if t is None or not os.path.exists(damage.path):
            return False
        if damage.kind == "chunk":
            return damage.path in t.chunks
        return any(s.path == damage.path and s.size <= os.path.getsize(s.path) for s in t.segments)

    def _found(self, damage: Damage) -> None:
        metrics.LOG_DAMAGE_FOUND.labels(damage.kind).inc()
        log.error("%s", damage)
        self.report(damage)

    def _repair(self, damage: Damage) -> None:
        if self.repair is None:
            return
        try:
            log.warning("%s", self.repair(damage))
        except ApolloError as e:
            log.error("scrub: %s", e)
            self.report(Damage(damage.kind, damage.path, damage.offset, str(e)))
