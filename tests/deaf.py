"""A task body that loses its first cancellation, as grpc.aio can
(scheduler/cancelling.py): what `stop_task` must cancel again."""

from __future__ import annotations

import asyncio
import contextlib


async def deaf_once(*_: object) -> None:
    """Swallows the first cancellation; ended by the second only. (Set as a method:
    its `self` is taken and ignored.)"""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.Event().wait()
    await asyncio.Event().wait()
