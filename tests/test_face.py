"""`from apollo11 import …`: the one face a program imports, and what it costs.

`apollo11.scheduler.*` imports the package `apollo11` first, so the face loads its
names on first use (PEP 562): `import apollo11` alone loads nothing of the engine,
and the names a program uses load what they need and no more than importing them
from their own modules did before the face: no server module, no metric. Checked in
a fresh interpreter (this test process has long imported everything), as
tests/scheduler/client/test_imports.py checks the client.
"""

from __future__ import annotations

import json
import subprocess
import sys

import apollo11
from tests.scheduler.client.test_imports import SERVER_MODULES

PROBE = """
import json, sys
{imports}
import prometheus_client
print(json.dumps({{
    "modules": sorted(m for m in sys.modules if m.startswith("apollo11")),
    "metrics": sorted(
        name for name in prometheus_client.REGISTRY._names_to_collectors
        if name.startswith("apollo11")
    ),
}}))
"""


def _probe(*imports: str) -> dict[str, list[str]]:
    code = PROBE.format(imports="\n".join(imports))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    result: dict[str, list[str]] = json.loads(out.stdout)
    return result


def _server(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == s or m.startswith(s + ".") for s in SERVER_MODULES)]


def test_import_apollo11_loads_nothing_of_the_engine() -> None:
    found = _probe("import apollo11")
    assert found["modules"] == ["apollo11"]
    assert found["metrics"] == []


def test_the_face_loads_no_more_than_its_modules_did() -> None:
    face = _probe("from apollo11 import Workflow, Client")
    before = _probe("import apollo11.scheduler.workflow", "import apollo11.scheduler.client")
    assert _server(face["modules"]) == [], "the face must not import server code"
    assert face["metrics"] == [], "the face must not register a metric"
    assert set(face["modules"]) <= set(before["modules"])


def test_every_name_of_the_face_loads_no_server_module() -> None:
    found = _probe("from apollo11 import *")
    assert _server(found["modules"]) == []
    assert found["metrics"] == []


def test_every_name_resolves_to_the_engines_own_object() -> None:
    from apollo11.scheduler.client import Client as AsyncClient
    from apollo11.scheduler.client import SyncClient
    from apollo11.scheduler.durable import DurableContext, DurableWorkflow
    from apollo11.scheduler.workflow import StepContext, Workflow

    for name in apollo11.__all__:
        assert getattr(apollo11, name) is not None, name
    assert apollo11.Workflow is Workflow
    assert apollo11.StepContext is StepContext
    assert apollo11.DurableWorkflow is DurableWorkflow
    assert apollo11.DurableContext is DurableContext
    assert apollo11.Client is SyncClient  # blocking, as httpx.Client
    assert apollo11.AsyncClient is AsyncClient


def test_the_issues_names_are_all_there() -> None:
    # issue 33, part 1: the names a program needs, and the later ones
    wanted = {
        "Workflow", "DurableWorkflow", "StepContext", "DurableContext", "Idempotent",
        "DedupeKey", "Checkpoint", "NotIdempotent", "Retry", "StepError", "Client",
        "AsyncClient", "Schedule", "Concurrency", "Rate", "Debounce",
    }  # fmt: skip
    assert wanted <= set(apollo11.__all__)
    assert wanted <= set(dir(apollo11))


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        apollo11.Workflw  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as e:
        assert "Workflw" in str(e)
    else:
        raise AssertionError("apollo11.Workflw resolved")
