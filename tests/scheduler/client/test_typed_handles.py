"""Typed handles (issue 33, part 3): `submit(invoice, InvoiceInput(...))` returns a
handle whose `result()` mypy knows is an InvoiceResult, on the blocking client, the
async one and the testing kit; by name, untyped. A small program is checked with
`mypy --strict` (the project's own settings, so its cache of the package serves):
each line marked `# R: T` must reveal T (its names unqualified), each marked
`# E: words` must be an error saying them, and nothing else may be an error."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

PROGRAM = """\
from __future__ import annotations

from typing import Any

from apollo11 import AsyncClient, AsyncTaskHandle, Client, TaskHandle
from apollo11.scheduler.examples import Customer, InvoiceInput, InvoiceResult, etl, invoice
from apollo11.testing import WorkflowEnvironment

ORDER = InvoiceInput(customer=Customer(id="c1"), amount_cents=1200)


def blocking(c: Client) -> int:
    h = c.submit(invoice, ORDER)
    reveal_type(h)  # R: SyncTaskHandle[InvoiceResult]
    reveal_type(h.result())  # R: InvoiceResult
    typed: TaskHandle[InvoiceResult] = h
    print(h.task_id, h.created, h.event_id, typed)
    name: str = h.result()  # E: expression has type "InvoiceResult", variable has type "str"
    reveal_type(c.submit("invoice", {"customer": {"id": "c1"}}).result())  # R: Any
    reveal_type(c.submit(etl, {"step_seconds": 0}).result())  # R: Any
    c.submit(invoice, {"amount_cents": 1})  # E: Cannot infer value of type parameter "InputT"
    return h.result().total_cents + len(name)


async def asynchronous(c: AsyncClient) -> str:
    h = await c.submit(invoice, ORDER)
    reveal_type(h)  # R: TaskHandle[InvoiceResult]
    handle: AsyncTaskHandle[InvoiceResult] = h
    result = await handle.result()
    reveal_type(result)  # R: InvoiceResult
    result.nope  # E: "InvoiceResult" has no attribute "nope"
    untyped: Any = await (await c.submit("etl")).result()
    return result.invoice + str(untyped)


async def kit() -> str:
    async with WorkflowEnvironment(workflows=[invoice]) as env:
        h = await env.submit(invoice, ORDER)
        reveal_type(await h.result())  # R: InvoiceResult
        reveal_type(await (await env.submit("invoice")).result())  # R: Any
        return (await h.result()).currency
"""


def _expected(program: str) -> tuple[dict[int, str], dict[int, str]]:
    reveals, errors = {}, {}
    for n, line in enumerate(program.splitlines(), 1):
        if m := re.search(r"# R: (.+)$", line):
            reveals[n] = m.group(1)
        if m := re.search(r"# E: (.+)$", line):
            errors[n] = m.group(1)
    return reveals, errors


@pytest.mark.timeout(120)  # a cold mypy cache: the whole package checked once
def test_mypy_strict_knows_a_handles_result_type(tmp_path: Path) -> None:
    from mypy import api

    prog = tmp_path / "typed_handles_example.py"
    prog.write_text(PROGRAM)
    out, err, _ = api.run(
        [
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--strict",
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            "--no-error-summary",
            "--show-error-codes",
            str(prog),
        ]
    )
    assert not err, err
    reveals, errors = _expected(PROGRAM)
    seen_reveals: dict[int, str] = {}
    seen_errors: dict[int, str] = {}
    for line in out.splitlines():
        m = re.match(r".*?:(\d+): (error|note): (.*)$", line)
        assert m is not None, line
        n, kind, text = int(m.group(1)), m.group(2), m.group(3)
        if kind == "note" and text.startswith("Revealed type is"):
            shown = text.removeprefix("Revealed type is ").strip('"')
            seen_reveals[n] = re.sub(r"\b(?:\w+\.)+(\w+)", r"\1", shown)  # a.b.C -> C
        elif kind == "error":
            seen_errors[n] = text
    assert seen_reveals == reveals, out
    assert set(seen_errors) == set(errors), out
    for n, words in errors.items():
        assert words in seen_errors[n], (n, seen_errors[n])
