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
