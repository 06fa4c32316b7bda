"""A request's text fields: present when required, within their limits.

Shared by the gRPC servicer and the operator actions (actions.py), so that a
field refused over gRPC is refused in the same words from the web pages; the
message names the field and the limit.

JSON text has a nesting limit too (`check_depth`, the setting json_max_depth;
why: scheduler/jsondepth.py): refused here with the field's name, before it is
parsed.
"""

from __future__ import annotations

from apollo11.scheduler import jsondepth
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


def check_depth(text: str, name: str, limit: int) -> None:
    """Refuse JSON text nested deeper than `limit` levels (json_max_depth)."""
    depth = jsondepth.deeper_than(text, limit)
    if depth is not None:
        raise InvalidArgumentError(
            f"{jsondepth.too_deep(name, depth, limit)}: flatten it, or pass a reference to the data"
        )
