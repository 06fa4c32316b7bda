"""Redaction (`apollo11 redact`): which parts of a task's events are its payloads, and
what takes their place.

A task's input and outputs are the values its events carry under `PAYLOAD_KEYS`: a
TASK_SUBMITTED's or DEBOUNCED's `input`, a STEP_SUCCEEDED's `result`, a CHECKPOINT's
`output`. Everything else is the event's skeleton (ids, term, type, step, attempt,
timestamps, errors, who acted and why) and stays: the history still says what happened,
when and by whom, not with what data.

A redacted value becomes `{"$redacted": N}`, N the TASK_REDACTED event that removed it:
a reader sees that something was there, and which audited act took it out. Pure
functions: the fold (state), the answers (GetEvents, WatchTask) and a rewrite of the
records on disk all call `redact_payload`, so they agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PAYLOAD_KEYS = frozenset({"input", "result", "output"})
MARKER_KEY = "$redacted"


def redaction_marker(redaction_id: int) -> dict[str, int]:
    """What a redacted value is replaced by."""
    return {MARKER_KEY: redaction_id}


def redact_payload(payload: Mapping[str, Any], redaction_id: int) -> Mapping[str, Any]:
    """`payload` without the task's data (the same object when it carries none)."""
    if not PAYLOAD_KEYS.intersection(payload):
        return payload
    return {
        k: (redaction_marker(redaction_id) if k in PAYLOAD_KEYS and v is not None else v)
        for k, v in payload.items()
    }
