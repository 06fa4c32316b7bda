"""The task page says what `apollo11 task` says (issue 33, part 4e; the CLI's side is
tests/scheduler/cli/test_task_views.py): a cancelled durable main is CANCELLED, not
WAITING, and was waiting for what; its wake-ups are runs, not retries; an attempt
lost with its node says so while the step runs again. In process: the events written
to a real store's log, the app in front of it as on a standby (no engine)."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.log import EventType as E
from apollo11.scheduler.security import Principals, Role, create_token
from apollo11.scheduler.state import Store
from apollo11.scheduler.web.server import make_app
from tests.scheduler.test_engine import CFG
from tests.web.test_routes import sign_in

CHECKPOINT = {"seq": 0, "kind": "step", "name": "charge", "input_hash": "h", "output": 1}
WAIT = {"seq": 1, "kind": "event", "name": "approval:A1", "input_hash": "h2",
        "key": "approval:A1", "since": 2, "until_ms": 1_800_000_000_000}  # fmt: skip


class Page:
    def __init__(self, store: Store, client: httpx.AsyncClient) -> None:
        self.store = store
        self.client = client

    async def add(
        self, task: str, kind: E, step: str = "", attempt: int = 0, payload: Any = None
    ) -> None:
        await self.store.log.append(kind, task, step, payload or {}, attempt)

    async def submit(self, task: str, workflow: str, steps: dict[str, list[str]]) -> None:
        payload = {"workflow": workflow, "version": 1, "input": {}, "steps": steps}
        await self.add(task, E.TASK_SUBMITTED, payload=payload)

    async def durable(self, task: str) -> None:
        await self.submit(task, "approval", {"main": []})
        await self.add(task, E.STEP_STARTED, "main", 1)
        await self.add(task, E.CHECKPOINT, "main", 1, CHECKPOINT)
        await self.add(task, E.WAIT, "main", 1, WAIT)

    async def get(self, task: str) -> str:
        r = await self.client.get(f"/tasks/{task}")
        assert r.status_code == 200, r.text
        return r.text


@pytest.fixture
async def page(tmp_path: Path) -> AsyncIterator[Page]:
    tokens_file = tmp_path / "tokens"
    token = create_token(tokens_file, "rita", Role.READER)
    clock = FakeClock()
    store = Store.open(tmp_path / "d", config=CFG, instance_id="n1", clock=clock.now_ms)
    store.log.term = store.log.last_term + 1
    await store.log.append(E.TERM_STARTED, "", payload={"node": "n1"})
    settings = SimpleNamespace(
        node_id="n1",
        tls_cert=None,
        tls_key=None,
        metrics_open=False,
        http="127.0.0.1:0",
        advertise=None,
        http_allowed_hosts=["testserver"],
    )
    node = SimpleNamespace(
        settings=settings,
        principals=Principals(tokens_file),
        role="standby",
        engine=None,
        store=store,
        durable_id=lambda: store.log.durable_id,
    )
    transport = httpx.ASGITransport(app=make_app(node))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        await sign_in(client, token)
        yield Page(store, client)
    await store.close()


def _row(text: str, step: str) -> list[str]:
    """The steps table's row of `step`: its cells as text."""
    table = re.search(r'<table id="steps">(.*?)</table>', text, re.S)
    assert table is not None
    row = re.search(rf'<tr data-step="{step}">(.*?)</tr>', table.group(1), re.S)
    assert row is not None, step
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)
    return [" ".join(html.unescape(re.sub(r"<[^>]+>", " ", c)).split()) for c in cells]


async def test_a_cancelled_main_is_shown_cancelled_not_waiting(page: Page) -> None:
    await page.durable("t1")
    await page.add("t1", E.TASK_CANCELLED, payload={"operator": "ana", "reason": "no"})
    text = await page.get("t1")
    assert _row(text, "main")[1] == "CANCELLED"
    wait = re.search(r'<p id="durable-wait">(.*?)</p>', text, re.S)
    assert wait is not None
    said = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", wait.group(1))).split())
    assert said.startswith("was waiting for event approval:A1"), said
    assert said.endswith("when the task was cancelled"), said


async def test_a_waiting_main_still_says_waiting(page: Page) -> None:
    await page.durable("t2")
    text = await page.get("t2")
    assert _row(text, "main")[1] == "WAITING"
    assert re.search(r'<p id="durable-wait">waiting for event approval:A1', text), text


async def test_a_durable_mains_wake_up_is_a_run_not_a_retry(page: Page) -> None:
    await page.durable("t3")
    await page.add("t3", E.STEP_STARTED, "main", 2)
    row = _row(await page.get("t3"), "main")
    assert row[1:3] == ["STARTED", "run 2"], row


async def test_an_earlier_lost_attempt_says_lost_while_the_step_runs_again(page: Page) -> None:
    await page.submit("t4", "w", {"a": []})
    await page.add("t4", E.STEP_STARTED, "a", 1)
    lost = {"error": "lost: its node died", "lost": True}
    await page.add("t4", E.STEP_FAILED, "a", 1, lost)
    await page.add("t4", E.STEP_STARTED, "a", 2)
    row = _row(await page.get("t4"), "a")
    assert row[1:3] == ["STARTED", "2"], row
    assert row[4] == "1 earlier attempt lost", row
