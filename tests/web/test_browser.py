"""A real browser (headless Debian chromium driven by Playwright) on a finished etl run:
the timeline shows all five steps; retry on the failed step makes it run again.
Screenshots are kept in test-artifacts/."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from lease.local_etcd import free_port
from scheduler.client import SyncClient
from tests.nodes import ROOT, start_node

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts"
pytestmark = pytest.mark.browser


def test_retry_a_failed_step_from_the_task_page(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "Debian's chromium is needed (make setup installs it)"
    ARTIFACTS.mkdir(exist_ok=True)
    port = free_port()
    node = start_node(tmp_path / "d", "--http", f"127.0.0.1:{port}")
    try:
        with SyncClient(node.address) as c:
            sub = c.submit("etl", {"step_seconds": 0.05, "fail_step": "infer", "fail_times": 4})
            assert c.wait(sub.task_id).state == "FAILED"
        url = f"http://127.0.0.1:{port}/tasks/{sub.task_id}"
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
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(url)
            assert page.locator("#task-state").inner_text() == "FAILED"
            rows = page.locator("#timeline text").all_text_contents()
            for step in ("collect", "clean", "feature", "infer", "persist"):
                assert step in rows, f"the timeline has a row for {step}"
            assert page.locator("#timeline rect.bar").count() == 7
            page.screenshot(path=str(ARTIFACTS / "task-failed.png"), full_page=True)

            row = page.locator('tr[data-step="infer"]')
            row.locator("button.open-retry").click()
            form = row.locator("details.action-retry form")
            form.locator('input[name="reason"]').fill("model server restarted")
            form.locator('input[name="operator"]').fill("browser-test")
            form.locator('input[name="confirm"]').check()
            form.locator("button.do-retry").click()
            page.wait_for_url("**message=*")
            assert "retry of infer recorded as event" in page.locator("#message").inner_text()

            deadline = time.monotonic() + 30
            while page.locator("#task-state").inner_text() != "SUCCEEDED":
                assert time.monotonic() < deadline, "the retried step did not run again"
                time.sleep(0.3)
                page.reload()
            infer_attempt = page.locator('tr[data-step="infer"] td').nth(2).inner_text()
            assert infer_attempt == "5", "the step ran again (attempt 5)"
            assert page.locator("#timeline rect.bar").count() == 9
            page.screenshot(path=str(ARTIFACTS / "task-retried.png"), full_page=True)
            browser.close()
    finally:
        assert node.stop() == 0
