"""docs/client-api.md is what the client's docstrings and signatures say now."""

from __future__ import annotations

from pathlib import Path

from apollo11.scheduler.tools import apidoc

PAGE = Path(__file__).resolve().parents[1] / "docs" / "client-api.md"


def test_the_api_reference_is_current() -> None:
    assert PAGE.read_text() == apidoc.render(), (
        "docs/client-api.md is stale: run `make docs` and commit it"
    )


def test_it_documents_every_public_name_and_the_sync_client() -> None:
    text = apidoc.render()
    assert "### `async Client.wait(self, task_id: str, *, timeout: float | None = None" in text
    assert "### `SyncClient.submit(self, workflow: str, input: Any = None, *" in text
    assert "## `TaskFailed` (exception)" in text
