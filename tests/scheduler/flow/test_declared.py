"""Flow control declared on a workflow and its steps: what registration refuses, naming
the workflow, the step and the field; the limits and their ids; the "flow" a
submission records."""

from __future__ import annotations

from typing import Any

import pytest

from apollo11.scheduler.durable import DurableContext, DurableWorkflow
from apollo11.scheduler.errors import FlowKeyError, InvalidArgumentError, WorkflowDefinitionError
from apollo11.scheduler.workflow import (
    Concurrency,
    Debounce,
    Idempotent,
    Rate,
    Registry,
    StepContext,
    Workflow,
    flow_record,
)

NOW = 1_733_450_000_000


def noop(ctx: StepContext) -> None:
    return None


def runbook() -> Workflow:
    wf = Workflow(
        "runbook",
        version=1,
        concurrency=[Concurrency(key="host", max=2)],
        rate=Rate(key="tenant", limit=10, per="1s", burst=20),
        fairness="tenant",
    )
    wf.step(
        name="load",
        idempotency=Idempotent(),
        concurrency=Concurrency(key="warehouse", max=4, scope="global"),
    )(noop)
    wf.step(name="notify", after=["load"], idempotency=Idempotent())(noop)
    return wf


def refused(wf: Workflow, registry: Registry | None = None) -> str:
    with pytest.raises(WorkflowDefinitionError) as e:
        (registry or Registry()).register(wf)
    return str(e.value)


def test_the_design_sample_registers_with_its_limit_ids() -> None:
    wf = Registry().register(runbook())
    assert [(limit.id, limit.kind, limit.step) for limit in wf.flow.limits] == [
        ("runbook/host", "concurrency", ""),
        ("runbook/tenant", "rate", ""),
        ("warehouse", "concurrency", "load"),
    ]
    assert wf.steps["load"].concurrency == (Concurrency(key="warehouse", max=4, scope="global"),)
    assert wf.steps["notify"].concurrency == ()


def test_a_submission_records_its_flow() -> None:
    wf = Registry().register(runbook())
    raw = {"host": "db1", "tenant": "acme", "warehouse": "dw1"}
    assert flow_record(wf, raw, priority=2, now_ms=NOW) == {
        "priority": 2,
        "fair": "acme",
        "hold": {"runbook/host": "db1"},
        "rate": {"runbook/tenant": "acme"},
        "steps": {"load": {"warehouse": "dw1"}},
    }
    # the default priority is left out
    assert "priority" not in (flow_record(wf, raw, priority=3, now_ms=NOW) or {})


def test_a_debounced_submission_records_its_window() -> None:
    wf = Workflow(
        "digest", debounce=Debounce(key="user.id", quiet="5s", max_wait="1m"), fairness="team"
    )
    wf.step(name="send", idempotency=Idempotent())(noop)
    Registry().register(wf)
    assert flow_record(wf, {"user": {"id": 7}}, priority=3, now_ms=NOW) == {
        "fair": "",  # no team: the "" value's turns, never an error
        "debounce": "7",
        "not_before_ms": NOW + 5_000,
        "deadline_ms": NOW + 60_000,
    }


def test_no_flow_and_the_default_priority_record_nothing() -> None:
    wf = Workflow("plain")
    wf.step(name="a", idempotency=Idempotent())(noop)
    Registry().register(wf)
    assert flow_record(wf, {"x": 1}, priority=3, now_ms=NOW) is None
    assert flow_record(wf, None, priority=1, now_ms=NOW) == {"priority": 1}
    assert not wf.flow.declares


@pytest.mark.parametrize("priority", [0, 6, 7, -1, True])
def test_a_priority_outside_1_to_5_is_refused(priority: int) -> None:
    wf = Registry().register(runbook())
    with pytest.raises(InvalidArgumentError) as e:
        flow_record(wf, {}, priority=priority, now_ms=NOW)
    assert str(e.value) == f"priority must be 1 to 5 (1 first), got {priority!r}"


def test_a_missing_key_fails_the_submission_naming_path_and_limit() -> None:
    wf = Registry().register(runbook())
    with pytest.raises(FlowKeyError) as e:
        flow_record(wf, {"tenant": "acme", "warehouse": "dw1"}, priority=3, now_ms=NOW)
    assert str(e.value) == (
        'input has no "host" (the key of concurrency limit runbook/host); '
        "declare default= to allow it"
    )
    with pytest.raises(
        FlowKeyError, match=r'no "warehouse" \(the key of concurrency limit warehouse\)'
    ):
        flow_record(wf, {"host": "h", "tenant": "acme"}, priority=3, now_ms=NOW)


def test_defaults_and_functions_as_keys() -> None:
    def region(raw: Any) -> str:
        return str(raw["dc"]).split("-")[0]

    wf = Workflow(
        "copy",
        concurrency=[
            Concurrency(key="host", max=1, default="shared"),
            Concurrency(key=region, max=3),
            Concurrency(key=lambda raw: len(raw["files"]), max=2, name="batch"),
        ],
        fairness=lambda raw: raw.get("team", "none"),
    )
    wf.step(name="a", idempotency=Idempotent())(noop)
    Registry().register(wf)
    record = flow_record(wf, {"dc": "eu-west", "files": [1, 2]}, priority=3, now_ms=NOW)
    assert record == {
        "fair": "none",
        "hold": {"copy/host": "shared", "copy/region": "eu", "copy/batch": "2"},
    }


def test_one_declaration_or_a_list_or_a_tuple() -> None:
    one = Concurrency(key="host", max=2)
    for given in (one, [one], (one,)):
        wf = Workflow("w", concurrency=given)
        wf.step(name="a", idempotency=Idempotent(), concurrency=given)(noop)
        Registry().register(wf)
        assert [limit.id for limit in wf.flow.limits] == ["w/host", "w.a/host"]


@pytest.mark.parametrize("on_full", ["reject_new", "cancel_running"])
def test_a_step_refuses_reject_new_and_cancel_running(on_full: Any) -> None:
    wf = Workflow("runbook", version=3)
    wf.step(
        name="load",
        idempotency=Idempotent(),
        concurrency=Concurrency(key="w", max=1, on_full=on_full),
    )(noop)
    message = refused(wf)
    assert message.startswith("workflow 'runbook' v3: ")
    assert (
        f"step 'load' concurrency 'w': on_full={on_full!r} is for a workflow's concurrency only"
        in message
    )
    # on the workflow it is fine
    ok = Workflow("runbook", concurrency=Concurrency(key="w", max=1, on_full=on_full))
    ok.step(name="load", idempotency=Idempotent())(noop)
    Registry().register(ok)


def test_a_step_takes_no_rate_or_debounce() -> None:
    wf = Workflow("runbook")
    with pytest.raises(TypeError):
        wf.step(name="a", idempotency=Idempotent(), rate=Rate(key="t", limit=1, per=1))  # type: ignore[call-arg]
    wf.step(name="a", idempotency=Idempotent(), concurrency=Rate(key="t", limit=1, per=1))(noop)  # type: ignore[arg-type]
    assert "step 'a' concurrency= takes Concurrency(...) or a list of them, got Rate(" in refused(
        wf
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"concurrency": 2}, "concurrency= takes Concurrency(...) or a list of them, got 2"),
        (
            {"concurrency": [Concurrency(key="h", max=1), Rate(key="t", limit=1, per=1)]},
            "concurrency= takes Concurrency(...) or a list of them, got Rate(",
        ),
        ({"rate": Concurrency(key="h", max=1)}, "rate= takes Rate(...) or a list of them"),
        (
            {"debounce": [Debounce(key="k", quiet=1, max_wait=1)]},
            "debounce= takes one Debounce(...)",
        ),
        (
            {"fairness": 5},
            "fairness key must be a dotted path (str) or a function of the input, got 5",
        ),
        ({"fairness": "a..b"}, "fairness key must be a dotted path into the input"),
        (
            {
                "concurrency": Concurrency(key="tenant", max=1),
                "rate": Rate(key="tenant", limit=1, per=1),
            },
            "two limits have the id 'w/tenant' (concurrency on the workflow, rate on the "
            "workflow): give one of them another name=",
        ),
        (
            {"concurrency": [Concurrency(key="h", max=1), Concurrency(key="h", max=2)]},
            "two limits have the id 'w/h'",
        ),
    ],
)
def test_registration_refuses_a_bad_workflow_declaration(
    fields: dict[str, Any], message: str
) -> None:
    wf = Workflow("w", **fields)
    wf.step(name="a", idempotency=Idempotent())(noop)
    got = refused(wf)
    assert got.startswith("workflow 'w' v1: ")
    assert message in got


def test_a_global_name_is_one_limit_within_a_workflow() -> None:
    shared = Concurrency(key="warehouse", max=4, scope="global")
    wf = Workflow("etl")
    wf.step(name="load", idempotency=Idempotent(), concurrency=shared)(noop)
    wf.step(name="copy", idempotency=Idempotent(), concurrency=shared)(noop)
    Registry().register(wf)  # two steps sharing one global limit: the point of it
    bad = Workflow("etl")
    bad.step(name="load", idempotency=Idempotent(), concurrency=shared)(noop)
    bad.step(
        name="copy",
        idempotency=Idempotent(),
        concurrency=Concurrency(key="warehouse", max=2, scope="global"),
    )(noop)
    assert (
        "global limit 'warehouse' is declared as concurrency max 4 (step 'load') and as "
        "concurrency max 2 (step 'copy')"
    ) in refused(bad)


def test_a_global_name_is_one_limit_across_a_registry() -> None:
    registry = Registry()
    registry.register(runbook())  # warehouse: max 4
    same = Workflow("etl", concurrency=Concurrency(key="warehouse", max=4, scope="global"))
    same.step(name="a", idempotency=Idempotent())(noop)
    registry.register(same)
    other = Workflow("backfill", version=2)
    other.step(
        name="load",
        idempotency=Idempotent(),
        concurrency=Concurrency(key="wh", max=2, scope="global", name="warehouse"),
    )(noop)
    message = refused(other, registry)
    assert message == (
        "workflow 'backfill' v2: global limit 'warehouse' is declared as concurrency max 2 "
        "(step 'load') but as concurrency max 4 in workflow 'runbook' v1 (step 'load'): a "
        "global limit is one limit, declare it alike everywhere"
    )
    assert registry.get("backfill") is None  # refused: nothing of it registered
    rate = Workflow("api", rate=Rate(key="t", limit=5, per="1s", scope="global", name="warehouse"))
    rate.step(name="a", idempotency=Idempotent())(noop)
    assert "declared as rate 5 per 1s, burst 1 (the workflow) but as concurrency max 4" in refused(
        rate, registry
    )


def test_registering_the_same_workflow_again_is_no_clash() -> None:
    registry = Registry()
    wf = runbook()
    registry.register(wf)
    registry.register(wf)


def test_registration_checks_the_flow_it_records_with() -> None:
    wf = runbook()
    assert wf.flow.limits  # read before registration, then changed
    wf.concurrency = Concurrency(key="region", max=1)
    Registry().register(wf)
    assert [limit.id for limit in wf.flow.concurrency] == ["runbook/region"]


def test_a_durable_workflow_declares_flow_control_too() -> None:
    wf = DurableWorkflow("approvals", concurrency=Concurrency(key="team", max=1), fairness="team")

    @wf.main
    async def run(ctx: DurableContext, input: Any) -> None:
        return None

    Registry().register(wf)
    assert flow_record(wf, {"team": "ops"}, priority=3, now_ms=NOW) == {
        "fair": "ops",
        "hold": {"approvals/team": "ops"},
    }


def test_two_workflows_cannot_spell_one_limit_id_with_dots() -> None:
    registry = Registry()
    first = Workflow("a.b")
    first.step(name="c", idempotency=Idempotent(), concurrency=Concurrency(key="x", max=1))(noop)
    registry.register(first)
    second = Workflow("a")
    second.step(name="b.c", idempotency=Idempotent(), concurrency=Concurrency(key="x", max=1))(noop)
    assert refused(second, registry) == (
        "workflow 'a' v1: limit id 'a.b.c/x' (step 'b.c') is already the id of a limit of "
        "workflow 'a.b' v1 (step 'c'): give it another name="
    )
    # a workflow's versions share their limits
    again = Workflow("a.b", version=2)
    again.step(name="c", idempotency=Idempotent(), concurrency=Concurrency(key="x", max=3))(noop)
    registry.register(again)
