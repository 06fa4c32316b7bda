"""A request's text fields: present when required, within their limits.

Shared by the gRPC servicer and the operator actions (actions.py), so that a
field refused over gRPC is refused in the same words from the web pages; the
message names the field and the limit.

JSON text has a nesting limit too (`check_depth`, the setting json_max_depth):
the log's encoder stops at 254 levels and a snapshot wraps an event's payload in
five of its own, so a payload 250 deep was written and then broke every
snapshot of the node; nothing a task needs nests that deep.
"""

from __future__ import annotations

import re

from apollo11.scheduler.errors import InvalidArgumentError

MAX_ID = 256
MAX_REASON = 1024


def required(value: str, name: str, limit: int = MAX_ID) -> str:
    if not value:
        raise InvalidArgumentError(f"{name} is required")
    if len(value) > limit:
        raise InvalidArgumentError(f"{name} is {len(value)} characters, over the limit of {limit}")
    return value


def optional(value: str, name: str, limit: int = MAX_ID) -> str | None:
    if not value:
        return None
    return required(value, name, limit)


# A JSON string (escapes included) and the text that is not a bracket.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")


def json_depth(text: str) -> int:
    """How deeply the arrays and objects of JSON `text` nest: 0 for a scalar, 1 for
    `[1, 2]`, 2 for `{"a": [1]}`; brackets inside strings are text. Read from the
    text, not a parsed value: the parser has a depth limit (1024) of its own."""
    brackets = _NOT_BRACKETS.sub("", _STRING.sub("", text) if '"' in text else text)
    depth = deepest = 0
    for c in brackets:
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def check_depth(text: str, name: str, limit: int) -> None:
    """Refuse JSON text nested deeper than `limit` levels (json_max_depth)."""
    if text.count("[") + text.count("{") <= limit:
        return  # it cannot nest deeper than it has brackets: nearly every input stops here
    depth = json_depth(text)
    if depth > limit:
        raise InvalidArgumentError(
            f"{name} is nested {depth} levels deep, over the limit of {limit} "
            f"(json_max_depth): flatten it, or pass a reference to the data"
        )
