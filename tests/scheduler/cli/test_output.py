"""The CLI's output in a pipe: markup removed, escaped text printed as it is, and rich
not imported (a fifth of a command's start-up)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from rich.markup import escape as rich_escape
from rich.text import Text

from apollo11.scheduler.cli._output import Output, escape, plain

TEXTS = ["plain", "a [b] c", "[red]not a tag[/red]", "path\\", "x\\[y]", "[/]", "[#fff]"]


@pytest.mark.parametrize("text", TEXTS)
def test_escaped_text_prints_as_rich_prints_it(text: str) -> None:
    assert escape(text) == rich_escape(text)
    assert plain(escape(text)) == Text.from_markup(escape(text)).plain


def test_markup_is_removed() -> None:
    markup = "[red]error:[/red] [bold]n1[/bold] is [dim]down[/]"
    assert plain(markup) == Text.from_markup(markup).plain == "error: n1 is down"


def test_a_pipe_gets_plain_lines_and_no_rich(capsys: pytest.CaptureFixture[str]) -> None:
    out = Output()
    out.print(f"[yellow]anomaly:[/yellow] {escape('step [x] failed')}")
    out.print("keep [this]", markup=False)
    assert capsys.readouterr().out == "anomaly: step [x] failed\nkeep [this]\n"
    probe = (
        "import sys; from apollo11.scheduler.cli._output import Output; "
        "Output().print('[b]x[/b]'); "
        "sys.stderr.write(str('rich' in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.stdout == "x\n" and done.stderr == "False"


class _OnePage:
    """A client whose log holds two events (what `events` reads, no server)."""

    def __init__(self, server: str | None) -> None:
        from apollo11.scheduler.client import EventView

        self.page = [
            EventView(7, 3, "n1", "t-1", "", "TASK_SUBMITTED", {}, 1_700_000_000_000, 0),
            EventView(8, 3, "n1", "t-1", "fetch", "STEP_FAILED", {"error": "x"}, 0, 1),
        ]

    async def __aenter__(self) -> _OnePage:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def events_page(self, **kw: object) -> object:
        from apollo11.scheduler.client import EventsPage

        return EventsPage(list(self.page), 0)


def test_events_in_a_pipe_one_line_each(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # issue 33: node and term were on one line and the event on the next
    from apollo11.scheduler.cli import _tasks

    monkeypatch.setattr(_tasks, "client", _OnePage)
    _tasks.events(task_id="", from_id=0, follow=False, limit=100, server=None, as_json=False)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("n1 t3 t-1 ") and "#7" in lines[0] and "SUBMITTED" in lines[0]
    assert lines[1].startswith("n1 t3 t-1 ") and "fetch FAILED (attempt 1) — x" in lines[1]


def test_a_pipe_keeps_print_s_end(capsys: pytest.CaptureFixture[str]) -> None:
    out = Output()
    out.print("[dim]a[/dim] ", end="")
    out.print("b", markup=False)
    assert capsys.readouterr().out == "a b\n"
