"""What a task is called where people read it: its workflow, and for a shell DAG (every
one of which is workflow "shell") the DAG's own name beside it: "shell nightly".

One rule for the CLI, the task page and the lists; no imports, so the CLI stays light.
"""

from __future__ import annotations

from typing import Any


def task_name(workflow: str, input_: Any) -> str:
    """`workflow`, or "shell <name>" for a shell DAG that names itself."""
    if workflow == "shell" and isinstance(input_, dict):
        name = input_.get("name")
        if isinstance(name, str) and name:
            return f"shell {name}"
    return workflow
