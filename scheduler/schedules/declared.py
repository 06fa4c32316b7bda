"""A schedule declared in code, beside the workflow it starts:

    nightly = Schedule("nightly-etl", workflow=etl, cron="0 3 * * *",
                       tz="Europe/Berlin", input={"source": "s3://..."})

at a workflow module's top level. The node collects it with the module's
workflows (Registry.load_module), and a primary reconciles it into the log as it
starts leading (engine/schedules.py): created when absent, updated when it
differs; a schedule of the same id made through the API is left alone. The
spec is checked here, at import: a bad cron fails the module's load, naming it.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from apollo11.scheduler.schedules.spec import ScheduleSpec, explain


class Schedule:
    def __init__(
        self,
        schedule_id: str,
        *,
        workflow: Any,
        input: Any = None,
        note: str = "",
        **spec: Any,
    ) -> None:
        """`workflow`: the Workflow (or its name); `spec`: ScheduleSpec's fields
        (cron | every | at, tz, start, end, jitter, catchup_window, overlap, ...)."""
        self.schedule_id = schedule_id
        self.workflow: str = workflow if isinstance(workflow, str) else str(workflow.name)
        self.input = input
        self.note = note
        try:
            self.spec = ScheduleSpec(**spec)
        except ValidationError as e:
            raise ValueError(f"schedule {schedule_id!r}: {explain(e)}") from None

    def __repr__(self) -> str:
        return f"Schedule({self.schedule_id!r}, workflow={self.workflow!r}, spec={self.spec!r})"
