"""The event log's options: how big a segment, a payload, a batch; how deep a payload;
whether to fsync."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from apollo11.scheduler import defaults
from apollo11.scheduler.log.record import DEFAULT_PAYLOAD_MAX_BYTES

DEFAULT_SEGMENT_MAX_BYTES = defaults.SEGMENT_MAX_BYTES
DEFAULT_SUBMIT_MAX_BYTES = defaults.SUBMIT_MAX_BYTES


class FsyncPolicy(enum.StrEnum):
    ALWAYS = "always"
    # Acknowledges before data is on disk. For tests and benchmarks only.
    UNSAFE_NEVER = "unsafe-never"


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_max_bytes: int = DEFAULT_SEGMENT_MAX_BYTES
    payload_max_bytes: int = DEFAULT_PAYLOAD_MAX_BYTES
    submit_max_bytes: int = DEFAULT_SUBMIT_MAX_BYTES
    # how deeply a payload's values may nest (scheduler/jsondepth.py: a deeper one,
    # once written, broke every later snapshot)
    json_max_depth: int = defaults.JSON_MAX_DEPTH
    fsync: FsyncPolicy = FsyncPolicy.ALWAYS
    max_batch_bytes: int = 8 * 1024 * 1024
    # newest records kept in memory for followers that keep up (0: always read disk)
    recent_bytes: int = 4 * 1024 * 1024
    # The manifest (see scheduler/log/manifest.py) records the durable end at most this
    # often while events arrive, and at every rotation, snapshot and clean close.
    manifest_interval_s: float = 1.0

    def __post_init__(self) -> None:
        if self.segment_max_bytes < 4096:
            raise ValueError(
                f"segment_max_bytes must be at least 4096, got {self.segment_max_bytes}"
            )
        if not 64 <= self.payload_max_bytes <= 1024 * 1024:
            raise ValueError(
                f"payload_max_bytes must be between 64 and 1048576, got {self.payload_max_bytes}"
            )
        if not self.payload_max_bytes <= self.submit_max_bytes <= 8 * 1024 * 1024:
            raise ValueError(
                f"submit_max_bytes must be between payload_max_bytes and 8388608, "
                f"got {self.submit_max_bytes}"
            )
        if not 1 <= self.json_max_depth <= defaults.JSON_MAX_DEPTH_MAX:
            raise ValueError(
                f"json_max_depth must be between 1 and {defaults.JSON_MAX_DEPTH_MAX}, "
                f"got {self.json_max_depth}"
            )
        if not self.manifest_interval_s > 0:
            raise ValueError(
                f"manifest_interval_s must be more than 0, got {self.manifest_interval_s}"
            )
