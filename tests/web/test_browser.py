"""A real browser (headless Debian chromium driven by Playwright) on the operator's
pages, one test per node:

- a node with a tokens file: sign in with an operator's token, retry the failed step
  of a finished etl run and see who did it on the timeline, with its time axis; a
  form on another origin that posts to the node is refused and records nothing; a
  run that outlives its node shows the takeover, linked to the task as of then;
- an open loopback node: /tasks page by page and filtered by state, workflow, task
  id prefix and time range; a task's input and each attempt's outcome and output
  tail; a shell DAG under its own name; no step actions on a finished task; a notice
  only from the server's signed cookie, never from the URL;
- a schedule declared in code: the Schedules page lists it with its next time in UTC
  and in its zone, and an operator pauses it and triggers it from its page;
- a workflow under flow control: a reader sees on the Limits page a limit's busiest
  key values with what runs and waits, and on a waiting task's page why it waits;
- a task's legal hold and redaction: an operator holds, releases and redacts a
  finished task from its page, and a reader sees each state and no form.

Screenshots are kept in test-artifacts/. That a standby's statistics start afresh
when it comes back (issue 19) needs a standby, so a cluster, not a browser:
tests/replicator/test_hub.py covers it."""

from __future__ import annotations

import http.server
import re
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from apollo11.lease.local_etcd import free_port
from apollo11.scheduler.client import SyncClient
from apollo11.scheduler.security import Role, create_token
from tests.nodes import ROOT, start_node

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Locator, Page

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts"
pytestmark = pytest.mark.browser


@contextmanager
def other_origin(page: str) -> Iterator[str]:
    """A site on another port (another origin) serving one attacker's page."""
    body = page.encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    """One headless chromium for the module's tests (each page gets its own context:
    no cookie goes from one test to the next)."""
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "Debian's chromium is needed (make chromium installs it)"
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        yield browser
        browser.close()


def test_sign_in_retry_a_failed_step_and_refuse_a_cross_site_post(
    tmp_path: Path, chromium: Browser
) -> None:
    tokens = tmp_path / "tokens"
    token = create_token(tokens, "olga", Role.OPERATOR)
    port = free_port()
    node = start_node(tmp_path / "d", "--http", f"127.0.0.1:{port}", "--tokens-file", str(tokens))
    try:
        with SyncClient(node.address, token=token) as c:
            sub = c.submit("etl", {"step_seconds": 0.05, "fail_step": "infer", "fail_times": 4})
            assert c.wait(sub.task_id, check=False).state == "FAILED"
            before = c.task(sub.task_id).last_event_id
        base = f"http://127.0.0.1:{port}"
        url = f"{base}/tasks/{sub.task_id}"
        # The attacker's page: a form that posts a retry to the node as soon as it loads.
        attack = f"""<!doctype html><body onload="document.forms[0].submit()">
<form method="post" action="{url}/retry">
<input name="step" value="infer"><input name="reason" value="pwned">
<input name="confirm" value="yes"><input name="csrf" value="guess">
</form></body>"""
        with other_origin(attack) as evil:
            page = chromium.new_page(viewport={"width": 1280, "height": 900})
            page.goto(url)
            assert "/login?next=" in page.url, "no session: the page sends us to sign in"
            page.locator('input[name="token"]').fill("a11_not-a-token")
            page.locator("button.do-login").click()
            assert "not valid" in page.locator("#error").inner_text()
            page.locator('input[name="token"]').fill(token)
            page.locator("button.do-login").click()
            page.wait_for_url(url)
            assert page.locator("#signed-in").inner_text() == "olga (operator)"
            assert page.locator("#task-state").inner_text() == "FAILED"
            rows = page.locator("#timeline text").all_text_contents()
            for step in ("collect", "clean", "feature", "infer", "persist"):
                assert step in rows, f"the timeline has a row for {step}"
            assert page.locator("#timeline rect.bar").count() == 7
            page.screenshot(path=str(ARTIFACTS / "task-failed.png"), full_page=True)

            # Signed in, the browser carries the session cookie even to a post that
            # another port's page makes (same site): the node must refuse it itself.
            with page.expect_response(lambda r: r.url.endswith("/retry")) as answer:
                page.goto(evil)
            assert answer.value.status == 403
            page.wait_for_url(f"{url}/retry")
            assert "cross-site request refused" in page.locator("#error").inner_text()
            with SyncClient(node.address, token=token) as c:
                t = c.task(sub.task_id)
            assert t.last_event_id == before, "the cross-site post recorded nothing"
            assert t.state == "FAILED"

            page.goto(url)
            row = page.locator('tr[data-step="infer"]')
            _act(row, "retry", reason="model server restarted", display="Olga at the console")
            page.wait_for_selector("#message")
            message = page.locator("#message").inner_text()
            assert "retry of infer recorded as event" in message
            assert "by olga (as Olga at the console)" in message

            deadline = time.monotonic() + 30
            while page.locator("#task-state").inner_text() != "SUCCEEDED":
                assert time.monotonic() < deadline, "the retried step did not run again"
                time.sleep(0.3)
                page.reload()
            infer_attempt = page.locator('tr[data-step="infer"] td').nth(2).inner_text()
            assert infer_attempt == "5", "the step ran again (attempt 5)"
            assert page.locator("#timeline rect.bar").count() == 9
            # who acted: a tick on the infer row, and the actions table under the timeline
            tick = page.locator("#timeline rect.act title").all_text_contents()
            assert any("retry of infer by olga (as Olga at the console)" in t for t in tick)
            assert page.locator("#actions td.who").all_text_contents() == [
                "olga (as Olga at the console)"
            ]
            assert "retry by olga" in page.locator('tr[data-step="infer"] td.override').inner_text()
            page.screenshot(path=str(ARTIFACTS / "task-retried.png"), full_page=True)
            # a time axis under the bars: "0", then round steps from the first attempt
            ticks = page.locator("#axis text").all_text_contents()
            assert ticks[0] == "0" and len(ticks) >= 3 and all(t.startswith("+") for t in ticks[1:])
            assert page.locator("#timeline line.takeover").count() == 0, "one primary ran it"

            # a run that outlives its node: the timeline marks where the new term took over
            with SyncClient(node.address, token=token) as c:
                slow = c.submit("etl", {"step_seconds": 1.5}).task_id
                deadline = time.monotonic() + 30
                while c.task(slow).steps[0].state != "SUCCEEDED":
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
            node.stop(signal.SIGKILL)
            node = start_node(
                tmp_path / "d", "--http", f"127.0.0.1:{port}", "--tokens-file", str(tokens)
            )
            with SyncClient(node.address, token=token) as c:
                assert c.wait(slow, timeout=60).state == "SUCCEEDED"
            page.goto(f"{base}/tasks/{slow}")
            if "/login?next=" in page.url:  # the session did not survive the restart
                page.locator('input[name="token"]').fill(token)
                page.locator("button.do-login").click()
                page.wait_for_url(f"{base}/tasks/{slow}")
            line = page.locator("#timeline line.takeover")
            assert line.count() == 1
            assert "a new primary took over" in (line.locator("title").text_content() or "")
            page.screenshot(path=str(ARTIFACTS / "task-takeover.png"), full_page=True)
            # its link: the task as of the takeover's event (a line is too thin to click)
            href = line.locator("xpath=..").get_attribute("href") or ""
            assert href.startswith(f"/tasks/{slow}?as_of=")
            page.goto(base + href)
            assert f"as of event {href.rsplit('=', 1)[1]}" in page.locator("body").inner_text()

            page.locator("button.do-logout").click()
            page.wait_for_url("**/login")
            page.goto(url)
            assert "/login?next=" in page.url, "signed out: the session is gone"
            page.close()
        with SyncClient(node.address, token=token) as c:
            infer = next(s for s in c.task(sub.task_id).steps if s.name == "infer")
        assert infer.override is not None
        assert (infer.override["operator"], infer.override["as"]) == ("olga", "Olga at the console")
    finally:
        assert node.stop() == 0


def _act(
    where: Page | Locator,
    kind: str,
    *,
    reason: str | None = None,
    display: str | None = None,
    confirm: str | None = None,
) -> None:
    """Open `kind`'s action form under `where` (a page, or a step's row), fill it and
    send it: `confirm` is typed (a redaction's task id), else the box is ticked."""
    where.locator(f"button.open-{kind}").click()
    form = where.locator(f"details.action-{kind} form")
    if reason is not None:
        form.locator('input[name="reason"]').fill(reason)
    if display is not None:
        form.locator('input[name="display"]').fill(display)
    if confirm is None:
        form.locator('input[name="confirm"]').check()
    else:
        form.locator('input[name="confirm"]').fill(confirm)
    form.locator(f"button.do-{kind}").click()


def _task_ids(page: Page) -> list[str]:
    return page.locator("#tasks td:first-child a").all_text_contents()


def _filter(page: Page, base: str, **fields: str) -> list[str]:
    """Fill the /tasks form as a person would and send it: the ids it lists."""
    page.goto(f"{base}/tasks")
    for name, value in fields.items():
        if name == "state":
            page.locator('select[name="state"]').select_option(value)
        else:
            page.locator(f'input[name="{name}"]').fill(value)
    page.locator('form[action="/tasks"] button[type="submit"]').click()
    page.wait_for_load_state()
    return _task_ids(page)


def test_the_task_list_and_a_task_page_in_a_browser(tmp_path: Path, chromium: Browser) -> None:
    """Issue 19, item 6, on an open loopback node (no sign-in)."""
    from apollo11.scheduler.web import pages

    port = free_port()
    node = start_node(tmp_path / "d", "--http", f"127.0.0.1:{port}", "--allow-shell")
    base = f"http://127.0.0.1:{port}"
    nightly = {
        "name": "nightly",
        "steps": [
            {
                "name": "dump",
                # attempt 1 fails, with markup in its output that must stay text
                "run": 'echo "<b>dump $APOLLO11_ATTEMPT</b>"; test "$APOLLO11_ATTEMPT" -gt 1',
                "idempotency": "idempotent",
                "retry": {"attempts": 2, "backoff_s": 0.01},
            }
        ],
    }
    try:
        with SyncClient(node.address) as c:
            flaky = c.submit("etl", {"step_seconds": 0, "fail_step": "infer", "fail_times": 1})
            stuck = c.submit("etl", {"step_seconds": 0, "fail_step": "collect", "fail_times": 9})
            shell = c.submit_shell(nightly)
            assert c.wait(flaky.task_id).state == "SUCCEEDED"
            assert c.wait(stuck.task_id, check=False).state == "FAILED"
            assert c.wait(shell.task_id).state == "SUCCEEDED"
            # newer than those three: a full page of one-step tasks
            packs = c.submit_many(
                [
                    {"workflow": "pack", "input": {"item": f"i{i}", "step_seconds": 0}}
                    for i in range(pages.LIST_LIMIT)
                ]
            )
            node_id = c.status().node_id
        page = chromium.new_page(viewport={"width": 1280, "height": 900})

        # /tasks: newest first, a page at a time
        page.goto(f"{base}/tasks")
        first = _task_ids(page)
        assert len(first) == pages.LIST_LIMIT and set(first) == {s.task_id for s in packs}
        page.locator("#older").click()
        page.wait_for_load_state()
        assert _task_ids(page) == [shell.task_id, stuck.task_id, flaky.task_id]
        assert page.locator("#older").count() == 0, "the last page"
        # ... and filtered by state, workflow, task id prefix and submission time
        assert _filter(page, base, state="FAILED") == [stuck.task_id]
        assert "state=FAILED" in page.url
        assert page.locator('select[name="state"]').input_value() == "FAILED", "kept"
        assert _filter(page, base, workflow="shell") == [shell.task_id]
        assert page.locator("#tasks td.workflow").inner_text() == "shell nightly"
        assert _filter(page, base, prefix=flaky.task_id[:-2]) == [flaky.task_id]
        now = datetime.now(UTC)
        hour = timedelta(hours=1)
        since, until = (now - hour).strftime("%Y-%m-%dT%H:%M"), (now + hour).isoformat()
        assert _filter(page, base, workflow="etl", since=since, until=until) == [
            stuck.task_id,
            flaky.task_id,
        ]
        assert _filter(page, base, since="2001-01-01", until="2001-01-02") == []
        assert page.locator("#tasks td.muted").inner_text() == "no tasks"
        assert _filter(page, base, since="yesterday") == []
        assert "since must be an ISO 8601 date or time" in page.locator("#error").inner_text()
        page.screenshot(path=str(ARTIFACTS / "tasks-filtered.png"), full_page=True)

        # a task's input, and each attempt with how it ended and what it said
        url = f"{base}/tasks/{flaky.task_id}"
        page.goto(url)
        assert '"fail_step": "infer"' in page.locator("#task-input").inner_text()
        infer = page.locator('#attempts tr.attempt[data-step="infer"]')
        assert infer.locator("td.outcome").all_text_contents() == ["failed", "succeeded"]
        said = infer.nth(0).locator(".attempt-error").inner_text()
        assert "RuntimeError: injected failure of infer (attempt 1)" in said
        assert infer.nth(1).locator("pre.tail").inner_text().startswith("{")
        page.screenshot(path=str(ARTIFACTS / "task-attempts.png"), full_page=True)
        # finished (SUCCEEDED): no retry, skip or cancel to offer
        assert page.locator("#steps button, details.action-cancel").count() == 0

        # a shell DAG under its own name, its command's output as text
        page.goto(f"{base}/tasks/{shell.task_id}")
        assert page.locator("#workflow").inner_text() == "shell nightly"
        dump = page.locator('#attempts tr.attempt[data-step="dump"]')
        assert dump.locator("td.outcome").all_text_contents() == ["failed", "succeeded"]
        assert "command exited with code 1" in dump.nth(0).inner_text()
        assert dump.nth(0).locator("pre.tail").inner_text().strip() == "<b>dump 1</b>"
        assert dump.nth(1).locator("pre.tail").inner_text().strip() == "<b>dump 2</b>"
        assert page.locator("#attempts b").count() == 0, "the output's markup is escaped"

        # a FAILED task offers its step actions; cancelled through the page, none;
        # the notice of the cancel comes from the server, shown once
        url = f"{base}/tasks/{stuck.task_id}"
        page.goto(url)
        assert page.locator('tr[data-step="collect"] button.open-retry').count() == 1
        _act(page, "cancel", reason="not needed")
        page.wait_for_selector("#message")
        assert page.url == url, "no notice in the URL"
        assert "cancel recorded as event" in page.locator("#message").inner_text()
        assert page.locator("#task-state").inner_text() == "CANCELLED"
        assert page.locator("#steps button, details.action-cancel").count() == 0
        page.reload()
        assert page.locator("#message").count() == 0, "shown once"

        # a notice never comes from the URL, nor from a cookie the node did not sign
        bait = "session expired - call the helpdesk at +1 555 0100"
        for q in ("message", "error", "flash", "msg", "notice"):
            for path in ("/", f"/tasks/{stuck.task_id}"):
                page.goto(f"{base}{path}?{q}={bait}")
                assert page.locator("#message, #error").count() == 0, (path, q)
                assert bait not in page.locator("body").inner_text()
        page.context.add_cookies(
            [{"name": f"apollo11-flash-{node_id}", "value": "eyJ4Ijoi.c2lnbmVk", "url": base}]
        )
        page.goto(url)
        assert page.locator("#message, #error").count() == 0
        page.close()
    finally:
        assert node.stop() == 0


def test_the_schedules_page_and_a_pause_in_a_browser(tmp_path: Path, chromium: Browser) -> None:
    """Issue 30, item 8: a schedule declared in code, as an operator sees and pauses it."""
    tokens = tmp_path / "tokens"
    token = create_token(tokens, "olga", Role.OPERATOR)
    port = free_port()
    node = start_node(
        tmp_path / "d",
        "--http",
        f"127.0.0.1:{port}",
        "--tokens-file",
        str(tokens),
        "--workflows",
        "apollo11.scheduler.examples,tests.web.schedule_flows",
    )
    base = f"http://127.0.0.1:{port}"
    try:
        page = chromium.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{base}/schedules")
        page.locator('input[name="token"]').fill(token)
        page.locator("button.do-login").click()
        page.wait_for_url(f"{base}/schedules")
        row = page.locator('tr[data-schedule="nightly-report"]')
        deadline = time.monotonic() + 20
        while row.count() == 0:  # the primary reconciles the declared schedule as it leads
            assert time.monotonic() < deadline, "the declared schedule never showed"
            time.sleep(0.1)
            page.reload()
        assert row.locator("td.words").inner_text().startswith("daily at 03:00 in Europe/Berlin")
        local = row.locator("td.next-local").inner_text()
        assert re.fullmatch(r"\d{4}-\d\d-\d\d 03:00:00 CES?T", local), local
        assert row.locator("td.state").inner_text() == "active"
        page.screenshot(path=str(ARTIFACTS / "schedules.png"), full_page=True)

        row.locator("a").first.click()
        page.wait_for_url(f"{base}/schedules/nightly-report")
        page.locator('#schedule-actions input[name="note"]').fill("warehouse migration")
        page.locator("button.do-pause").click()
        page.wait_for_selector("#message")
        assert page.locator("#message").inner_text() == "paused by olga"
        assert page.locator("#schedule-state").inner_text() == "paused"
        assert page.locator("#note").inner_text() == "warehouse migration"
        assert page.locator("button.do-unpause").count() == 1
        page.locator("button.do-trigger").click()
        page.wait_for_selector("#message")
        assert page.locator("#message").inner_text().startswith("triggered by olga: task ")
        fired = page.locator('#occurrences tr.occurrence[data-outcome="fired"]')
        assert fired.locator("td.reason").inner_text() == "triggered by olga"
        page.screenshot(path=str(ARTIFACTS / "schedule-paused.png"), full_page=True)
        fired.locator("a").click()
        page.wait_for_selector("#task-state")
        assert page.locator("#workflow").inner_text() == "report"
        page.close()
    finally:
        assert node.stop() == 0


def test_the_limits_page_and_a_waiting_task_in_a_browser(tmp_path: Path, chromium: Browser) -> None:
    """Issue 31: a reader sees a limit's busiest keys, and why a task waits."""
    tokens = tmp_path / "tokens"
    submitter = create_token(tokens, "sam", Role.SUBMITTER)
    reader = create_token(tokens, "rita", Role.READER)
    release = tmp_path / "release"
    port = free_port()
    node = start_node(
        tmp_path / "d",
        "--http",
        f"127.0.0.1:{port}",
        "--tokens-file",
        str(tokens),
        "--workflows",
        "apollo11.scheduler.examples,tests.web.flow_flows",
    )
    base = f"http://127.0.0.1:{port}"
    try:
        with SyncClient(node.address, token=submitter) as c:
            ids = [
                c.submit(
                    "deploy", {"host": host, "tenant": tenant, "release": str(release)}
                ).task_id
                for host, tenant in [("db1", "a"), ("db1", "a"), ("db1", "b"), ("db2", "a")]
            ]
        page = chromium.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{base}/limits")
        page.locator('input[name="token"]').fill(reader)
        page.locator("button.do-login").click()
        page.wait_for_url(f"{base}/limits")
        db1 = page.locator('tr[data-limit="deploy/host"] div.key[data-key="db1"]')
        deadline = time.monotonic() + 20
        while db1.count() == 0 or db1.locator(".queued").inner_text() != "2":
            assert time.monotonic() < deadline, "db1's two waiting tasks never showed"
            time.sleep(0.1)
            page.reload()
        assert db1.locator(".running").inner_text() == "1"
        db2 = page.locator('tr[data-limit="deploy/host"] div.key[data-key="db2"]')
        assert (db2.locator(".running").inner_text(), db2.locator(".queued").inner_text()) == (
            "1",
            "0",
        )
        row = page.locator('tr[data-limit="deploy/host"]')
        assert row.locator("td.effective").inner_text() == "max 1"
        assert row.locator("td.on-full").inner_text() == "queue"
        page.screenshot(path=str(ARTIFACTS / "limits.png"), full_page=True)

        # behind db1's holder: a's second, then b's (each value's turn in the queue)
        page.goto(f"{base}/tasks/{ids[1]}")
        assert page.locator("#waiting").inner_text() == (
            "queued: host=db1 is full (1/1), 0 ahead (limits)"
        )
        page.goto(f"{base}/tasks/{ids[2]}")
        assert page.locator("#waiting").inner_text() == (
            "queued: host=db1 is full (1/1), 1 ahead (limits)"
        )
        page.goto(f"{base}/tasks/{ids[0]}")
        assert page.locator("#waiting").count() == 0, "the holder waits for nothing"
        page.goto(f"{base}/tasks/{ids[2]}")
        page.screenshot(path=str(ARTIFACTS / "task-waiting.png"), full_page=True)
        page.locator("#waiting a").click()
        page.wait_for_url(f"{base}/limits")

        release.touch()
        with SyncClient(node.address, token=submitter) as c:
            for t in ids:
                assert c.wait(t, timeout=60).state == "SUCCEEDED"
        page.reload()
        keys = page.locator('tr[data-limit="deploy/host"] td.keys').inner_text()
        assert keys == "none running or queued"
        page.close()
    finally:
        release.touch()
        assert node.stop() == 0


def test_hold_release_and_redact_a_task_in_a_browser(tmp_path: Path, chromium: Browser) -> None:
    """Issue 34: an operator holds a finished task from its page, releases it, then
    redacts it (the task id typed again); a reader sees all of it and no form."""
    tokens = tmp_path / "tokens"
    token = create_token(tokens, "olga", Role.OPERATOR)
    reader = create_token(tokens, "rita", Role.READER)
    port = free_port()
    node = start_node(tmp_path / "d", "--http", f"127.0.0.1:{port}", "--tokens-file", str(tokens))
    base = f"http://127.0.0.1:{port}"
    try:
        with SyncClient(node.address, token=token) as c:
            task_id = c.submit("etl", {"step_seconds": 0}).task_id
            assert c.wait(task_id).state == "SUCCEEDED"
        url = f"{base}/tasks/{task_id}"
        page = chromium.new_page(viewport={"width": 1280, "height": 900})
        page.goto(url)
        page.locator('input[name="token"]').fill(token)
        page.locator("button.do-login").click()
        page.wait_for_url(url)
        assert page.locator("#hold-state").inner_text().startswith("not held")
        assert page.locator("button.open-release").count() == 0

        _act(page, "hold", reason="litigation 7")
        page.wait_for_selector("#message")
        assert re.fullmatch(
            r"hold recorded as event \d+ by olga", page.locator("#message").inner_text()
        )
        assert page.locator("#held-by").inner_text() == "olga"
        assert page.locator("#held-reason").inner_text() == "litigation 7"
        assert page.locator("#held").is_visible(), "the header says it is held"
        assert page.locator("button.open-redact").count() == 0, "a held task is not redacted"
        page.screenshot(path=str(ARTIFACTS / "task-held.png"), full_page=True)

        # a reader sees the hold, and no form to change it
        other = chromium.new_page(viewport={"width": 1280, "height": 900})
        other.goto(url)
        other.locator('input[name="token"]').fill(reader)
        other.locator("button.do-login").click()
        other.wait_for_url(url)
        assert other.locator("#held-by").inner_text() == "olga"
        assert other.locator("form[action$='/release']").count() == 0
        assert "hold and redact need role operator" in other.locator("body").inner_text()

        _act(page, "release")
        page.wait_for_selector("#message")
        assert "release recorded as event" in page.locator("#message").inner_text()
        assert page.locator("#hold-state").inner_text().startswith("not held")
        assert page.locator("#held").count() == 0

        _act(page, "redact", reason="erasure request 12", confirm=task_id[:-1])  # a typo
        page.wait_for_selector("#error")
        assert "type the task id" in page.locator("#error").inner_text()
        assert page.locator("#redaction").count() == 0, "nothing redacted"
        _act(page, "redact", reason="erasure request 12", confirm=task_id)
        page.wait_for_selector("#message")
        assert "redact recorded as event" in page.locator("#message").inner_text()
        assert page.locator("#redacted-by").inner_text() == "olga"
        assert page.locator("#redacted-reason").inner_text() == "erasure request 12"
        assert page.locator("button.open-redact").count() == 0
        result = page.locator('tr[data-step="collect"] td').nth(5).inner_text()
        assert "$redacted" in result, result
        page.screenshot(path=str(ARTIFACTS / "task-redacted.png"), full_page=True)

        other.reload()
        assert other.locator("#redacted-by").inner_text() == "olga"
        assert other.locator("#hold-state").inner_text().startswith("not held")
        other.close()
        page.close()
    finally:
        assert node.stop() == 0
