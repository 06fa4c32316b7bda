"""Flow control at runtime: `limits show|set|reset` (docs/flow-control.md, "Commands").

The primary answers all three: the queues are its engine's, and a change is an event
it writes with the caller's principal. What the flags can get wrong on their own (two
kinds of change at once, a weight that is not VALUE=W, a rate that is not N/DURATION)
is a usage error here (exit 2); whether the change fits the limit (a --max on a rate,
a max of 0, an unknown id) is the node's to say, in its words (exit 1).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from apollo11.scheduler.cli._output import escape
from apollo11.scheduler.cli._shared import AsJson, Grid, Server, client, fail, out, print_json, run

LimitId = Annotated[
    str, typer.Argument(help="The limit's id (apollo11 limits show).", show_default=False)
]
Reason = Annotated[str, typer.Option("--reason", help="Why: kept on the LIMIT event.")]


def show(
    all_keys: Annotated[
        bool, typer.Option("--all", help="Every key value of each limit, not the busiest 20.")
    ] = False,
    server: Server = None,
    as_json: AsJson = False,
) -> None:
    """Every limit: declared and effective, its busiest key values (running, queued),
    and the fairness weights. The primary answers."""

    async def go() -> Any:
        async with client(server) as c:
            return await c.limits(all_keys=all_keys)

    view = run(go())
    if as_json:
        print_json(view.to_json())
        return
    if not view.limits:
        out.print("no limits: the loaded workflows declare none (docs/flow-control.md)")
    else:
        table = Grid("limit", "kind", "scope", "declared", "effective", "on full", "values")
        for v in view.limits:
            effective = f"{v.effective} (set)" if v.overridden else v.effective
            table.add_row(
                v.limit_id, v.kind, v.scope, v.declared or "-", effective, v.on_full, str(v.values)
            )
        table.show()
    busy = [(v, k) for v in view.limits for k in v.keys]
    if busy:
        keys = Grid("limit", "value", "running", "queued")
        for v, k in busy:
            keys.add_row(v.limit_id, k.value, str(k.running), str(k.queued))
        keys.show()
    for v in view.limits:
        if len(v.keys) < v.values:
            out.print(
                f"{v.limit_id}: the busiest {len(v.keys)} of {v.values} values (--all: every one)",
                markup=False,
            )
    if view.weights:
        out.print(f"weights: {_weights(view.weights)} (others 1)", markup=False)


def set_(
    limit_id: Annotated[
        str | None,
        typer.Argument(help="The limit's id (apollo11 limits show); none for --weight alone."),
    ] = None,
    max_: Annotated[
        int | None, typer.Option("--max", help="A concurrency limit's max, from 1.")
    ] = None,
    rate: Annotated[
        str | None, typer.Option("--rate", help="A rate's starts per period: N/DURATION, 10/1s.")
    ] = None,
    burst: Annotated[int | None, typer.Option("--burst", help="A rate's burst, from 1.")] = None,
    weight: Annotated[
        list[str] | None,
        typer.Option("--weight", help="A fairness value's share, VALUE=W (default 1); repeatable."),
    ] = None,
    reason: Reason = "",
    server: Server = None,
    as_json: AsJson = False,
) -> None:
    """Change a limit at runtime (--max; or --rate and --burst), or fairness weights
    (--weight): an event with your principal, in force on the primary once applied."""
    weights = _parse_weights(weight or [])
    if max_ is not None and (rate is not None or burst is not None):
        raise fail("give --max (a concurrency limit) or --rate/--burst (a rate), not both", 2)
    changes = max_ is not None or rate is not None or burst is not None
    if not changes and not weights:
        raise fail("nothing to set: give --max, --rate (and --burst) or --weight VALUE=W", 2)
    if changes and limit_id is None:
        raise fail("name the limit: apollo11 limits set ID ... (apollo11 limits show)", 2)
    if rate is not None:
        count, sep, per = rate.partition("/")
        if not sep or not count.isdigit() or not per:
            raise fail(f"--rate {rate!r} is not N/DURATION, like 10/1s or 600/1m", 2)

    async def go() -> Any:
        async with client(server) as c:
            return await c.set_limit(
                limit_id, max=max_, rate=rate, burst=burst, weights=weights, reason=reason
            )

    _done(run(go()), "set", as_json)


def reset(
    limit_id: LimitId, reason: Reason = "", server: Server = None, as_json: AsJson = False
) -> None:
    """Put a limit back to its declaration (an event, as a change is)."""

    async def go() -> Any:
        async with client(server) as c:
            return await c.set_limit(limit_id, reset=True, reason=reason)

    _done(run(go()), "reset", as_json)


def _parse_weights(given: list[str]) -> dict[str, float]:
    weights: dict[str, float] = {}
    for item in given:
        value, sep, share = item.rpartition("=")
        try:
            weights[value] = float(share)
        except ValueError:
            sep = ""
        if not sep:
            raise fail(f"--weight {item!r} is not VALUE=W, like acme=3", 2)
    return weights


def _weights(weights: dict[str, float]) -> str:
    return ", ".join(f"{value}={w:g}" for value, w in weights.items())


def _done(change: Any, verb: str, as_json: bool) -> None:
    if as_json:
        print_json(change.to_json())
        return
    v = change.limit
    if v is not None:
        declared = f" (declared {v.declared})" if v.overridden and v.declared else ""
        out.print(
            f"{verb} [bold]{escape(v.limit_id)}[/bold]: {escape(v.effective)}{declared}, "
            f"event {change.event_id}"
        )
    else:
        out.print(f"{verb} weights, event {change.event_id}")
    if change.weights:
        out.print(f"weights: {_weights(change.weights)} (others 1)", markup=False)
