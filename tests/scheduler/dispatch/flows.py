"""Workflows for the dispatch tests: the node only decides; the tests' workers run them."""

from apollo11.scheduler.workflow import Idempotent, Retry, Workflow

pair = Workflow("pair", version=1)
# a rule for connections, which a worker's failure is matched to by its MRO names
_QUICK = Retry(
    attempts=3, backoff_s=0.01, max_lost=5, on={ConnectionError: Retry(attempts=5, backoff_s=0.01)}
)


@pair.step(idempotency=Idempotent(), retry=_QUICK)
def first(ctx):  # type: ignore[no-untyped-def]
    return {"n": 1}


@pair.step(after=["first"], idempotency=Idempotent(), retry=_QUICK)
def second(ctx):  # type: ignore[no-untyped-def]
    return {"n": ctx.results["first"]["n"] + 1}


slow = Workflow("slow", version=1)


@slow.step(idempotency=Idempotent(), retry=Retry(attempts=1), timeout=0.5)
def only(ctx):  # type: ignore[no-untyped-def]
    return None
