"""The event log: Apollo-11's single source of truth.

`EventLog` (eventlog.py) is the face; behind it recovery.py opens and checks,
writer.py is the only place log bytes are written and fsynced, ship.py serves
standbys ahead of durability, reader.py reads segments, cut.py shortens a log
(retention, a failed write's leftovers, a divergent tail), mend.py rewrites a
damaged segment from a peer's copy. Formats: record.py, segment.py,
manifest.py, datadir.py. Import from here, not from the modules inside (an
import-linter contract says so).
"""

from apollo11.scheduler.log.config import DEFAULT_SEGMENT_MAX_BYTES, FsyncPolicy, LogConfig
from apollo11.scheduler.log.cut import NothingInCommonError, cut_after, cut_unsynced
from apollo11.scheduler.log.datadir import DataDir, fsync_dir, temp_beside, write_atomic
from apollo11.scheduler.log.eventlog import Draft, EventLog
from apollo11.scheduler.log.expunge import expunge, expunged
from apollo11.scheduler.log.manifest import load as load_manifest
from apollo11.scheduler.log.manifest import remove as remove_manifest
from apollo11.scheduler.log.mend import rewrite as rewrite_segment
from apollo11.scheduler.log.record import (
    FRAME,
    HEADER_SIZE,
    Event,
    EventType,
    check_record,
    check_records,
    decode_batch,
)
from apollo11.scheduler.log.redact import (
    MARKER_KEY,
    PAYLOAD_KEYS,
    redact_payload,
    redact_record,
    redaction_marker,
)
from apollo11.scheduler.log.segment import Position, Segment, parse_segment_name, segment_name
from apollo11.scheduler.log.ship import RawBatch

__all__ = [
    "DEFAULT_SEGMENT_MAX_BYTES",
    "FRAME",
    "HEADER_SIZE",
    "MARKER_KEY",
    "PAYLOAD_KEYS",
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
    "check_record",
    "check_records",
    "cut_after",
    "cut_unsynced",
    "decode_batch",
    "expunge",
    "expunged",
    "fsync_dir",
    "load_manifest",
    "parse_segment_name",
    "redact_payload",
    "redact_record",
    "redaction_marker",
    "remove_manifest",
    "rewrite_segment",
    "segment_name",
    "temp_beside",
    "write_atomic",
]
