"""A task's legal hold and redaction from its page (issue 34): shown to everyone who
reads the page, done by the role the RPCs take (operator), through the same guard as
retry, skip and cancel (a session, the form's CSRF token, our origin), and recorded
with the signed-in principal, never with a name a form field gives."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from apollo11.lease.local_etcd import free_port
from apollo11.scheduler.client import SyncClient
from apollo11.scheduler.nodeview import MAX_REASON
from apollo11.scheduler.security import Role, create_token
from tests.nodes import NodeProc, start_node
from tests.web.test_pages import csrf_of, notice


@dataclass
class Node:
    node: NodeProc
    base: str
    tokens: dict[Role, str]  # operator "olga", submitter "sam", reader "rita"


NAMES = {Role.OPERATOR: "olga", Role.SUBMITTER: "sam", Role.READER: "rita"}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    root = tmp_path_factory.mktemp("hold")
    tokens_file = root / "tokens"
    tokens = {role: create_token(tokens_file, name, role) for role, name in NAMES.items()}
    port = free_port()
    node = start_node(root / "d", "--http", f"127.0.0.1:{port}", "--tokens-file", str(tokens_file))
    yield Node(node, f"http://127.0.0.1:{port}", tokens)
    assert node.stop() == 0


@contextmanager
def sign_in(s: Node, role: Role) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=s.base) as client:
        form = client.get("/login")
        r = client.post(
            "/login", data={"token": s.tokens[role], "csrf": csrf_of(form.text), "next": "/"}
        )
        assert r.status_code == 303, r.text
        yield client


def _client(s: Node) -> SyncClient:
    return SyncClient(s.node.address, token=s.tokens[Role.OPERATOR])


def _finished_task(s: Node) -> str:
    with _client(s) as c:
        sub = c.submit("etl", {"step_seconds": 0})
        assert c.wait(sub.task_id).state == "SUCCEEDED"
    return sub.task_id


def _last_event(s: Node, task_id: str) -> Any:
    with _client(s) as c:
        last = c.task(task_id).last_event_id
        events, _ = c.events(from_id=last, to_id=last, limit=1)
    return events[0]


def _last_id(s: Node, task_id: str) -> int:
    with _client(s) as c:
        return c.task(task_id).last_event_id


def test_only_an_operator_sees_the_forms_and_may_post(secured: Node) -> None:
    task_id = _finished_task(secured)
    before = _last_id(secured, task_id)
    for role in (Role.READER, Role.SUBMITTER):
        with sign_in(secured, role) as browser:
            page = browser.get(f"/tasks/{task_id}").text
            assert 'id="hold-state"' in page and "not held" in page, "the state is for all"
            assert "do-hold" not in page and "do-redact" not in page, role
            assert "hold and redact need role operator" in page
            for kind in ("hold", "release", "redact"):
                r = browser.post(
                    f"/tasks/{task_id}/{kind}",
                    data={"reason": "r", "confirm": task_id, "csrf": csrf_of(page)},
                )
                assert r.status_code == 403, (role, kind)
                name = NAMES[role]
                assert f"this needs role operator; {name} has role {role.value}" in r.text
    with sign_in(secured, Role.OPERATOR) as browser:
        page = browser.get(f"/tasks/{task_id}").text
        assert 'class="do-hold"' in page and 'class="do-redact"' in page
        assert "do-release" not in page, "nothing to release"
    assert _last_id(secured, task_id) == before, "no refused post wrote an event"


def test_hold_and_release_record_the_sessions_principal(secured: Node) -> None:
    task_id = _finished_task(secured)
    url = f"/tasks/{task_id}/hold"
    with sign_in(secured, Role.OPERATOR) as browser:
        page = browser.get(f"/tasks/{task_id}").text
        csrf = csrf_of(page)
        before = _last_id(secured, task_id)
        form = {"reason": "litigation 7", "confirm": "yes", "by": "mallory", "display": "mallory"}
        assert browser.post(url, data=form).status_code == 403, "no CSRF token"
        assert browser.post(url, data={**form, "csrf": "wrong"}).status_code == 403
        r = browser.post(
            url, data={**form, "csrf": csrf}, headers={"origin": "http://evil.example"}
        )
        assert r.status_code == 403 and "cross-site request refused" in r.text
        r = browser.post(url, data={**form, "reason": "  ", "csrf": csrf})
        assert notice(browser, r) == ("", f"reason is required (up to {MAX_REASON} characters)")
        r = browser.post(url, data={**form, "reason": "x" * (MAX_REASON + 1), "csrf": csrf})
        assert "reason is 1025 characters, over the limit of 1024" in notice(browser, r)[1]
        assert _last_id(secured, task_id) == before, "no refused post wrote an event"

        r = browser.post(url, data={**form, "csrf": csrf})
        message = notice(browser, r)[0]
        assert re.fullmatch(r"hold recorded as event \d+ by olga", message), message
        held = _last_event(secured, task_id)
        assert held.event_type == "TASK_HELD"
        assert held.payload == {"held": True, "by": "olga", "reason": "litigation 7"}
        with _client(secured) as c:
            assert c.task(task_id).held is not None
        page = browser.get(f"/tasks/{task_id}").text
        state = re.search(r'<p id="hold-state">(.*?)</p>', page, re.S)
        assert state is not None
        assert '<span id="held-by">olga</span>' in state.group(1)
        assert '<span id="held-reason">litigation 7</span>' in state.group(1)
        assert f"event {held.event_id}" in state.group(1)
        assert 'class="do-release"' in page and "do-hold" not in page
        # held: redaction is refused by the engine, in its own words
        r = browser.post(
            f"/tasks/{task_id}/redact", data={"reason": "gdpr", "confirm": task_id, "csrf": csrf}
        )
        error = notice(browser, r)[1]
        assert error == (
            f"redact refused: task {task_id} is held by olga (litigation 7): release it first"
        ), error
        # a second hold: what the RPC answers (FAILED_PRECONDITION)
        r = browser.post(url, data={**form, "csrf": csrf})
        error = html.unescape(notice(browser, r)[1])
        assert error == f"hold refused: task {task_id!r} is held already"

        r = browser.post(
            f"/tasks/{task_id}/release", data={"reason": "", "confirm": "yes", "csrf": csrf}
        )
        assert re.fullmatch(r"release recorded as event \d+ by olga", notice(browser, r)[0])
        released = _last_event(secured, task_id)
        assert released.event_type == "TASK_HELD" and released.payload["by"] == "olga"
        assert released.payload["held"] is False
        page = browser.get(f"/tasks/{task_id}").text
        assert "not held" in page and 'class="do-hold"' in page and "do-release" not in page


def test_redact_asks_for_the_task_id_and_records_the_principal(secured: Node) -> None:
    with _client(secured) as c:
        running = c.submit("etl", {"step_seconds": 60}).task_id
    done = _finished_task(secured)
    with sign_in(secured, Role.OPERATOR) as browser:
        page = browser.get(f"/tasks/{done}").text
        csrf = csrf_of(page)
        assert 'id="redaction"' not in page
        form = {"reason": "erasure request 12", "display": "Olga O.", "operator": "mallory"}
        url = f"/tasks/{done}/redact"
        before = _last_id(secured, done)
        assert browser.post(url, data={**form, "confirm": done}).status_code == 403, "no CSRF"
        r = browser.post(url, data={**form, "confirm": "yes", "csrf": csrf})
        error = notice(browser, r)[1]
        assert error == f"type the task id ({done}) to confirm: a redaction cannot be undone"
        r = browser.post(url, data={**form, "reason": "", "confirm": done, "csrf": csrf})
        assert notice(browser, r) == ("", f"reason is required (up to {MAX_REASON} characters)")
        assert _last_id(secured, done) == before, "no refused post wrote an event"
        # a task not finished: what the RPC answers, as the page's error
        r = browser.post(
            f"/tasks/{running}/redact", data={**form, "confirm": running, "csrf": csrf}
        )
        error = notice(browser, r)[1]
        assert error.startswith("redact refused: task ") and "not finished" in error, error

        r = browser.post(url, data={**form, "confirm": done, "csrf": csrf})
        message = notice(browser, r)[0]
        assert re.fullmatch(r"redact recorded as event \d+ by olga \(as Olga O\.\)", message)
        event = _last_event(secured, done)
        assert event.event_type == "TASK_REDACTED"
        assert (event.payload["operator"], event.payload["as"]) == ("olga", "Olga O.")
        assert event.payload["reason"] == "erasure request 12"
        page = browser.get(f"/tasks/{done}").text
        shown = re.search(r'<p id="redaction">(.*?)</p>', page, re.S)
        assert shown is not None
        assert '<span id="redacted-by">olga (as Olga O.)</span>' in shown.group(1)
        assert '<span id="redacted-reason">erasure request 12</span>' in shown.group(1)
        assert f"(event {event.event_id})" in shown.group(1)
        assert "do-redact" not in page, "redacted once: nothing more to redact"
    with _client(secured) as c:
        c.cancel(running, reason="test done")
