"""The sign-in page's hint is a command that works (issue 33, part 4d: it said
`apollo11 token create NAME ROLE`, which the CLI refuses)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from typer.testing import CliRunner

import apollo11.scheduler.web
from apollo11.scheduler.cli import app

LOGIN = Path(apollo11.scheduler.web.__file__).parent / "templates" / "login.html"


def test_the_login_pages_hint_makes_a_token(tmp_path: Path) -> None:
    hint = re.search(r"<code>(apollo11 token create [^<]*)</code>", LOGIN.read_text())
    assert hint is not None, "the page shows how a token is made"
    tokens = tmp_path / "tokens"
    filled = (
        hint.group(1)
        .replace("NAME", "alice")
        .replace("ROLE", "operator")
        .replace("FILE", str(tokens))
    )
    res = CliRunner().invoke(app, shlex.split(filled)[1:])
    assert res.exit_code == 0, res.output
    assert "alice" in tokens.read_text()
