"""A request's text fields: present when required, within their limits.

Shared by the gRPC servicer and the operator actions (actions.py), so that a
field refused over gRPC is refused in the same words from the web pages; the
message names the field and the limit.
"""

from __future__ import annotations

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
