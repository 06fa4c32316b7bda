from __future__ import annotations

import pytest

from apollo11.scheduler.errors import InvalidArgumentError, WorkflowDefinitionError
from apollo11.scheduler.shell import shell_workflow
from apollo11.scheduler.workflow import (
    DedupeKey,
    Idempotent,
    NotIdempotent,
    Registry,
    Retry,
    StepContext,
    Workflow,
)


async def noop(ctx: StepContext) -> None:
    return None


def test_an_undeclared_step_is_rejected_naming_workflow_and_step() -> None:
    wf = Workflow("billing", version=2)
    wf.step(name="charge")(noop)
    with pytest.raises(WorkflowDefinitionError) as exc:
        Registry().register(wf)
    msg = str(exc.value)
    assert "workflow 'billing' v2" in msg
    assert "step 'charge' does not declare how it is safe to run again" in msg


def test_not_idempotent_needs_a_compensation() -> None:
    wf = Workflow("w")
    wf.step(name="email", idempotency=NotIdempotent())(noop)
    with pytest.raises(WorkflowDefinitionError, match="'email' is not idempotent and names no"):
        Registry().register(wf)


@pytest.mark.parametrize(
    ("build", "needle"),
    [
        (
            lambda wf: wf.step(name="a", after=["ghost"], idempotency=Idempotent())(noop),
            "unknown step 'ghost'",
        ),
        (
            lambda wf: [
                wf.step(name="a", idempotency=Idempotent())(noop),
                wf.step(name="a", idempotency=Idempotent())(noop),
            ],
            "'a' is defined twice",
        ),
        (
            lambda wf: wf.step(name="a", after=["a"], idempotency=Idempotent())(noop),
            "depends on itself",
        ),
        (
            lambda wf: wf.step(name="a", idempotency=Idempotent(), timeout=-1)(noop),
            "timeout must be",
        ),
        (lambda wf: None, "has no steps"),
    ],
)
def test_definition_errors(build: object, needle: str) -> None:
    wf = Workflow("w")
    build(wf)  # type: ignore[operator]
    with pytest.raises(WorkflowDefinitionError, match=needle):
        Registry().register(wf)


def test_cycles_are_named() -> None:
    wf = Workflow("loop")
    wf.step(name="a", after=["c"], idempotency=Idempotent())(noop)
    wf.step(name="b", after=["a"], idempotency=DedupeKey())(noop)
    wf.step(name="c", after=["b"], idempotency=Idempotent())(noop)
    with pytest.raises(WorkflowDefinitionError, match=r"cycle: a -> c -> b -> a"):
        Registry().register(wf)


def test_registry_versions_and_modules() -> None:
    reg = Registry()
    loaded = reg.load_module("apollo11.scheduler.examples")
    assert [w.name for w in loaded] == ["etl", "approval", "pack", "fulfil", "invoice", "runbook"]
    assert reg.get("etl") is loaded[0] and reg.get("etl", 1) is loaded[0]
    assert reg.get("etl", 2) is None
    assert loaded[0].topo_order() == ["collect", "clean", "feature", "infer", "persist"]
    with pytest.raises(WorkflowDefinitionError, match="cannot import"):
        reg.load_module("no.such.module")
    with pytest.raises(WorkflowDefinitionError, match=r"apollo11\.scheduler\.examples\?"):
        reg.load_module("scheduler.examples")  # the name before the one import root
    with pytest.raises(WorkflowDefinitionError, match="defines no Workflow"):
        reg.load_module("apollo11.scheduler.clock")
    twin = Workflow("etl", version=1)
    twin.step(name="x", idempotency=Idempotent())(noop)
    with pytest.raises(WorkflowDefinitionError, match="registered twice; bump the version"):
        reg.register(twin)


def test_backoff_is_exponential_capped_and_deterministic() -> None:
    r = Retry(attempts=10, backoff_s=1, multiplier=2, max_backoff_s=5, jitter=0.2)
    delays = [r.delay_s(n, "t:s") for n in range(1, 6)]
    assert delays == [r.delay_s(n, "t:s") for n in range(1, 6)], "same seed, same delays"
    for n, d in enumerate(delays, 1):
        base = min(5, 2 ** (n - 1))
        assert 0.8 * base <= d <= 1.2 * base
    assert r.delay_s(1, "t:s") != r.delay_s(1, "u:s"), "jitter spreads tasks apart"
    # refused at registration, naming the workflow and step (tests/scheduler/test_retry_rules.py)
    assert Retry(attempts=0).problems() == ["attempts must be a whole number, at least 1, got 0"]


def test_auto_timeout_is_twice_p99_of_history() -> None:
    wf = Workflow("w")
    wf.step(name="a", idempotency=Idempotent())(noop)
    step = wf.steps["a"]
    assert step.timeout_s(None, default_s=99) == 99
    assert step.timeout_s([1000] * 5, default_s=99) == 99, "too little history: the default"
    hist = [1000] * 98 + [5000, 9000]
    assert step.timeout_s(hist) == 18.0


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ([], "JSON object"),
        ({"steps": []}, "steps must be a non-empty list"),
        ({"steps": [{"name": "a", "run": "true"}]}, r"steps\[0\].idempotency must be one of"),
        ({"steps": [{"name": "a", "run": "", "idempotency": "idempotent"}]}, r"steps\[0\].run"),
        (
            {"steps": [{"name": "a", "run": "x", "idempotency": "idempotent", "after": "b"}]},
            r"steps\[0\].after",
        ),
        (
            {"steps": [{"name": "a", "run": "x", "idempotency": "not_idempotent"}]},
            "names no compensation",
        ),
        (
            {
                "steps": [
                    {"name": "a", "run": "x", "idempotency": "idempotent", "retry": {"tries": 2}}
                ]
            },
            r"steps\[0\].retry",
        ),
        (
            {
                "steps": [
                    {"name": "a", "run": "x", "idempotency": "idempotent", "retry": {"attempts": 0}}
                ]
            },
            r"steps\[0\].retry: attempts must be a whole number, at least 1, got 0",
        ),
        (
            {
                "steps": [
                    {
                        "name": "a",
                        "run": "x",
                        "idempotency": "idempotent",
                        "retry": {"on": {"E": {}}},
                    }
                ]
            },
            r"steps\[0\].retry: on key 'E' is not an exception class",
        ),
        (
            {"steps": [{"name": "a", "run": "x", "idempotency": "idempotent", "after": ["zz"]}]},
            "unknown step 'zz'",
        ),
    ],
)
def test_shell_documents_are_validated(doc: object, needle: str) -> None:
    with pytest.raises(InvalidArgumentError, match=needle):
        shell_workflow(doc)
