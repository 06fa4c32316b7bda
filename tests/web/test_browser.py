"""A real browser (headless Debian chromium driven by Playwright) on a node with a
tokens file: sign in with an operator's token, retry the failed step of a finished
etl run and see who did it on the timeline; a form on another origin that posts to
the node is refused and records nothing. Screenshots are kept in test-artifacts/."""

from __future__ import annotations

import http.server
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from apollo11.lease.local_etcd import free_port
from apollo11.scheduler.client import SyncClient
from apollo11.scheduler.security import Role, create_token
from tests.nodes import ROOT, start_node

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


def test_sign_in_retry_a_failed_step_and_refuse_a_cross_site_post(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "Debian's chromium is needed (make chromium installs it)"
    ARTIFACTS.mkdir(exist_ok=True)
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
        with sync_playwright() as p, other_origin(attack) as evil:
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
            page = browser.new_page(viewport={"width": 1280, "height": 900})
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
            row.locator("button.open-retry").click()
            form = row.locator("details.action-retry form")
            form.locator('input[name="reason"]').fill("model server restarted")
            form.locator('input[name="display"]').fill("Olga at the console")
            form.locator('input[name="confirm"]').check()
            form.locator("button.do-retry").click()
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
            browser.close()
        with SyncClient(node.address, token=token) as c:
            infer = next(s for s in c.task(sub.task_id).steps if s.name == "infer")
        assert infer.override is not None
        assert (infer.override["operator"], infer.override["as"]) == ("olga", "Olga at the console")
    finally:
        assert node.stop() == 0
