"""A step's limits as declared (issue 32, part 3): sizes parsed strictly, a bad limit
refused at registration naming the workflow and the step, the causes a step stopped at
a limit fails with, matched by the retry rules like any other."""

from __future__ import annotations

import pytest

import apollo11
from apollo11.scheduler import retry
from apollo11.scheduler.cause import of_class
from apollo11.scheduler.errors import WorkflowDefinitionError
from apollo11.scheduler.steplimits import (
    CpuLimitExceeded,
    Limits,
    MemoryLimitExceeded,
    effective,
    format_size,
    parse_size,
)
from apollo11.scheduler.workflow import FINAL, Idempotent, Registry, Retry, StepContext, Workflow


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("512MiB", 512 << 20),
        ("2GiB", 2 << 30),
        ("1.5 GiB", 3 << 29),
        ("100MB", 100_000_000),
        ("64KiB", 64 << 10),
        (" 1TiB ", 1 << 40),
        (4096, 4096),
    ],
)
def test_sizes_with_a_unit_are_bytes(text: str | int, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("100M", "unknown unit 'M'"),
        ("1Gi", "did you mean 1GiB?"),
        ("512mib", "did you mean 512MiB?"),
        ("512", "is not a size"),
        ("lots", "is not a size"),
        ("-1GiB", "is not a size"),
        ("0MiB", "no memory at all"),
        (0, "more than 0 bytes"),
        (1.5, "must be a size"),
        (True, "must be a size"),
    ],
)
def test_a_malformed_size_is_refused_saying_what_to_write(value: object, said: str) -> None:
    with pytest.raises(ValueError) as e:
        parse_size(value)
    assert said in str(e.value)


def test_sizes_read_back_as_people_write_them() -> None:
    assert format_size(512 << 20) == "512 MiB"
    assert format_size(3 << 29) == "1.5 GiB"
    assert format_size(100) == "100 B"


def _wf(limits: object) -> Workflow:
    wf = Workflow("etl", version=2)

    def load(ctx: StepContext) -> None:
        return None

    wf.step(name="load", idempotency=Idempotent(), limits=limits)(load)  # type: ignore[arg-type]
    return wf


@pytest.mark.parametrize(
    ("limits", "said"),
    [
        (Limits(memory="100M"), "step 'load' limits memory '100M': unknown unit 'M'"),
        (Limits(memory="1MiB"), "limits memory 1 MiB is less than the 64 MiB"),
        (Limits(cpu_s=0), "limits cpu_s must be seconds > 0, got 0"),
        (Limits(cpu_s=float("inf")), "limits cpu_s must be seconds > 0, got inf"),
        (Limits(cpu_s="60"), "limits cpu_s must be seconds > 0, got '60'"),  # type: ignore[arg-type]
        (Limits(), "limits declare nothing"),
        ({"memory": "1GiB"}, "limits must be a Limits(memory=..., cpu_s=...)"),
    ],
)
def test_a_bad_limit_is_refused_at_registration_naming_workflow_and_step(
    limits: object, said: str
) -> None:
    with pytest.raises(WorkflowDefinitionError) as e:
        Registry().register(_wf(limits))
    assert str(e.value).startswith("workflow 'etl' v2: ")
    assert said in str(e.value)


def test_good_limits_register_and_say_what_they_hold() -> None:
    wf = Registry().register(_wf(Limits(memory="512MiB", cpu_s=599.5)))
    limits = wf.steps["load"].limits
    assert limits is not None
    assert (limits.memory_bytes, limits.cpu_seconds) == (512 << 20, 600)
    assert limits.describe() == "memory 512 MiB, 600 CPU s"


def test_the_workers_default_memory_fills_in_what_a_step_leaves_out() -> None:
    assert effective(None, None) is None
    assert effective(None, 1 << 30) == Limits(memory=1 << 30)
    assert effective(Limits(cpu_s=5), 1 << 30) == Limits(memory=1 << 30, cpu_s=5)
    own = Limits(memory="256MiB")
    assert effective(own, 1 << 30) is own


def test_the_causes_are_importable_beside_retry_and_named_by_the_face() -> None:
    assert apollo11.MemoryLimitExceeded is MemoryLimitExceeded
    assert apollo11.CpuLimitExceeded is CpuLimitExceeded
    assert apollo11.Limits is Limits
    # the name the log keeps is the face's, whatever module defines the class
    assert of_class(MemoryLimitExceeded).type == "apollo11.MemoryLimitExceeded"
    assert issubclass(MemoryLimitExceeded, MemoryError)


def test_the_retry_rules_match_a_limit_by_its_cause() -> None:
    policy = Retry(attempts=3, on={MemoryLimitExceeded: FINAL, TimeoutError: Retry(attempts=9)})
    verdict = retry.judge(policy, {}, of_class(MemoryLimitExceeded, "past 512 MiB"), "t:s")
    assert (verdict.rule, verdict.final, verdict.attempts) == (
        "apollo11.MemoryLimitExceeded",
        True,
        1,
    )
    # no rule of its own: the default rule's budget, as any failure
    verdict = retry.judge(policy, {}, of_class(CpuLimitExceeded), "t:s")
    assert (verdict.rule, verdict.final) == ("default", False)
    # a rule for MemoryError holds a step stopped at its memory limit too
    broad = Retry(on={MemoryError: Retry(attempts=2)})
    assert retry.rule_for(broad, of_class(MemoryLimitExceeded))[0] == "builtins.MemoryError"
