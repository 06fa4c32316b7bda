"""The operator's pages and actions, through HTTP against a real node."""

from __future__ import annotations

import base64
import json
import re
import signal
import ssl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from apollo11.lease.local_etcd import free_port
from apollo11.scheduler.client import SyncClient
from apollo11.scheduler.security import Role, create_token
from apollo11.scheduler.security.certs import make_ca, make_leaf
from apollo11.scheduler.security.tokens import revoke
from apollo11.scheduler.web.timeline import bars
from tests.nodes import NodeProc, start_node


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NodeProc, str]]:
    port = free_port()
    node = start_node(
        tmp_path_factory.mktemp("web") / "d",
        "--http",
        f"127.0.0.1:{port}",
        "--http-allowed-hosts",
        "ui.example, Other.Example",
        "--allow-shell",
    )
    yield node, f"http://127.0.0.1:{port}"
    assert node.stop() == 0


def _failed_task(node: NodeProc) -> str:
    with SyncClient(node.address) as c:
        sub = c.submit("etl", {"step_seconds": 0, "fail_step": "infer", "fail_times": 4})
        assert c.wait(sub.task_id, check=False).state == "FAILED"
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
    # a task id prefix, a submission time range (issue 19)
    r = httpx.get(base + "/tasks", params={"prefix": task_id[:16]})
    assert task_id in r.text
    r = httpx.get(base + "/tasks", params={"prefix": "ffff"})
    assert task_id not in r.text and "no tasks" in r.text
    r = httpx.get(base + "/tasks", params={"since": "2000-01-01", "until": "2999-01-01T00:00"})
    assert task_id in r.text
    assert task_id not in httpx.get(base + "/tasks", params={"until": "2000-01-01"}).text
    bad = httpx.get(base + "/tasks", params={"since": "yesterday"})
    assert bad.status_code == 400 and "since must be an ISO 8601 date or time" in bad.text
    r = httpx.get(base + "/events", params={"task": task_id})
    assert r.status_code == 200 and "TASK_SUBMITTED" in r.text and "STEP_FAILED" in r.text
    assert httpx.get(base + "/events", params={"from": "x"}).status_code == 400
    r = httpx.get(base + "/static/style.css")
    assert r.status_code == 200


def test_the_tasks_page_goes_page_by_page(tmp_path: Path) -> None:
    from apollo11.scheduler.web import pages

    port = free_port()
    node = start_node(tmp_path / "d", "--http", f"127.0.0.1:{port}")
    base = f"http://127.0.0.1:{port}"
    try:
        with SyncClient(node.address) as c:
            subs = c.submit_many(
                [
                    {"workflow": "etl", "input": {"step_seconds": 0}}
                    for _ in range(pages.LIST_LIMIT + 5)
                ]
            )
        ids = {s.task_id for s in subs}
        first = httpx.get(base + "/tasks", params={"workflow": "etl"}).text
        seen = set(re.findall(r'<a href="/tasks/([0-9a-f-]+)">', first))
        assert len(seen & ids) == pages.LIST_LIMIT
        m = re.search(r'<a id="older" href="([^"]+)">', first)
        assert m is not None, "a full page links to the older tasks"
        older = httpx.get(base + m.group(1).replace("&amp;", "&")).text
        rest = set(re.findall(r'<a href="/tasks/([0-9a-f-]+)">', older))
        assert (seen | rest) & ids == ids and not seen & rest
        assert 'id="older"' not in older
    finally:
        assert node.stop() == 0


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
    # the task's input, as submitted (issue 19)
    r = httpx.get(f"{base}/tasks/{task_id}")
    assert 'id="task-input"' in r.text and '"fail_step": "infer"' in r.text


def test_a_finished_task_offers_no_step_actions_and_a_durable_one_shows_its_wait(
    web: tuple[NodeProc, str],
) -> None:
    node, base = web
    with SyncClient(node.address) as c:
        sub = c.submit("etl", {"step_seconds": 0, "fail_step": "collect", "fail_times": 9})
        c.wait(sub.task_id, check=False)
        page = httpx.get(f"{base}/tasks/{sub.task_id}").text
        assert "do-retry" in page and "do-skip" in page, "a failed task's step may be retried"
        c.cancel(sub.task_id, reason="not needed", operator="ana")
        page = httpx.get(f"{base}/tasks/{sub.task_id}").text
        assert "do-retry" not in page and "do-skip" not in page, "cancelled: nothing to act on"
        waiting = c.submit("approval", {"id": "W9", "amount": 2})
        deadline = time.monotonic() + 20
        while c.task(waiting.task_id).state != "WAITING":
            assert time.monotonic() < deadline
            time.sleep(0.05)
    page = httpx.get(f"{base}/tasks/{waiting.task_id}").text
    m = re.search(r'<p id="durable-wait">([^<]*)</p>', page)
    assert m is not None, page
    assert (
        "waiting for event" in m.group(1)
        and "approval:W9" in m.group(1)
        and " until " in m.group(1)
    )
    rows = re.findall(r"<tr><td>(\d+)</td><td>(\w+)</td><td>([^<]*)</td>", page)
    assert ("0", "step", "charge") in rows, rows


def test_a_parent_links_its_children_and_a_child_its_parent(web: tuple[NodeProc, str]) -> None:
    node, base = web
    with SyncClient(node.address) as c:
        sub = c.submit("fulfil", {"id": "P1", "items": ["a", "b"], "step_seconds": 0})
        done = c.wait(sub.task_id)
    kids = [k["child"] for k in (done.durable or {})["checkpoints"] if k["kind"] == "spawn"]
    page = httpx.get(f"{base}/tasks/{sub.task_id}").text
    m = re.search(r'<p id="children">(.*?)</p>', page)
    assert m is not None, page
    assert re.findall(r'href="/tasks/([^"]+)"', m.group(1)) == kids
    page = httpx.get(f"{base}/tasks/{kids[0]}").text
    assert f'<a id="parent" href="/tasks/{sub.task_id}">' in page


def test_a_shell_dag_shows_its_own_name(web: tuple[NodeProc, str]) -> None:
    node, base = web
    dag = {"name": "nightly", "steps": [{"name": "a", "run": "true", "idempotency": "idempotent"}]}
    with SyncClient(node.address) as c:
        sub = c.submit_shell(dag)
        c.wait(sub.task_id)
    page = httpx.get(f"{base}/tasks/{sub.task_id}").text
    assert '<span id="workflow">shell nightly</span>' in page
    # and in the lists: /tasks and the cluster page's recent tasks
    for listing in (f"{base}/tasks", f"{base}/tasks?workflow=shell", f"{base}/"):
        row = re.search(rf'<a href="/tasks/{sub.task_id}">.*?</tr>', httpx.get(listing).text, re.S)
        assert row is not None, listing
        assert '<td class="workflow">shell nightly</td>' in row.group(0), row.group(0)


def test_a_tasks_name_is_its_workflow_and_a_shell_dags_own_name() -> None:
    from apollo11.scheduler.taskname import task_name

    assert task_name("shell", {"name": "nightly", "steps": []}) == "shell nightly"
    assert task_name("shell", {"steps": []}) == "shell"
    assert task_name("shell", {"name": 7}) == "shell"
    assert task_name("etl", {"name": "nightly"}) == "etl"  # an input field, not a DAG


def _attempt_rows(page: str) -> list[tuple[str, str, str, str]]:
    """(step, attempt, outcome, the error and output cell) of each row of #attempts."""
    return re.findall(
        r'<tr class="attempt" data-step="([^"]+)" data-attempt="(\d+)" data-kind="attempt">'
        r'.*?<td class="outcome">([^<]*)</td>.*?<td>([^<]*|.*?)</td></tr>',
        page,
        flags=re.S,
    )


def test_each_attempt_shows_its_outcome_and_the_tail_of_its_output(
    web: tuple[NodeProc, str],
) -> None:
    """Issue 19: every attempt of a step, not only its last, with what it said."""
    node, base = web
    dag = {
        "name": "flaky",
        "steps": [
            {
                "name": "dump",
                # attempt 1 fails with markup in its output; attempt 2 succeeds
                "run": 'echo "<b>dump $APOLLO11_ATTEMPT</b>"; test "$APOLLO11_ATTEMPT" -gt 1',
                "idempotency": "idempotent",
                "retry": {"attempts": 2, "backoff_s": 0.01},
            }
        ],
    }
    with SyncClient(node.address) as c:
        etl = c.submit("etl", {"step_seconds": 0, "fail_step": "infer", "fail_times": 1})
        shell = c.submit_shell(dag)
        assert c.wait(etl.task_id).state == "SUCCEEDED"
        assert c.wait(shell.task_id).state == "SUCCEEDED"
    page = httpx.get(f"{base}/tasks/{etl.task_id}").text
    rows = [r[:3] for r in _attempt_rows(page)]
    assert rows == [
        ("collect", "1", "succeeded"),
        ("clean", "1", "succeeded"),
        ("feature", "1", "succeeded"),
        ("infer", "1", "failed"),
        ("infer", "2", "succeeded"),
        ("persist", "1", "succeeded"),
    ], rows
    infer = [r[3] for r in _attempt_rows(page) if r[0] == "infer"]
    assert "RuntimeError: injected failure of infer (attempt 1)" in infer[0]
    assert '<pre class="tail">{' in infer[1], "a success shows its result"
    page = httpx.get(f"{base}/tasks/{shell.task_id}").text
    (first, second) = [r[3] for r in _attempt_rows(page)]
    assert "command exited with code 1" in first
    assert "&lt;b&gt;dump 1&lt;/b&gt;" in first and "<b>dump" not in page, "escaped"
    assert "&lt;b&gt;dump 2&lt;/b&gt;" in second
    # as of an event, the attempts then
    with SyncClient(node.address) as c:
        first_id = c.task(etl.task_id).first_event_id
    page = httpx.get(f"{base}/tasks/{etl.task_id}", params={"as_of": first_id + 1}).text
    assert [r[:3] for r in _attempt_rows(page)] == [("collect", "1", "running")]


def csrf_of(page: str) -> str:
    m = re.search(r'name="csrf" value="([^"]+)"', page)
    assert m is not None, "the page's forms carry a CSRF token"
    return m.group(1)


def notice(browser: httpx.Client, r: httpx.Response) -> tuple[str, str]:
    """Follow an action's redirect: (the page's #message, its #error)."""
    assert r.status_code == 303, r.text
    page = browser.get(r.headers["location"]).text
    m = re.search(r'<div class="note" id="message">([^<]*)</div>', page)
    e = re.search(r'<div class="error" id="error">([^<]*)</div>', page)
    return (m.group(1) if m else "", e.group(1) if e else "")


def test_actions_need_a_reason_and_a_confirmation_and_are_audited(
    web: tuple[NodeProc, str],
) -> None:
    node, base = web
    task_id = _failed_task(node)
    browser = httpx.Client(base_url=base)
    csrf = csrf_of(browser.get(f"/tasks/{task_id}").text)
    url = f"/tasks/{task_id}/retry"
    form = {"step": "infer", "display": "alice", "csrf": csrf}
    r = browser.post(url, data={**form, "reason": "fixed"})
    assert r.headers["location"] == f"/tasks/{task_id}", "no notice in the URL"
    assert notice(browser, r) == ("", "tick &#39;I am sure&#39; to confirm")
    r = browser.post(url, data={**form, "reason": " ", "confirm": "yes"})
    assert notice(browser, r) == ("", "reason is required (up to 1024 characters)")
    r = browser.post(url, data={**form, "step": "collect", "reason": "r", "confirm": "yes"})
    assert "refused" in notice(browser, r)[1]
    r = browser.post(url, data={**form, "reason": "model fixed", "confirm": "yes"})
    message = notice(browser, r)[0]
    assert "retry of infer recorded as event" in message
    assert "by anonymous (as alice)" in message
    assert 'id="message"' not in browser.get(f"/tasks/{task_id}").text, "shown once"
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
    r = browser.post(
        f"/tasks/{other}/cancel",
        data={"reason": "wrong batch", "confirm": "yes", "csrf": csrf},
    )
    assert "cancel recorded as event" in notice(browser, r)[0]
    with SyncClient(node.address) as c:
        assert c.wait(other, check=False).state == "CANCELLED"
    assert (
        'cancelled by <span id="cancelled-by">anonymous</span>'
        in httpx.get(f"{base}/tasks/{other}").text
    )
    # no other action exists
    form = {"reason": "r", "confirm": "yes", "csrf": csrf}
    assert browser.post(f"/tasks/{other}/delete", data=form).status_code == 404
    browser.close()


def test_no_notice_from_the_url(web: tuple[NodeProc, str]) -> None:
    """Red-team: /?message=... and /tasks/X?error=... were shown as the node's own
    notice (escaped, but fine for phishing: 'call +1 555 to restore access')."""
    node, base = web
    task_id = _failed_task(node)
    bait = "session expired - call the helpdesk at +1 555 0100"
    for path, q in (
        ("/", "message"),
        (f"/tasks/{task_id}", "message"),
        (f"/tasks/{task_id}", "error"),
    ):
        page = httpx.get(base + path, params={q: bait}).text
        assert bait not in page and 'id="message"' not in page and 'id="error"' not in page
    # nor from a cookie that another page on this host set (cookies ignore the port)
    with SyncClient(node.address) as c:
        name = f"apollo11-flash-{c.status().node_id}"
    body = json.dumps([f"/tasks/{task_id}", bait, "", time.time() + 60]).encode()
    forged = base64.urlsafe_b64encode(body).decode().rstrip("=") + ".c2lnbmVk"
    page = httpx.get(f"{base}/tasks/{task_id}", cookies={name: forged}).text
    assert bait not in page and 'id="message"' not in page


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


def test_dns_rebinding_is_refused_by_host(web: tuple[NodeProc, str]) -> None:
    """evil.example re-pointed at 127.0.0.1 makes the attacker's page our "same
    origin": its own Host and Origin match each other, so only the Host name can
    tell. Red-team repro: the page (and its CSRF token) was served, the cancel recorded."""
    node, base = web
    port = base.rpartition(":")[2]
    with SyncClient(node.address) as c:
        task_id = c.submit("etl", {"step_seconds": 5}).task_id
    evil = {"host": f"evil.example:{port}"}
    for path in ("/", f"/tasks/{task_id}", "/events", "/metrics", "/static/style.css"):
        r = httpx.get(base + path, headers=evil)
        assert r.status_code == 421 and "--http-allowed-hosts" in r.text, path
        assert task_id not in r.text and 'name="csrf"' not in r.text
    csrf = csrf_of(httpx.get(f"{base}/tasks/{task_id}").text)
    r = httpx.post(
        f"{base}/tasks/{task_id}/cancel",
        data={"reason": "rebound", "confirm": "yes", "csrf": csrf},
        headers={**evil, "origin": f"http://evil.example:{port}"},
    )
    assert r.status_code == 421
    # our own name as Host, the rebinding site as Origin: refused too
    r = httpx.post(
        f"{base}/tasks/{task_id}/cancel",
        data={"reason": "rebound", "confirm": "yes", "csrf": csrf},
        headers={"host": f"localhost:{port}", "origin": f"http://evil.example:{port}"},
    )
    assert r.status_code == 403 and "cross-site" in r.text
    with SyncClient(node.address) as c:
        assert c.task(task_id).state != "CANCELLED", "nothing was recorded"
        c.cancel(task_id, operator="test", reason="cleanup")
    assert httpx.get(base + "/healthz", headers=evil).status_code == 200, "probes by any name"
    # the names it knows: loopback, IP literals, the node id, --http-allowed-hosts
    with SyncClient(node.address) as c:
        node_id = c.status().node_id
    for host in (
        "localhost",
        "LOCALHOST.",
        "[::1]",
        "10.1.2.3",
        node_id,
        "ui.example",
        "other.example",
    ):
        r = httpx.get(f"{base}/tasks/{task_id}", headers={"host": f"{host}:{port}"})
        assert r.status_code == 200, host
    assert httpx.get(base + "/metrics", headers={"host": "ui.example"}).status_code == 200


def test_every_response_forbids_framing_and_sniffing(web: tuple[NodeProc, str]) -> None:
    _, base = web
    for path in ("/", "/tasks", "/tasks/nope", "/static/style.css", "/metrics"):
        r = httpx.get(base + path)
        assert r.headers["x-frame-options"] == "DENY", path
        assert r.headers["content-security-policy"] == "frame-ancestors 'none'", path
        assert r.headers["x-content-type-options"] == "nosniff", path
        assert r.headers["referrer-policy"] == "same-origin", path


def test_timeline_bars_from_events() -> None:
    from apollo11.scheduler.log.record import Event, EventType

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


# ------------------------------------------------- a node with a tokens file


@dataclass
class Secured:
    node: NodeProc
    base: str
    tokens: Path
    operator: str
    reader: str
    worker: str


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    root = tmp_path_factory.mktemp("secured")
    tokens = root / "tokens"
    operator = create_token(tokens, "olga", Role.OPERATOR)
    reader = create_token(tokens, "rita", Role.READER)
    worker = create_token(tokens, "w1", Role.WORKER)
    port = free_port()
    node = start_node(root / "d", "--http", f"127.0.0.1:{port}", "--tokens-file", str(tokens))
    yield Secured(node, f"http://127.0.0.1:{port}", tokens, operator, reader, worker)
    assert node.stop() == 0


@contextmanager
def sign_in(base: str, token: str) -> Iterator[httpx.Client]:
    """A browser-like client with a session: the login form, then its POST."""
    with httpx.Client(base_url=base) as client:
        form = client.get("/login")
        assert form.status_code == 200
        r = client.post("/login", data={"token": token, "csrf": csrf_of(form.text), "next": "/"})
        assert r.status_code == 303 and r.headers["location"] == "/", r.text
        yield client


def _failed_task_as(s: Secured) -> str:
    with SyncClient(s.node.address, token=s.operator) as c:
        sub = c.submit("etl", {"step_seconds": 0, "fail_step": "infer", "fail_times": 4})
        assert c.wait(sub.task_id, check=False).state == "FAILED"
    return sub.task_id


def _events_of(s: Secured, task_id: str) -> int:
    with SyncClient(s.node.address, token=s.operator) as c:
        return c.task(task_id).last_event_id


def test_reading_pages_need_a_session(secured: Secured) -> None:
    task_id = _failed_task_as(secured)
    base = secured.base
    for path in ("/", "/tasks?state=FAILED", f"/tasks/{task_id}", "/events"):
        r = httpx.get(base + path)
        assert r.status_code == 303, path
        assert r.headers["location"] == "/login?next=" + quote(path, safe=""), path
    assert task_id not in httpx.get(f"{base}/tasks/{task_id}").text
    assert httpx.get(base + "/healthz").status_code == 200, "probes need no credential"
    assert httpx.get(base + "/static/style.css").status_code == 200
    r = httpx.post(
        f"{base}/tasks/{task_id}/retry",
        data={"step": "infer", "reason": "r", "confirm": "yes", "csrf": "x"},
    )
    assert r.status_code == 403, "a post without a session is refused, not redirected"
    with sign_in(base, secured.reader) as browser:
        for path in ("/", "/tasks", f"/tasks/{task_id}", f"/events?task={task_id}"):
            r = browser.get(path)
            assert r.status_code == 200, path
            assert '<span id="signed-in">rita (reader)</span>' in r.text
    assert _events_of(secured, task_id) > 0


def test_sign_in_with_a_good_and_a_bad_token(secured: Secured) -> None:
    base = secured.base
    with httpx.Client(base_url=base) as client:
        form = client.get("/login", params={"next": "/events"})
        csrf = csrf_of(form.text)
        cookie = next(c for c in client.cookies.jar if c.name.startswith("apollo11-login-"))
        assert cookie.path == "/login" and cookie.has_nonstandard_attr("HttpOnly")
        r = client.post("/login", data={"token": "a11_wrong", "csrf": csrf})
        assert r.status_code == 401 and "not valid" in r.text
        assert not any(c.name.startswith("apollo11-session-") for c in client.cookies.jar)
        csrf = csrf_of(r.text)  # the refused attempt came back with a fresh form and cookie
        r = client.post("/login", data={"token": secured.operator, "csrf": csrf + "x"})
        assert r.status_code == 403, "the login form's CSRF token is checked"
        r = client.post(
            "/login",
            data={"token": secured.operator, "csrf": csrf},
            headers={"origin": "http://evil.example"},
        )
        assert r.status_code == 403 and "cross-site" in r.text
        r = client.post("/login", data={"token": secured.operator, "csrf": csrf, "next": "/events"})
        assert r.status_code == 303 and r.headers["location"] == "/events"
        header = r.headers["set-cookie"].lower()
        assert "apollo11-session-" in header
        assert "httponly" in header and "samesite=strict" in header
        assert "; secure" not in header, "plain HTTP: not Secure (TLS: see below)"
        assert secured.operator.lower() not in header, "the token stays on the server"
        page = client.get("/events")
        assert page.status_code == 200 and "olga (operator)" in page.text
        assert secured.operator not in page.text
        name = next(c.name for c in client.cookies.jar if c.name.startswith("apollo11-session-"))
        sid = client.cookies[name]
        r = client.post("/logout", data={"csrf": csrf_of(page.text)})
        assert r.status_code == 303 and r.headers["location"] == "/login"
    # signed out: the session is gone on the server, not only in that browser
    assert httpx.get(base + "/", cookies={name: sid}).status_code == 303


def test_a_worker_token_cannot_sign_in(secured: Secured) -> None:
    """A worker's token is valid, but grants the worker stream only: it signed in,
    and then every page answered 403. The sign-in refuses it, saying why."""
    with httpx.Client(base_url=secured.base) as client:
        csrf = csrf_of(client.get("/login", params={"next": "/tasks"}).text)
        r = client.post("/login", data={"token": secured.worker, "csrf": csrf, "next": "/tasks"})
        assert r.status_code == 403, r.text
        assert '<form method="post" action="/login"' in r.text, "the login page, again"
        said = " ".join(r.text.split())
        assert (
            "that token (w1, role worker) cannot read these pages: sign in with a token "
            "of role reader, submitter or operator"
        ) in said, said
        assert not any(c.name.startswith("apollo11-session-") for c in client.cookies.jar)
        r = client.get("/tasks")
        assert r.status_code == 303 and r.headers["location"].startswith("/login"), "no session"
        # ...nor does it read /metrics
        bearer = {"authorization": f"Bearer {secured.worker}"}
        assert httpx.get(secured.base + "/metrics", headers=bearer).status_code == 403


def test_no_open_redirect_after_sign_in(secured: Secured) -> None:
    with httpx.Client(base_url=secured.base) as client:
        for target in ("//evil.example/", "https://evil.example/", "/\\evil.example"):
            csrf = csrf_of(client.get("/login").text)
            r = client.post("/login", data={"token": secured.reader, "csrf": csrf, "next": target})
            assert r.headers["location"] == "/", target


def test_actions_need_an_operator_a_csrf_token_and_our_origin(secured: Secured) -> None:
    task_id = _failed_task_as(secured)
    url = f"/tasks/{task_id}/retry"
    form = {"step": "infer", "reason": "db back", "confirm": "yes", "display": "Olga O."}
    before = _events_of(secured, task_id)
    with sign_in(secured.base, secured.reader) as reader:
        page = reader.get(f"/tasks/{task_id}").text
        assert "do-retry" not in page and "need role operator" in page
        r = reader.post(url, data={**form, "csrf": csrf_of(page)})
        assert r.status_code == 403 and "needs role operator; rita has role reader" in r.text
    with sign_in(secured.base, secured.operator) as browser:
        page = browser.get(f"/tasks/{task_id}").text
        assert 'class="do-retry"' in page
        csrf = csrf_of(page)
        assert browser.post(url, data=form).status_code == 403, "no CSRF token"
        assert browser.post(url, data={**form, "csrf": "wrong"}).status_code == 403
        assert browser.post(url, data={**form, "csrf": csrf[:-1]}).status_code == 403
        for headers in (
            {"origin": "http://127.0.0.1:1"},  # another port is another origin
            {"origin": "null"},
            {"referer": "http://evil.example/page"},
        ):
            r = browser.post(url, data={**form, "csrf": csrf}, headers=headers)
            assert r.status_code == 403 and "cross-site request refused" in r.text, headers
        assert _events_of(secured, task_id) == before, "no refused post wrote an event"
        r = browser.post(url, data={**form, "csrf": csrf}, headers={"origin": secured.base})
        assert "by olga (as Olga O.)" in notice(browser, r)[0]
        with SyncClient(secured.node.address, token=secured.reader) as c:
            t = c.wait(task_id)
        infer = next(s for s in t.steps if s.name == "infer")
        assert infer.override is not None
        assert (infer.override["operator"], infer.override["as"]) == ("olga", "Olga O.")
        page = browser.get(f"/tasks/{task_id}").text
        assert '<td class="who">olga (as Olga O.)</td>' in page
        assert "retry by olga (as Olga O.)" in page


def test_metrics_take_a_bearer_token(secured: Secured, tmp_path: Path) -> None:
    base = secured.base
    r = httpx.get(base + "/metrics")
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
    bearer = {"authorization": f"Bearer {secured.reader}"}
    r = httpx.get(base + "/metrics", headers=bearer)
    assert r.status_code == 200 and "apollo11_role_primary 1.0" in r.text
    for bad in ("Bearer a11_wrong", f"Basic {secured.reader}", "Bearer"):
        assert httpx.get(base + "/metrics", headers={"authorization": bad}).status_code == 401
    with sign_in(base, secured.reader) as browser:
        assert browser.get("/metrics").status_code == 200, "a session will do as well"
    # --metrics-open: Prometheus without a credential, the pages still closed
    port = free_port()
    node = start_node(
        tmp_path / "d",
        "--http",
        f"127.0.0.1:{port}",
        "--tokens-file",
        str(secured.tokens),
        "--metrics-open",
    )
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/metrics").status_code == 200
        assert httpx.get(f"http://127.0.0.1:{port}/").status_code == 303
    finally:
        assert node.stop() == 0


def test_a_revoked_token_ends_its_sessions(secured: Secured) -> None:
    token = create_token(secured.tokens, "temp", Role.OPERATOR)
    secured.node.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while True:  # the node reloads on SIGHUP; wait until it knows the new token
        with httpx.Client(base_url=secured.base) as probe:
            csrf = csrf_of(probe.get("/login").text)
            if probe.post("/login", data={"token": token, "csrf": csrf}).status_code == 303:
                break
        assert time.monotonic() < deadline, "the new token was never accepted"
        time.sleep(0.1)
    with sign_in(secured.base, token) as browser:
        assert browser.get("/tasks").status_code == 200
        assert revoke(secured.tokens, "temp") == 1
        secured.node.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while browser.get("/tasks").status_code == 200:
            assert time.monotonic() < deadline, "the revoked token's session lived on"
            time.sleep(0.1)
        r = browser.get("/tasks")
        assert r.status_code == 303 and r.headers["location"].startswith("/login")
    with sign_in(secured.base, secured.operator) as other:
        assert other.get("/tasks").status_code == 200, "other tokens' sessions are untouched"


def test_https_with_the_nodes_certificate(tmp_path: Path) -> None:
    ca_key, ca = make_ca("test CA")
    key, cert = make_leaf(ca_key, ca, "n1", ["127.0.0.1"], client=False, server=True)
    for name, data in (("ca.pem", ca), ("n1.pem", cert), ("n1-key.pem", key)):
        (tmp_path / name).write_bytes(data)
    tokens = tmp_path / "tokens"
    token = create_token(tokens, "olga", Role.OPERATOR)
    port = free_port()
    node = start_node(
        tmp_path / "d",
        "--http",
        f"127.0.0.1:{port}",
        "--tls-cert",
        str(tmp_path / "n1.pem"),
        "--tls-key",
        str(tmp_path / "n1-key.pem"),
        "--tokens-file",
        str(tokens),
    )
    base = f"https://127.0.0.1:{port}"
    try:
        with pytest.raises(httpx.RemoteProtocolError):
            httpx.get(f"http://127.0.0.1:{port}/healthz")
        trust = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
        with httpx.Client(base_url=base, verify=trust) as client:
            assert client.get("/healthz").status_code == 200
            csrf = csrf_of(client.get("/login").text)
            r = client.post("/login", data={"token": token, "csrf": csrf})
            assert r.status_code == 303
            assert "; secure" in r.headers["set-cookie"].lower(), "under TLS the cookie is Secure"
            assert client.get("/tasks").status_code == 200
    finally:
        assert node.stop() == 0


def test_listed_names_read_a_shell_tasks_name_once() -> None:
    from types import SimpleNamespace as NS

    from apollo11.scheduler.taskname import ListedNames

    read: list[str] = []
    tasks = {
        "s1": NS(workflow="shell", input={"name": "nightly"}),
        "s2": NS(workflow="shell", input={"steps": []}),
        "s3": NS(workflow="shell", input={"name": "weekly"}),
    }

    def peek(task_id: str) -> object:
        read.append(task_id)
        return tasks.get(task_id)

    names = ListedNames(keep=2)
    rows = [NS(task_id=t, workflow=w) for t, w in [("s1", "shell"), ("e1", "etl"), ("s2", "shell")]]
    assert names.of(rows, peek) == {"s1": "shell nightly", "s2": "shell"}
    assert names.of(rows, peek) == {"s1": "shell nightly", "s2": "shell"}
    assert read == ["s1", "s2"], "each shell task read once; other rows never"
    names.of([NS(task_id="s3", workflow="shell")], peek)  # keeps 2: s1, the oldest, goes
    assert names.of([NS(task_id="s2", workflow="shell")], peek) == {"s2": "shell"}
    names.of([NS(task_id="s1", workflow="shell")], peek)
    assert read == ["s1", "s2", "s3", "s1"]
    gone = names.of([NS(task_id="s9", workflow="shell")], peek)
    assert gone == {"s9": "shell"}, "a task not found is shown by its workflow"
    tasks["s9"] = NS(workflow="shell", input={"name": "late"})
    assert names.of([NS(task_id="s9", workflow="shell")], peek) == {"s9": "shell late"}
