"""A workflow under flow control, for the Limits page's browser test: one run per
host at once, tenants taking turns; its step waits until the test lets it go (the
file named in its input exists, or a minute passed)."""

from __future__ import annotations

import time
from pathlib import Path

from apollo11.scheduler.workflow import Concurrency, Idempotent, StepContext, Workflow

deploy = Workflow(
    "deploy", version=1, concurrency=Concurrency(key="host", max=1), fairness="tenant"
)


@deploy.step(idempotency=Idempotent())
def roll(ctx: StepContext) -> None:
    release = Path(ctx.input["release"])
    deadline = time.monotonic() + 60
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
