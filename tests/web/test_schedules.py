"""The Schedules pages, in process: a real store and engine behind the app, a tokens
file in front, and a clock that stands still until the test moves it (the pages'
next times are the wall clock's; the engine fires only when told)."""

from __future__ import annotations

import asyncio
import html
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.errors import NotLeaderError
from apollo11.scheduler.schedules import ScheduleSpec, iso
from apollo11.scheduler.security import Principals, Role, create_token
from apollo11.scheduler.state import OccurrenceRecord, ScheduleState
from apollo11.scheduler.web.server import make_app
from apollo11.scheduler.workflow import Idempotent, StepContext, Workflow
from tests.scheduler.test_engine import Rig, make_rig
from tests.web.test_routes import sign_in

report = Workflow("report", version=1)


@report.step(idempotency=Idempotent())
def build(ctx: StepContext) -> dict[str, Any]:
    return {"ok": True}


class StillClock(FakeClock):
    """Time moves only when the test advances it; a sleeper wakes once it has moved
    far enough (FakeClock's sleep moves time itself, and a schedule would then fire
    day after day as fast as the loop turns)."""

    def __init__(self, start: float) -> None:
        super().__init__(start)
        self._moved = asyncio.Event()

    def advance(self, seconds: float) -> None:
        super().advance(seconds)
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()

    async def sleep(self, seconds: float) -> None:
        until = self.t + max(0.0, seconds)
        while self.t < until:
            await self._moved.wait()
        await asyncio.sleep(0)


@dataclass
class Web:
    client: httpx.AsyncClient
    rig: Rig
    clock: StillClock
    tokens: dict[str, str]

    def schedule(self, sid: str) -> ScheduleState:
        return self.rig.store.state.schedules[sid]


PRIMARY_ELSEWHERE = "this node is a standby; the primary is n2 at 127.0.0.1:7421"


def _node(rig: Rig, tokens_file: Path, *, standby: bool) -> Any:
    settings = SimpleNamespace(
        node_id="n1",
        tls_cert=None,
        tls_key=None,
        metrics_open=False,
        http="127.0.0.1:0",
        advertise=None,
        http_allowed_hosts=["testserver"],
    )
    return SimpleNamespace(
        settings=settings,
        principals=Principals(tokens_file),
        role="standby" if standby else "primary",
        # a standby has the state (replicated) but no engine: every write is the primary's
        engine=None if standby else rig.engine,
        store=rig.store,
        not_leader=lambda: NotLeaderError(PRIMARY_ELSEWHERE, leader="127.0.0.1:7421"),
    )


@pytest.fixture
async def make_web(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    made: list[Web] = []

    async def make(*, standby: bool = False) -> Web:
        tokens_file = tmp_path / "tokens"
        tokens = {
            "olga": create_token(tokens_file, "olga", Role.OPERATOR),
            "rita": create_token(tokens_file, "rita", Role.READER),
        }
        # just after a minute: advancing N minutes brings exactly N of an every-1m's times
        clock = StillClock(start=(time.time() // 60) * 60 + 1)
        rig = await make_rig(tmp_path / "d", clock, report)
        app = make_app(_node(rig, tokens_file, standby=standby))
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://testserver"
        )
        web = Web(client, rig, clock, tokens)
        made.append(web)
        return web

    yield make
    for w in made:
        await w.client.aclose()
        await w.rig.engine.stop()
        await w.rig.store.close()


async def _until(check: Callable[[], bool], what: str) -> None:
    async with asyncio.timeout(20):
        while not check():
            await asyncio.sleep(0.01)
    assert check(), what


def _csrf(page: str) -> str:
    m = re.search(r'name="csrf" value="([^"]+)"', page)
    assert m is not None, "the page's forms carry a CSRF token"
    return m.group(1)


def _cells(page: str, table: str, cls: str) -> list[str]:
    body = re.search(rf'<table id="{table}">(.*?)</table>', page, re.S)
    assert body is not None, table
    return [
        html.unescape(re.sub(r"<[^>]+>", "", c)).strip()
        for c in re.findall(rf'<td class="{cls}"[^>]*>(.*?)</td>', body.group(1), re.S)
    ]


async def _notice(w: Web, r: httpx.Response) -> tuple[str, str]:
    """Follow an action's redirect: (the page's #message, its #error)."""
    assert r.status_code == 303, r.text
    page = (await w.client.get(r.headers["location"])).text
    m = re.search(r'<div class="note" id="message">([^<]*)</div>', page)
    e = re.search(r'<div class="error" id="error">([^<]*)</div>', page)
    return (m.group(1) if m else "", e.group(1) if e else "")


async def _two_schedules(w: Web) -> None:
    e = w.rig.engine
    await e.schedules.create(
        "nightly-report", "report", ScheduleSpec(cron="0 3 * * *", tz="Europe/Berlin")
    )
    await e.schedules.create("minutely", "report", ScheduleSpec(every="1m", overlap="allow-all"))


async def test_a_reader_sees_every_schedule_its_next_times_and_last_outcome(
    make_web: Callable[..., Any],
) -> None:
    w = await make_web()
    await _two_schedules(w)
    w.clock.advance(120)
    await _until(lambda: len(w.schedule("minutely").occurrences) == 2, "two minutes fired")
    await sign_in(w.client, w.tokens["rita"])
    r = await w.client.get("/schedules")
    assert r.status_code == 200
    page = r.text
    assert '<a href="/schedules">schedules</a>' in page, "in the navigation"
    assert re.findall(r'<tr data-schedule="([^"]+)">', page) == ["minutely", "nightly-report"]
    words = _cells(page, "schedules", "words")
    assert words == [
        "every 1m; overlap allow-all, catch-up 1d",
        'daily at 03:00 in Europe/Berlin (cron "0 3 * * *"); overlap skip, catch-up 1d',
    ]
    assert _cells(page, "schedules", "state") == ["active", "active"]
    utc, local = _cells(page, "schedules", "next-utc"), _cells(page, "schedules", "next-local")
    assert utc[0].endswith(":00Z") and local[0].endswith(":00 UTC")
    # 03:00 on Berlin's wall clock: 02:00 or 01:00 UTC, as DST has it
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT0[12]:00:00Z", utc[1]), utc[1]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d 03:00:00 CES?T", local[1]), local[1]
    last = _cells(page, "schedules", "last")
    assert last[0].startswith("fired ") and last[0].endswith(" task")
    assert last[1] == "none yet"
    task = w.schedule("minutely").occurrences[-1].task_id
    assert f'<a href="/tasks/{task}">task</a>' in page

    page = (await w.client.get("/schedules/nightly-report")).text
    assert '<span id="workflow">report</span>' in page and "made through the API" in page
    assert len(re.findall(r"<tr><td>[^<]+Z</td><td>[^<]+ 03:00:00 CES?T</td></tr>", page)) == 5
    assert "do-pause" not in page and "do-trigger" not in page, "a reader sees no buttons"
    assert "pause, unpause and trigger need role operator" in page
    assert (await w.client.get("/schedules/nope")).status_code == 404
    assert (await w.client.get("/schedules/minutely?before=x")).status_code == 400


async def test_the_list_goes_page_by_page_by_id(
    make_web: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from apollo11.scheduler.web import schedules as pages

    monkeypatch.setattr(pages, "LIST_LIMIT", 1)
    w = await make_web()
    await _two_schedules(w)
    await sign_in(w.client, w.tokens["rita"])
    page = (await w.client.get("/schedules")).text
    assert re.findall(r'<tr data-schedule="([^"]+)">', page) == ["minutely"]
    more = re.search(r'<a id="more" href="([^"]+)">', page)
    assert more is not None and more.group(1) == "/schedules?after=minutely"
    page = (await w.client.get(more.group(1))).text
    assert re.findall(r'<tr data-schedule="([^"]+)">', page) == ["nightly-report"]
    assert 'id="more"' not in page and "2 schedules" in page


async def test_occurrences_newest_first_a_page_at_a_time_with_their_tasks(
    make_web: Callable[..., Any],
) -> None:
    from apollo11.scheduler.web import schedules as pages

    w = await make_web()
    e = w.rig.engine
    await e.schedules.create("sec", "report", ScheduleSpec(every="1s", overlap="allow-all"))
    await e.schedules.pause("sec", note="quiet", operator="setup")
    # 250 times, each recorded skipped as paused; the trigger then comes between two
    # (at a nominal time's very millisecond, the fold keeps one record for both)
    w.clock.advance(250.5)
    s = w.schedule("sec")
    await _until(lambda: len(s.occurrences) == 250, "every time decided")
    await e.schedules.unpause("sec", operator="setup")
    task = await e.schedules.trigger("sec", operator="setup")
    await sign_in(w.client, w.tokens["rita"])
    seen: list[list[tuple[str, str]]] = []
    url: str | None = "/schedules/sec"
    while url is not None:
        page = (await w.client.get(url)).text
        seen.append(re.findall(r'data-outcome="(\w+)"><td>([^<]+)</td>', page))
        older = re.search(r'<a id="older" href="([^"]+)">', page)
        url = older.group(1) if older else None
    assert [len(p) for p in seen] == [pages.OCCURRENCES_PAGE] * 2 + [51]
    rows = [row for p in seen for row in p]
    assert rows[0][0] == "fired", "newest first: the trigger"
    assert {o for o, _ in rows[1:]} == {"skipped"}
    times = [t for _, t in rows[1:]]
    assert times == sorted(set(times), reverse=True), "each time once, newest first"
    assert times[-1] == iso(datetime.fromtimestamp(s.occurrences[0].nominal_ms / 1000, UTC))
    first = (await w.client.get("/schedules/sec")).text
    assert f'<a href="/tasks/{task}">{task}</a>' in first
    assert _cells(first, "occurrences", "reason")[:2] == ["triggered by setup", "paused"]
    assert "251 in all" in first


async def test_an_operator_pauses_unpauses_and_triggers_as_themselves(
    make_web: Callable[..., Any],
) -> None:
    w = await make_web()
    await _two_schedules(w)
    await sign_in(w.client, w.tokens["olga"])
    page = (await w.client.get("/schedules/nightly-report")).text
    assert 'class="do-pause"' in page and 'class="do-trigger"' in page
    assert "do-unpause" not in page
    csrf = _csrf(page)
    r = await w.client.post(
        "/schedules/nightly-report/pause", data={"csrf": csrf, "note": "db migration"}
    )
    assert r.headers["location"] == "/schedules/nightly-report", "no notice in the URL"
    assert await _notice(w, r) == ("paused by olga", "")
    s = w.schedule("nightly-report")
    assert s.paused and s.by == "olga" and s.note == "db migration"
    page = (await w.client.get("/schedules/nightly-report")).text
    assert 'id="schedule-state">paused<' in page and 'class="do-unpause"' in page
    assert '<span id="changed-by">olga</span>' in page and "db migration" in page
    assert 'id="message"' not in page, "the notice is shown once"
    r = await w.client.post("/schedules/nightly-report/pause", data={"csrf": csrf})
    assert await _notice(w, r) == ("already paused: nothing recorded", "")
    r = await w.client.post("/schedules/nightly-report/unpause", data={"csrf": csrf})
    assert await _notice(w, r) == ("unpaused by olga", "")
    assert not s.paused and s.by == "olga"
    r = await w.client.post("/schedules/nightly-report/trigger", data={"csrf": csrf})
    message, error = await _notice(w, r)
    task = message.removeprefix("triggered by olga: task ")
    assert error == "" and task in w.rig.store.state.tasks, message
    assert s.occurrences[-1].task_id == task and s.occurrences[-1].reason == "triggered by olga"
    page = (await w.client.get("/schedules/nightly-report")).text
    assert f'<a href="/tasks/{task}">{task}</a>' in page
    # no other action, and none on a schedule that is not there
    assert (
        await w.client.post("/schedules/nightly-report/delete", data={"csrf": csrf})
    ).status_code == 404
    r = await w.client.post("/schedules/nope/pause", data={"csrf": csrf})
    assert r.status_code == 303 and "nope" not in w.rig.store.state.schedules


async def test_refused_without_our_csrf_token_from_another_origin_or_as_a_reader(
    make_web: Callable[..., Any],
) -> None:
    w = await make_web()
    await _two_schedules(w)
    durable = w.rig.store.log.durable_id
    url = "/schedules/nightly-report/pause"
    await sign_in(w.client, w.tokens["rita"])
    page = (await w.client.get("/schedules/nightly-report")).text
    r = await w.client.post(url, data={"csrf": _csrf(page)})
    assert r.status_code == 403 and "needs role operator; rita has role reader" in r.text
    w.client.cookies.clear()
    r = await w.client.post(url, data={"csrf": "x"})
    assert r.status_code == 403 and "sign in first" in r.text
    await sign_in(w.client, w.tokens["olga"])
    csrf = _csrf((await w.client.get("/schedules/nightly-report")).text)
    assert (await w.client.post(url, data={})).status_code == 403, "no CSRF token"
    assert (await w.client.post(url, data={"csrf": csrf + "x"})).status_code == 403
    evil = {"origin": "http://evil.example"}
    r = await w.client.post(url, data={"csrf": csrf}, headers=evil)
    assert r.status_code == 403 and "cross-site request refused" in r.text
    r = await w.client.post("/schedules/nightly-report/trigger", data={"csrf": ""})
    assert r.status_code == 403
    assert not w.schedule("nightly-report").paused
    assert w.rig.store.log.durable_id == durable, "no refused post wrote an event"


async def test_a_standby_shows_where_the_primary_is_and_acts_on_nothing(
    make_web: Callable[..., Any],
) -> None:
    w = await make_web(standby=True)
    await _two_schedules(w)  # (through the rig's engine: as if replicated)
    durable = w.rig.store.log.durable_id
    await sign_in(w.client, w.tokens["olga"])
    page = (await w.client.get("/schedules/nightly-report")).text
    assert "do-pause" not in page and "do-trigger" not in page
    m = re.search(r'<p class="muted" id="elsewhere">([^<]*)</p>', page)
    assert m is not None, page
    assert PRIMARY_ELSEWHERE in m.group(1)
    # a page left open across a failover: the post is refused, saying where to go
    r = await w.client.post("/schedules/nightly-report/pause", data={"csrf": _csrf(page)})
    assert await _notice(w, r) == ("", f"pause refused: {PRIMARY_ELSEWHERE}")
    assert not w.schedule("nightly-report").paused
    assert w.rig.store.log.durable_id == durable


def test_a_page_of_occurrences_is_newest_first_and_links_the_older_one() -> None:
    from apollo11.scheduler.web import schedules as pages

    s = ScheduleState("s", "report", ScheduleSpec(every="1m"), None)
    for i in range(5):
        s.record(OccurrenceRecord(60_000 * (i + 1), "fired", "", f"t{i}", i))
    rows, older = pages.recent(s, None, size=2)
    assert [r.task_id for r in rows] == ["t4", "t3"] and older == 3
    rows, older = pages.recent(s, older, size=2)
    assert [r.task_id for r in rows] == ["t2", "t1"] and older == 1
    rows, older = pages.recent(s, older, size=2)
    assert [r.task_id for r in rows] == ["t0"] and older is None
    assert pages.recent(s, 99, size=2)[0][0].task_id == "t4", "past the end: the newest"
    assert pages.recent(s, 0, size=2) == ([], None)
    assert rows[0].nominal.utc == "1970-01-01T00:01:00Z"


async def test_a_tasks_page_names_the_schedule_occurrence_it_is(
    make_web: Callable[..., Any],
) -> None:
    w = await make_web()
    e = w.rig.engine
    await e.schedules.create(
        "berlin.1m", "report", ScheduleSpec(every="1m", tz="Europe/Berlin", overlap="allow-all")
    )
    w.clock.advance(60)
    s = w.schedule("berlin.1m")
    await _until(lambda: len(s.occurrences) == 1, "a time fired")
    fired = s.occurrences[0]
    triggered = await e.schedules.trigger("berlin.1m", operator="setup")
    plain = await e.submit("report", None)
    await sign_in(w.client, w.tokens["rita"])

    def line(page: str) -> str:
        m = re.search(r'<span id="fired-by">(.*?)</span>', page, re.S)
        return "" if m is None else m.group(1)

    page = (await w.client.get(f"/tasks/{fired.task_id}")).text
    nominal = datetime.fromtimestamp(fired.nominal_ms / 1000, UTC)
    local = nominal.astimezone(ZoneInfo("Europe/Berlin")).strftime("%Y-%m-%d %H:%M:%S %Z")
    assert line(page) == (
        f'fired by schedule <a href="/schedules/berlin.1m">berlin.1m</a> '
        f"for {iso(nominal)} ({local})"
    ), "linked, in UTC and the zone"
    assert line((await w.client.get(f"/tasks/{triggered}")).text).startswith("triggered on ")
    assert line((await w.client.get(f"/tasks/{plain.task_id}")).text) == "", "not scheduled"
    await e.schedules.delete("berlin.1m", operator="setup")
    gone = line((await w.client.get(f"/tasks/{fired.task_id}")).text)
    assert gone == f"fired by schedule berlin.1m (deleted) for {iso(nominal)}", gone
