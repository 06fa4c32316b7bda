"""docs/security.md's role table is what scheduler/security/roles.py says now."""

from __future__ import annotations

from pathlib import Path

import pytest

from apollo11.scheduler.security import METHOD_ROLES, OPEN_ROUTES, ROUTE_ROLES, Role
from apollo11.scheduler.tools import roledoc

PAGE = Path(__file__).resolve().parents[1] / "docs" / "security.md"


def test_the_security_pages_role_table_is_current() -> None:
    assert roledoc.current(PAGE.read_text()) == roledoc.render(), (
        "docs/security.md's role table is stale: run `make docs` and commit it"
    )


def test_every_role_method_and_route_is_in_its_row() -> None:
    rows = {line.split("|")[1].strip(): line for line in roledoc.render().splitlines()[2:]}
    assert set(rows) == {f"`{r.value}`" for r in Role} | {"none"}
    for path, role in METHOD_ROLES.items():
        assert f"`{path.rsplit('/', 1)[1]}`" in rows[f"`{role.value}`"], path
    for route, role in ROUTE_ROLES.items():
        web = rows[f"`{role.value}`"].split("|")[3]
        assert f"`{route}`" in web, route
    for route in OPEN_ROUTES:
        assert f"`{route}`" in rows["none"].split("|")[3], route
    assert "Workers: `Connect` only" in rows["`worker`"]
    assert "/login` refuses a worker token" in rows["`worker`"]
    assert "`GET /metrics` (a bearer token or a session" in rows["`reader`"]
    acts = "`POST /tasks/{task_id}/{kind}` (retry, skip, cancel, hold, release, redact)"
    assert acts in rows["`operator`"]
    assert "`GET /tasks`" not in rows["`operator`"], "a row names only what its role adds"


def test_splice_replaces_only_the_table_and_needs_the_markers() -> None:
    text = f"before\n{roledoc.BEGIN}\n\n| old |\n\n{roledoc.END}\nafter\n"
    new = roledoc.splice(text, "| new |\n")
    assert new == f"before\n{roledoc.BEGIN}\n\n| new |\n\n{roledoc.END}\nafter\n"
    assert roledoc.current(new) == "| new |\n"
    with pytest.raises(ValueError, match="no role table markers"):
        roledoc.splice("no markers here\n", "| new |\n")
