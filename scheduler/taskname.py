"""What a task is called where people read it: its workflow, and for a shell DAG (every
one of which is workflow "shell") the DAG's own name beside it: "shell nightly".

One rule for the CLI, the task page and the lists; nothing heavy imported, so the CLI
stays light.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any


def task_name(workflow: str, input_: Any) -> str:
    """`workflow`, or "shell <name>" for a shell DAG that names itself."""
    if workflow == "shell" and isinstance(input_, dict):
        name = input_.get("name")
        if isinstance(name, str) and name:
            return f"shell {name}"
    return workflow


class ListedNames:
    """The names of a listing's rows ("shell nightly"), which carry the workflow only:
    a shell row's is read from its task (`peek`: in memory or its archive entry, a
    decode) once, and kept, newest last (a task's name never changes), so that paging
    through archived DAGs does not decode each again. Other rows are their workflow."""

    def __init__(self, keep: int = 10_000) -> None:
        self.keep = keep
        self._known: OrderedDict[str, str] = OrderedDict()

    def of(self, rows: Iterable[Any], peek: Callable[[str], Any]) -> dict[str, str]:
        """{task id: name} for the shell rows among `rows` (each with .task_id and
        .workflow); `peek(task_id)` gives the task (.workflow, .input) or None."""
        found = {}
        for r in rows:
            if r.workflow != "shell":
                continue
            name = self._known.get(r.task_id)
            if name is None:
                t = peek(r.task_id)
                if t is None:  # not found now (nothing kept: it may be found later)
                    found[r.task_id] = r.workflow
                    continue
                name = self._known[r.task_id] = task_name(t.workflow, t.input)
                if len(self._known) > self.keep:
                    self._known.popitem(last=False)
            found[r.task_id] = name
        return found
