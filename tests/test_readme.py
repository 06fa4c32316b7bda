"""The README's code that a reader copies runs as written: "A first workflow" (the
`hello.py` a reader saves) and "Testing it" (its test of hello, with the kit), in
process, as pytest would run the reader's test file."""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks(heading: str) -> list[str]:
    """The ```python blocks of the README's section `heading` (up to the next heading)."""
    text = README.read_text()
    start = text.index(f"\n{heading}\n")
    rest = text[start + len(heading) + 2 :]
    end = re.search(r"^#{1,3} ", rest, re.M)
    section = rest[: end.start()] if end else rest
    return re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.fixture
def hello() -> Iterator[types.ModuleType]:
    """hello.py, saved as the README says, importable as `hello`."""
    (code,) = _python_blocks("## A first workflow")
    module = types.ModuleType("hello")
    exec(compile(code, "README.md:hello.py", "exec"), module.__dict__)
    sys.modules["hello"] = module
    yield module
    del sys.modules["hello"]


async def test_the_testing_section_runs_as_written(hello: types.ModuleType) -> None:
    (code,) = _python_blocks("### Testing it")
    # the reader's test file sits beside hello.py and imports what it tests from it
    namespace: dict[str, object] = {"__name__": "test_hello"}
    exec(compile(code, "README.md:test_hello.py", "exec"), namespace)
    tests = [v for k, v in namespace.items() if k.startswith("test_") and callable(v)]
    assert [t.__name__ for t in tests] == ["test_hello"]
    for test in tests:
        await test()


def test_hello_is_a_valid_workflow(hello: types.ModuleType) -> None:
    from apollo11 import Workflow

    assert isinstance(hello.hello, Workflow)
    hello.hello.validate()
    assert list(hello.hello.steps) == ["fetch", "greet"]
