"""The task page of a PAUSED task (issue 32 part 2): the state, the step whose retries
ran out with its error and its decision, the sentence that says how to resume it, and
a retry of the whole task for an operator (none for a reader). In process: the events
written to a real store's log as the engine writes them, the app in front of it."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator, Callable
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

CAUSE = {"type": "apollo11.scheduler.workflow.StepError", "message": "card processor down",
         "mro": ["apollo11.scheduler.workflow.StepError", "builtins.Exception",
                 "builtins.BaseException"]}  # fmt: skip


def _failed(attempt: int, final: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "error": "card processor down",
        "cause": CAUSE,
        "rule": "default",
        "final": final,
        "decision": {"failures": attempt, "attempts": 2},
    }
    if final:
        out["exhausted"] = "pause"
    else:
        out["retry_in_s"] = 1.0
    return out


@pytest.fixture
async def pages(tmp_path: Path) -> AsyncIterator[Callable[[Role], Any]]:
    """A store holding a task paused on `charge`, and a signed-in page reader by role."""
    tokens_file = tmp_path / "tokens"
    roles = (Role.READER, Role.OPERATOR)
    tokens = {r: create_token(tokens_file, f"{r.value}-user", r) for r in roles}
    clock = FakeClock()
    store = Store.open(tmp_path / "d", config=CFG, instance_id="n1", clock=clock.now_ms)
    store.log.term = store.log.last_term + 1
    log = store.log
    await log.append(E.TERM_STARTED, "", payload={"node": "n1"})
    steps = {"fetch": [], "charge": ["fetch"]}
    await log.append(E.TASK_SUBMITTED, "t1", "", {"workflow": "billing", "version": 1,
                                                  "input": {}, "steps": steps})  # fmt: skip
    await log.append(E.STEP_STARTED, "t1", "fetch", {}, 1)
    await log.append(E.STEP_SUCCEEDED, "t1", "fetch", {"result": "rows"}, 1)
    await log.append(E.STEP_STARTED, "t1", "charge", {}, 1)
    await log.append(E.STEP_FAILED, "t1", "charge", _failed(1, False), 1)
    await log.append(E.STEP_STARTED, "t1", "charge", {}, 2)
    await log.append(E.STEP_FAILED, "t1", "charge", _failed(2, True), 2)
    await log.append(E.TASK_PAUSED, "t1", "", {"step": "charge", "error": "card processor down"})
    node = SimpleNamespace(
        settings=SimpleNamespace(
            node_id="n1",
            tls_cert=None,
            tls_key=None,
            metrics_open=False,
            http="127.0.0.1:0",
            advertise=None,
            http_allowed_hosts=["testserver"],
        ),
        principals=Principals(tokens_file),
        role="standby",
        engine=None,
        store=store,
        durable_id=lambda: store.log.durable_id,
    )
    clients: list[httpx.AsyncClient] = []

    async def page_as(role: Role) -> str:
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=make_app(node)), base_url="http://testserver"
        )
        clients.append(client)
        await sign_in(client, tokens[role])
        r = await client.get("/tasks/t1")
        assert r.status_code == 200, r.text
        return r.text

    yield page_as
    for c in clients:
        await c.aclose()
    await store.close()


def _text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def _row(text: str, step: str) -> list[str]:
    table = re.search(r'<table id="steps">(.*?)</table>', text, re.S)
    assert table is not None
    row = re.search(rf'<tr data-step="{step}">(.*?)</tr>', table.group(1), re.S)
    assert row is not None, step
    return [_text(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)]


async def test_a_paused_task_page_says_paused_which_step_and_how_to_resume(pages: Any) -> None:
    text = await pages(Role.READER)
    paused = re.search(r'<div class="error" id="paused">(.*?)</div>', text, re.S)
    assert paused is not None, text
    said = _text(paused.group(1))
    assert said.startswith(
        'paused: step charge failed for good and its retries say on_exhausted="pause" '
        "(card processor down); retrying it resumes the task with fresh budgets"
    ), said
    assert "PAUSED" in _text(text)
    row = _row(text, "charge")
    assert row[1] == "FAILED", row
    assert _row(text, "fetch")[1] == "SUCCEEDED"
    assert 'action="/tasks/t1/retry"' not in text  # a reader sees no retry
    decisions = [_text(d) for d in re.findall(r'<div class="attempt-decision">(.*?)</div>', text)]
    assert decisions == [
        "StepError → retry 1/2 in 1 s",
        "StepError → final, 2/2 spent; task paused",
    ]


async def test_an_operator_gets_a_retry_of_the_whole_task_on_a_paused_page(pages: Any) -> None:
    text = await pages(Role.OPERATOR)
    banner = text[text.index('<div class="error" id="paused">') :]
    form = re.search(r'<form method="post" action="/tasks/t1/retry">(.*?)</form>', banner, re.S)
    assert form is not None, banner
    assert 'name="step"' not in form.group(1)  # no step: every step failed for good
    assert "retry the task: reason" in _text(form.group(1))
    assert "recorded beside operator-user" in _text(form.group(1))
