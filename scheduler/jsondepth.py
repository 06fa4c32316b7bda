"""How deeply JSON nests: what the setting json_max_depth bounds.

The log's encoder (orjson) stops at 254 levels, and a snapshot puts an event's
values a few levels further down (a step's result sits 3 deep in its task's
line, a checkpoint's output 4), so a value of 250 levels, once written, broke
every later snapshot of the node, for good. Whatever reaches the log is kept to
json_max_depth (at most `MAX_DEPTH`): JSON a client sends (scheduler/nodeview/checks.py),
and what the cluster makes itself, results, checkpoints, heartbeat details
(refused by the log, scheduler/log/record.py). `dumps` still encodes a value
logged before the limit existed, so such a log snapshots and replays.

Depth counts arrays and objects: 0 for a scalar, 1 for `[1, 2]`, 2 for
`{"a": [1]}`. Read from the text where there is one (brackets inside strings
are text); the parsers have limits of their own (orjson's loads: 1024).
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from apollo11.scheduler import defaults

MAX_DEPTH = defaults.JSON_MAX_DEPTH_MAX  # the most json_max_depth may be
ENCODER_LIMIT = 254  # orjson encodes no deeper
VALUE_DEPTH_CAP = 10 * ENCODER_LIMIT  # `value_depth` counts no further (a cycle stops here)

# A JSON string (escapes included), and the text that is not a bracket.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_STRING_B = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS_B = re.compile(rb"[^\[\]{}]+")


def text_depth(text: str | bytes) -> int:
    """How deeply JSON `text` nests."""
    if isinstance(text, bytes):
        kept = _NOT_BRACKETS_B.sub(b"", _STRING_B.sub(b"", text) if b'"' in text else text)
        brackets = kept.decode()  # brackets only: ASCII
    else:
        brackets = _NOT_BRACKETS.sub("", _STRING.sub("", text) if '"' in text else text)
    depth = deepest = 0
    for c in brackets:
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def deeper_than(text: str | bytes, limit: int) -> int | None:
    """The depth of JSON `text` if it nests deeper than `limit`, else None. A text with
    no more brackets than the limit, nearly every one, is passed by two counts."""
    if isinstance(text, bytes):
        brackets = text.count(b"[") + text.count(b"{")
    else:
        brackets = text.count("[") + text.count("{")
    if brackets <= limit:
        return None
    depth = text_depth(text)
    return depth if depth > limit else None


def value_depth(value: Any, cap: int = VALUE_DEPTH_CAP) -> int:
    """How deeply a Python value nests as JSON (dicts, lists and tuples): exact up to
    `cap`, `cap + 1` past it (a cyclic value has no depth: it stops there). Walks the
    whole value: for what the encoder refused, not for every value."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            children: Any = v.values()
        elif isinstance(v, list | tuple):
            children = v
        else:
            continue
        depth += 1
        if depth > deepest:
            deepest = depth
            if deepest > cap:
                return deepest
        stack.extend((c, depth) for c in children)
    return deepest


def too_deep(what: str, depth: int, limit: int) -> str:
    """`what` is nested `depth` levels deep, over `limit`: the words of every refusal."""
    return f"{what} is nested {depth} levels deep, over the limit of {limit} (json_max_depth)"


def too_deep_value(what: str, depth: int, limit: int) -> str:
    """`too_deep` for a depth `value_depth` counted (past its cap: "more than" it)."""
    if depth <= VALUE_DEPTH_CAP:
        return too_deep(what, depth, limit)
    return (
        f"{what} is nested more than {VALUE_DEPTH_CAP} levels deep, over the limit of "
        f"{limit} (json_max_depth)"
    )


def dumps(value: Any) -> bytes:
    """orjson's JSON for `value`; past orjson's 254 levels (a value logged before
    json_max_depth existed), the standard library's, which is slower and has no such
    limit. The same compact JSON either way, and no raw newline (snapshots keep one
    task a line)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        if value_depth(value, ENCODER_LIMIT) <= ENCODER_LIMIT:
            raise  # not a matter of depth: the caller's error stands
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
