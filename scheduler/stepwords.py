"""How a task's step is said, by `apollo11 task` and the task page alike.

The fold keeps a step's facts (state, attempt, error, losses); a reader wants
them said as what happened, and three read wrong as they are:

* a durable main runs again on every wake-up (a timer, an event, a child), each
  a new attempt of its step: "run 3", not attempt 3, which reads as a retry;
* a cancel ends a durable main's wait with its task, and no event of the step
  says so: the step is CANCELLED, and it *was* waiting for what it waited for;
* a lost attempt's FAILED (its node or worker died) is followed at once by the
  next STARTED, which clears the error: "1 earlier attempt lost" says why.

Plain values in, words out: the CLI passes the client's views, the page the
node's own records.
"""

from __future__ import annotations

MAIN = "main"  # a durable task's one step (scheduler/durable: MAIN)
CANCELLED = "CANCELLED"
WAITING = "WAITING"


def state(task_state: str, step_state: str) -> str:
    """The step's state as shown: CANCELLED for a main whose wait the cancel ended."""
    return CANCELLED if task_state == CANCELLED and step_state == WAITING else step_state


def attempt(durable: bool, step: str, number: int) -> str:
    """`run N` for a durable main (its attempts are its runs), N for any other step."""
    return f"run {number}" if durable and step == MAIN else str(number)


def error(error: str | None, losses: int) -> str:
    """The step's error, or how many of its earlier attempts were lost."""
    if error:
        return error
    return f"{losses} earlier attempt{'s' if losses > 1 else ''} lost" if losses else ""


def waiting(described: str, *, cancelled: bool) -> str:
    """A durable task's wait (`event approval:A1 ... (checkpoint 1)`), as it stands."""
    if cancelled:
        return f"was waiting for {described} when the task was cancelled"
    return f"waiting for {described}"
