"""The Limits page (issue 31, docs/flow-control.md): every flow-control limit, what
its workflow declares and what is in force, and the key values with the most
waiting, with the fairness weights. Read only: a limit is changed with `apollo11
limits set`, an operator's act recorded with who did it.

What holds and waits is the primary's: the queues live in its engine alone, so a
standby shows no limits and says where the primary is, as ListLimits answers. The
page is the engine's `limits.view()`, a page of limits at a time by id, each with its
busiest values only (`values` says how many there are).
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse

from apollo11.scheduler.nodeview import NodeView
from apollo11.scheduler.web.guard import Gate

Render = Callable[..., HTMLResponse]
LIST_LIMIT = 100  # limits a page, by id
KEYS_SHOWN = 20  # key values of each limit: the most waiting, then the most running
WEIGHTS_SHOWN = 200  # fairness weights, by value


def add_limit_pages(app: FastAPI, node: NodeView, gate: Gate, render: Render) -> None:
    @app.get("/limits", response_class=HTMLResponse)
    async def limit_list(request: Request, after: str = "") -> HTMLResponse:
        viewer = gate.reader(request)
        engine = node.engine
        if engine is None or not engine.leading:
            return render("limits.html", viewer=viewer, elsewhere=str(node.not_leader()))
        view = engine.limits.view(top=KEYS_SHOWN)
        later = [v for v in view.limits if v.limit_id > after]
        more = later[LIST_LIMIT - 1].limit_id if len(later) > LIST_LIMIT else None
        return render(
            "limits.html",
            viewer=viewer,
            elsewhere="",
            rows=later[:LIST_LIMIT],
            total=len(view.limits),
            after=after,
            more=more,
            limit=LIST_LIMIT,
            keys_shown=KEYS_SHOWN,
            weights=sorted(view.weights.items())[:WEIGHTS_SHOWN],
            weights_total=len(view.weights),
        )
