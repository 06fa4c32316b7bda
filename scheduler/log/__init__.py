"""The event log: Apollo-11's single source of truth."""

from scheduler.log.datadir import DataDir
from scheduler.log.eventlog import (
    Draft,
    EventLog,
    FsyncPolicy,
    LogConfig,
    Position,
    RawBatch,
)
from scheduler.log.record import Event, EventType

__all__ = [
    "DataDir",
    "Draft",
    "Event",
    "EventLog",
    "EventType",
    "FsyncPolicy",
    "LogConfig",
    "Position",
    "RawBatch",
]
