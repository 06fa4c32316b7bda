"""Flow control, the pure part: what a workflow declares about how fast and how many of
its tasks start, and the rules that decide it (issue 31).

limits.py    Concurrency, Rate, Debounce (checked as declared); limit ids
spec.py      FlowSpec: a workflow's declarations checked where they stand, each limit
             with its id, and the "flow" a submission records; RegisteredLimits
keys.py      key_value: a key's value in an input, or FlowKeyError saying why not
gcra.py      gcra: a rate's decision on one start (the TAT)
admit.py     admit: whether a start may happen now, or the operator's sentence why not
fairq.py     FairQueue: priority with aging, weighted turns among fairness values, FIFO
debounce.py  the debounce window: when a task may start, whether a submission joins it

Nothing here reads a clock, writes an event or imports anything that acts
(pyproject.toml's contract "The pure decisions"): the engine passes the log's time,
the occupancy and the TATs, and records what these return. Import from here, not
from the modules inside.
"""

from apollo11.scheduler.flow.admit import Admit, Need, NotYet, RateNeed, SlotNeed, admit, clock
from apollo11.scheduler.flow.debounce import deadline, extended, joins, not_before
from apollo11.scheduler.flow.fairq import (
    AGING_MS,
    DEFAULT_PRIORITY,
    PRIORITIES,
    FairQueue,
    effective_priority,
)
from apollo11.scheduler.flow.gcra import Paced, gcra
from apollo11.scheduler.flow.keys import key_value
from apollo11.scheduler.flow.limits import (
    MAX_VALUE_CHARS,
    Concurrency,
    Debounce,
    Key,
    OnFull,
    Rate,
    Scope,
    duration_ms,
    format_ms,
    limit_id,
    limit_name,
)
from apollo11.scheduler.flow.spec import FlowSpec, Limit, RegisteredLimits, declare

__all__ = [
    "AGING_MS",
    "DEFAULT_PRIORITY",
    "MAX_VALUE_CHARS",
    "PRIORITIES",
    "Admit",
    "Concurrency",
    "Debounce",
    "FairQueue",
    "FlowSpec",
    "Key",
    "Limit",
    "Need",
    "NotYet",
    "OnFull",
    "Paced",
    "Rate",
    "RateNeed",
    "RegisteredLimits",
    "Scope",
    "SlotNeed",
    "admit",
    "clock",
    "deadline",
    "declare",
    "duration_ms",
    "effective_priority",
    "extended",
    "format_ms",
    "gcra",
    "joins",
    "key_value",
    "limit_id",
    "limit_name",
    "not_before",
]
