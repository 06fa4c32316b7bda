"""The event log: Apollo-11's single source of truth.

`EventLog` (eventlog.py) is the face; behind it recovery.py opens and checks,
writer.py is the only place log bytes are written and fsynced, ship.py serves
standbys ahead of durability, reader.py reads segments, cut.py shortens a log
(retention, a failed write's leftovers, a divergent tail), mend.py rewrites a
damaged segment from a peer's copy. Formats: record.py, segment.py,
manifest.py, datadir.py.
"""

from apollo11.scheduler.log.config import DEFAULT_SEGMENT_MAX_BYTES, FsyncPolicy, LogConfig
from apollo11.scheduler.log.cut import NothingInCommonError, cut_after, cut_unsynced
from apollo11.scheduler.log.datadir import DataDir
from apollo11.scheduler.log.eventlog import Draft, EventLog
from apollo11.scheduler.log.record import Event, EventType
from apollo11.scheduler.log.segment import Position, Segment
from apollo11.scheduler.log.ship import RawBatch

__all__ = [
    "DEFAULT_SEGMENT_MAX_BYTES",
    "DataDir",
    "Draft",
    "Event",
    "EventLog",
    "EventType",
    "FsyncPolicy",
    "LogConfig",
    "NothingInCommonError",
    "Position",
    "RawBatch",
    "Segment",
    "cut_after",
    "cut_unsynced",
]
