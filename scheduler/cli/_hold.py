"""Legal holds: `hold` and `release` (docs/retention.md). A held task is never purged
by retention; the event records the authenticated principal and the reason."""

from __future__ import annotations

from typing import Annotated

import typer

from apollo11.scheduler.cli._shared import Server, client, out, run


def hold(
    task_id: Annotated[str, typer.Argument(help="The task id.")],
    reason: Annotated[str, typer.Option("--reason", help="Why it is kept (recorded).")],
    server: Server = None,
) -> None:
    """Put a legal hold on a task: retention never purges it until it is released."""

    async def go() -> int:
        async with client(server) as c:
            return int(await c.hold(task_id, reason=reason))

    out.print(f"hold recorded as event {run(go())}")


def release(
    task_id: Annotated[str, typer.Argument(help="The task id.")],
    reason: Annotated[str, typer.Option("--reason", help="Why (recorded).")] = "",
    server: Server = None,
) -> None:
    """Release a task's legal hold: retention may purge it again."""

    async def go() -> int:
        async with client(server) as c:
            return int(await c.release(task_id, reason=reason))

    out.print(f"release recorded as event {run(go())}")
