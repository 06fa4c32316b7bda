"""docs/security.md's role table is what scheduler/security/roles.py says now."""

from __future__ import annotations

from pathlib import Path

import pytest

from apollo11.scheduler.security import METHOD_ROLES, Role
from apollo11.scheduler.tools import roledoc

PAGE = Path(__file__).resolve().parents[1] / "docs" / "security.md"


def test_the_security_pages_role_table_is_current() -> None:
    assert roledoc.current(PAGE.read_text()) == roledoc.render(), (
        "docs/security.md's role table is stale: run `make docs` and commit it"
    )


def test_every_role_and_method_is_in_its_row() -> None:
    rows = {line.split("|")[1].strip(): line for line in roledoc.render().splitlines()[2:]}
    assert set(rows) == {f"`{r.value}`" for r in Role} | {"none"}
    for path, role in METHOD_ROLES.items():
        assert f"`{path.rsplit('/', 1)[1]}`" in rows[f"`{role.value}`"], path
    assert "Workers: `Connect` only" in rows["`worker`"]
    assert "/login` refuses a worker token" in rows["`worker`"]
    assert "the pages; `/metrics`" in rows["`reader`"]
    assert "the actions (retry, skip, cancel)" in rows["`operator`"]


def test_splice_replaces_only_the_table_and_needs_the_markers() -> None:
    text = f"before\n{roledoc.BEGIN}\n\n| old |\n\n{roledoc.END}\nafter\n"
    new = roledoc.splice(text, "| new |\n")
    assert new == f"before\n{roledoc.BEGIN}\n\n| new |\n\n{roledoc.END}\nafter\n"
    assert roledoc.current(new) == "| new |\n"
    with pytest.raises(ValueError, match="no role table markers"):
        roledoc.splice("no markers here\n", "| new |\n")
