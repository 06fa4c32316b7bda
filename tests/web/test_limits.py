"""The Limits page and a task's waiting line, in process: a real store and engine
behind the app (steps held until the test lets them go), a tokens file in front."""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.errors import NotLeaderError
from apollo11.scheduler.security import Principals, Role, create_token
from apollo11.scheduler.web.server import make_app
from apollo11.scheduler.workflow import Concurrency, Idempotent, Rate, StepContext, Workflow
from tests.scheduler.test_engine import Rig, make_rig
from tests.web.test_routes import sign_in

GATE: list[asyncio.Event] = []


async def _held(ctx: StepContext) -> None:
    await GATE[-1].wait()


deploy = Workflow(
    "deploy",
    version=1,
    concurrency=Concurrency(key="host", max=1),
    rate=Rate(key="tenant", limit=100, per="1s", burst=10, default="none"),
    fairness="tenant",
)
deploy.step(
    idempotency=Idempotent(),
    name="load",
    concurrency=Concurrency(key="warehouse", max=4, scope="global", default="dw0"),
)(_held)

strict = Workflow(
    "strict", version=1, concurrency=Concurrency(key="host", max=2, on_full="reject_new")
)
strict.step(idempotency=Idempotent(), name="once")(_held)

PRIMARY_ELSEWHERE = "this node is a standby; the primary is n2 at 127.0.0.1:7421"


@dataclass
class Web:
    client: httpx.AsyncClient
    rig: Rig
    tokens: dict[str, str]


@pytest.fixture
async def make_web(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    made: list[Web] = []

    async def make(*, standby: bool = False) -> Web:
        GATE.append(asyncio.Event())
        tokens_file = tmp_path / "tokens"
        tokens = {"rita": create_token(tokens_file, "rita", Role.READER)}
        rig = await make_rig(tmp_path / "d", FakeClock(), deploy, strict, concurrency=32)
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
            role="standby" if standby else "primary",
            # a standby has the state (replicated) but leads no engine
            engine=None if standby else rig.engine,
            store=rig.store,
            not_leader=lambda: NotLeaderError(PRIMARY_ELSEWHERE, leader="127.0.0.1:7421"),
            durable_id=lambda: rig.store.log.durable_id,
            task_at=_task_at(rig),
            not_found=lambda t, at=0: rig.store.state.not_found(t, at),
        )
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=make_app(node)), base_url="http://testserver"
        )
        web = Web(client, rig, tokens)
        made.append(web)
        await sign_in(client, tokens["rita"])
        return web

    yield make
    for w in made:
        GATE[-1].set()
        await w.client.aclose()
        await w.rig.engine.stop()
        await w.rig.store.close()


def _task_at(rig: Rig) -> Callable[[str, int], Any]:
    async def task_at(task_id: str, event_id: int) -> Any:
        return rig.store.task_at(task_id, event_id)

    return task_at


async def _until(check: Callable[[], bool], what: str) -> None:
    async with asyncio.timeout(20):
        while not check():
            await asyncio.sleep(0.01)
    assert check(), what


def _text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def _rows(page: str) -> dict[str, dict[str, str]]:
    """The limits table: limit id -> cell class -> its text."""
    out = {}
    for lid, body in re.findall(r'<tr data-limit="([^"]+)">(.*?)</tr>', page, re.S):
        cells = re.findall(r'<td class="([^"]+)">(.*?)</td>', body, re.S)
        out[html.unescape(lid)] = {cls: _text(cell) for cls, cell in cells}
    return out


async def _busy(w: Web) -> list[str]:
    """db1 and db2 hold their one slot each; three wait behind db1 (two for tenant a,
    one for tenant b) and one behind db2. An operator raised warehouse and weighted a."""
    e = w.rig.engine
    ids = []
    for host, tenant in [("db1", "a"), ("db2", "b"), ("db1", "a"), ("db1", "a")]:
        ids.append((await e.submit("deploy", {"host": host, "tenant": tenant})).task_id)
    ids.append((await e.submit("deploy", {"host": "db1", "tenant": "b"}, priority=1)).task_id)
    ids.append((await e.submit("deploy", {"host": "db2", "tenant": "b"})).task_id)
    await _until(lambda: e.flow.queued(("deploy/host", "db1")) == 3, "three wait at db1")
    await _until(lambda: e.flow.queued(("deploy/host", "db2")) == 1, "one waits at db2")
    await e.limits.set("warehouse", max=8, operator="olga", reason="bigger warehouse")
    await e.limits.set(None, weights={"a": 3.0, "b": 0.5}, operator="olga")
    return ids


async def test_a_reader_sees_every_limit_what_is_in_force_and_the_busiest_keys(
    make_web: Callable[..., Any],
) -> None:
    w = await make_web()
    await _busy(w)
    r = await w.client.get("/limits")
    assert r.status_code == 200
    page = r.text
    assert '<a href="/limits">limits</a>' in page, "in the navigation"
    rows = _rows(page)
    assert list(rows) == ["deploy/host", "deploy/tenant", "strict/host", "warehouse"]
    host = rows["deploy/host"]
    assert (host["kind"], host["scope"], host["declared"], host["effective"]) == (
        "concurrency",
        "workflow",
        "max 1",
        "max 1",
    )
    assert host["on-full"] == "queue"
    # the most waiting first
    assert host["keys"] == "db1 1 running, 3 queued db2 1 running, 1 queued"
    assert rows["deploy/tenant"]["kind"] == "rate"
    assert rows["deploy/tenant"]["effective"] == "100 per 1s, burst 10"
    assert rows["deploy/tenant"]["keys"] == "none running or queued"
    assert rows["strict/host"]["on-full"] == "reject_new"
    wh = rows["warehouse"]
    assert (wh["scope"], wh["declared"]) == ("global", "max 4")
    assert wh["effective"] == "max 8 set by an operator"
    assert wh["keys"] == "dw0 2 running, 0 queued"
    weights = re.findall(r'<tr data-value="([^"]+)">.*?<td class="weight">([^<]+)</td>', page)
    assert weights == [("a", "3"), ("b", "0.5")]
    assert 'id="more"' not in page and "4 limits" in page


async def test_the_busiest_keys_are_capped_and_the_limits_paged(
    make_web: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from apollo11.scheduler.web import limits as pages

    monkeypatch.setattr(pages, "KEYS_SHOWN", 1)
    monkeypatch.setattr(pages, "LIST_LIMIT", 2)
    w = await make_web()
    await _busy(w)
    page = (await w.client.get("/limits")).text
    rows = _rows(page)
    assert list(rows) == ["deploy/host", "deploy/tenant"]
    assert rows["deploy/host"]["keys"] == "db1 1 running, 3 queued and 1 more value"
    more = re.search(r'<a id="more" href="([^"]+)">', page)
    assert more is not None and more.group(1) == "/limits?after=deploy/tenant"
    page = (await w.client.get(more.group(1))).text
    assert list(_rows(page)) == ["strict/host", "warehouse"]
    assert 'id="more"' not in page and '<a href="/limits">first page</a>' in page


async def test_a_task_page_says_why_the_task_waits_and_its_priority(
    make_web: Callable[..., Any],
) -> None:
    w = await make_web()
    ids = await _busy(w)
    page = (await w.client.get(f"/tasks/{ids[3]}")).text
    m = re.search(r'<div class="note" id="waiting">(.*?)</div>', page, re.S)
    assert m is not None, "a waiting task says why"
    # the priority-1 task of tenant b goes first; then a's turns
    assert _text(m.group(1)) == "queued: host=db1 is full (1/1), 2 ahead ( limits )"
    assert '<span id="priority">3</span>' in page
    page = (await w.client.get(f"/tasks/{ids[4]}")).text
    assert "host=db1 is full (1/1), 0 ahead" in page
    assert '<span id="priority">1</span>' in page
    page = (await w.client.get(f"/tasks/{ids[0]}")).text
    assert 'id="waiting"' not in page, "a running task waits for nothing"
    # as of an earlier event: then, not now
    first = w.rig.store.state.tasks[ids[3]].first_event_id
    r = await w.client.get(f"/tasks/{ids[3]}?as_of={first}")
    assert r.status_code == 200 and f"as of event {first}" in r.text
    assert 'id="waiting"' not in r.text


async def test_a_standby_shows_where_the_primary_is(make_web: Callable[..., Any]) -> None:
    w = await make_web(standby=True)
    r = await w.client.get("/limits")
    assert r.status_code == 200
    m = re.search(r'<p class="muted" id="elsewhere">([^<]*)</p>', r.text)
    assert m is not None and PRIMARY_ELSEWHERE in m.group(1)
    assert 'id="limits"' not in r.text
