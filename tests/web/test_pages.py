"""The operator's pages and actions, through HTTP against a real node."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from lease.local_etcd import free_port
from scheduler.client import SyncClient
from scheduler.web.timeline import bars
from tests.nodes import NodeProc, start_node


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NodeProc, str]]:
    port = free_port()
    node = start_node(tmp_path_factory.mktemp("web") / "d", "--http", f"127.0.0.1:{port}")
    yield node, f"http://127.0.0.1:{port}"
    assert node.stop() == 0


def _failed_task(node: NodeProc) -> str:
    with SyncClient(node.address) as c:
        sub = c.submit("etl", {"step_seconds": 0, "fail_step": "infer", "fail_times": 4})
        assert c.wait(sub.task_id).state == "FAILED"
    return sub.task_id


def test_cluster_tasks_and_events_pages(web: tuple[NodeProc, str]) -> None:
    node, base = web
    task_id = _failed_task(node)
    r = httpx.get(base + "/")
    assert r.status_code == 200 and 'id="leader"' in r.text and task_id in r.text
    r = httpx.get(base + "/tasks", params={"state": "FAILED", "workflow": "etl"})
    assert r.status_code == 200 and task_id in r.text
    r = httpx.get(base + "/tasks", params={"state": "SUCCEEDED"})
    assert task_id not in r.text
    assert httpx.get(base + "/tasks", params={"state": "BOGUS"}).status_code == 400
    r = httpx.get(base + "/events", params={"task": task_id})
    assert r.status_code == 200 and "TASK_SUBMITTED" in r.text and "STEP_FAILED" in r.text
    assert httpx.get(base + "/events", params={"from": "x"}).status_code == 400
    r = httpx.get(base + "/static/style.css")
    assert r.status_code == 200


def test_task_page_timeline_and_time_travel(web: tuple[NodeProc, str]) -> None:
    node, base = web
    task_id = _failed_task(node)
    r = httpx.get(f"{base}/tasks/{task_id}")
    assert r.status_code == 200
    for step in ("collect", "clean", "feature", "infer", "persist"):
        assert f'<tr data-step="{step}">' in r.text
    # 3 successful first steps + 4 failed attempts of infer
    assert len(re.findall(r'<rect class="bar"', r.text)) == 7
    assert 'class="do-retry"' in r.text and 'class="do-cancel"' in r.text
    with SyncClient(node.address) as c:
        first = c.task(task_id).first_event_id
    r = httpx.get(f"{base}/tasks/{task_id}", params={"as_of": first + 2})
    assert r.status_code == 200 and f"as of event {first + 2}" in r.text
    assert "do-retry" not in r.text, "the past is read-only"
    assert httpx.get(f"{base}/tasks/{task_id}", params={"as_of": 10**9}).status_code == 400
    assert httpx.get(f"{base}/tasks/nope").status_code == 404


def csrf_of(page: str) -> str:
    m = re.search(r'name="csrf" value="([^"]+)"', page)
    assert m is not None, "the page's forms carry a CSRF token"
    return m.group(1)


def test_actions_need_a_reason_and_a_confirmation_and_are_audited(
    web: tuple[NodeProc, str],
) -> None:
    node, base = web
    task_id = _failed_task(node)
    csrf = csrf_of(httpx.get(f"{base}/tasks/{task_id}").text)
    url = f"{base}/tasks/{task_id}/retry"
    form = {"step": "infer", "display": "alice", "csrf": csrf}
    r = httpx.post(url, data={**form, "reason": "fixed"})
    assert r.status_code == 303 and "error=" in r.headers["location"], "no confirmation"
    r = httpx.post(url, data={**form, "reason": " ", "confirm": "yes"})
    assert "error=" in r.headers["location"], "no reason"
    r = httpx.post(url, data={**form, "step": "collect", "reason": "r", "confirm": "yes"})
    assert "refused" in httpx.get(base + r.headers["location"]).text
    r = httpx.post(url, data={**form, "reason": "model fixed", "confirm": "yes"})
    assert r.status_code == 303 and "message=" in r.headers["location"]
    page = httpx.get(base + r.headers["location"]).text
    assert "retry of infer recorded as event" in page
    assert "by anonymous (as alice)" in page
    with SyncClient(node.address) as c:
        t = c.wait(task_id)
    assert t.state == "SUCCEEDED"
    infer = next(s for s in t.steps if s.name == "infer")
    assert infer.override is not None
    # an open node's principal is anonymous; the typed name is kept beside it
    assert (infer.override["operator"], infer.override["as"], infer.override["reason"]) == (
        "anonymous",
        "alice",
        "model fixed",
    )
    page = httpx.get(f"{base}/tasks/{task_id}").text
    assert re.search(r'<td class="who">anonymous \(as alice\)</td>', page), "on the timeline"
    # cancel through the page, no display name
    with SyncClient(node.address) as c:
        other = c.submit("etl", {"step_seconds": 5}).task_id
    r = httpx.post(
        f"{base}/tasks/{other}/cancel",
        data={"reason": "wrong batch", "confirm": "yes", "csrf": csrf},
    )
    assert "message=" in r.headers["location"]
    with SyncClient(node.address) as c:
        assert c.wait(other).state == "CANCELLED"
    assert (
        'cancelled by <span id="cancelled-by">anonymous</span>'
        in httpx.get(f"{base}/tasks/{other}").text
    )


def test_an_open_node_refuses_forged_and_cross_site_posts(web: tuple[NodeProc, str]) -> None:
    """No login on a loopback node, but any web page the developer visits could post
    to it: those posts lack our form's token, and a browser names their origin."""
    node, base = web
    task_id = _failed_task(node)
    csrf = csrf_of(httpx.get(f"{base}/tasks/{task_id}").text)
    url = f"{base}/tasks/{task_id}/retry"
    form = {"step": "infer", "reason": "r", "confirm": "yes"}
    assert httpx.post(url, data=form).status_code == 403
    assert httpx.post(url, data={**form, "csrf": csrf + "x"}).status_code == 403
    evil = {"origin": "http://evil.example"}
    assert httpx.post(url, data={**form, "csrf": csrf}, headers=evil).status_code == 403
    with SyncClient(node.address) as c:
        infer = next(s for s in c.task(task_id).steps if s.name == "infer")
    assert infer.override is None and infer.state == "FAILED", "nothing was recorded"


def test_timeline_bars_from_events() -> None:
    from scheduler.log.record import Event, EventType

    def ev(i: int, t: EventType, step: str, attempt: int = 1, **p: object) -> Event:
        return Event(i, 1, "n1", "t", step, t, dict(p), 1000 + i * 10, attempt)

    items = bars(
        [
            ev(1, EventType.STEP_STARTED, "a"),
            ev(2, EventType.STEP_FAILED, "a", error="x", compensate=True),
            ev(3, EventType.STEP_COMPENSATING, "a"),
            ev(4, EventType.STEP_FAILED, "a", error="refund down", compensation=True),
            ev(5, EventType.STEP_COMPENSATING, "a"),
            ev(6, EventType.STEP_COMPENSATED, "a"),
            ev(7, EventType.STEP_STARTED, "a", attempt=2),
            ev(8, EventType.STEP_FAILED, "a", attempt=2, lost=True, error="lost"),
            ev(9, EventType.STEP_STARTED, "a", attempt=3),
        ]
    )
    assert [(b.kind, b.attempt, b.outcome) for b in items] == [
        ("attempt", 1, "failed"),
        ("compensation", 1, "compensation failed"),
        ("compensation", 1, "compensated"),
        ("attempt", 2, "lost"),
        ("attempt", 3, "running"),
    ]
