"""IANA time zones for schedules, from the tzdata wheel and nothing else.

`zoneinfo.ZoneInfo(key)` reads the host's /usr/share/zoneinfo first and the
tzdata wheel only when the host has none. Two nodes on different hosts (one
patched last month, one slim image with no zone files) could then put the
same cron's fire at different instants, and a new primary would not resume
where the old one stopped. Read from the wheel alone, every node of one
release shares one set of rules; a change of rules ships as a tzdata upgrade.

The wheel's `zones` file lists the keys: a key is known if it is listed, so
"Mars/Base", "utc" and "../../etc/passwd" are all simply unknown.
"""

from __future__ import annotations

import functools
from importlib import resources
from zoneinfo import ZoneInfo

UTC_KEY = "UTC"


@functools.cache
def known_zones() -> frozenset[str]:
    text = resources.files("tzdata").joinpath("zones").read_text(encoding="utf-8")
    return frozenset(line.strip() for line in text.splitlines() if line.strip())


@functools.cache
def zone(key: str) -> ZoneInfo:
    """The zone named `key`; LookupError when the wheel has no such zone."""
    if key not in known_zones():
        raise LookupError(key)
    path = resources.files("tzdata.zoneinfo").joinpath(*key.split("/"))
    with path.open("rb") as data:
        return ZoneInfo.from_file(data, key=key)
