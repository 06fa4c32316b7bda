"""The wheel lists its packages by hand (pyproject.toml): a new package that is not
listed is missing from the wheel, and the node image dies on its first import."""

from __future__ import annotations

import tomllib

from tests.nodes import ROOT


def test_every_package_is_in_the_wheel() -> None:
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(("apollo11", *init.parent.relative_to(ROOT).parts))
        for top in ("scheduler", "replicator", "lease")
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
