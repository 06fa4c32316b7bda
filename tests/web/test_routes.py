"""Every route the HTTP server serves has a rule in the policy (security/roles.py
ROUTE_ROLES, OPEN_ROUTES), and the guard enforces the rule it reads there: in
process, against a node with a tokens file and nothing else behind the pages."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.routing import Mount

from apollo11.scheduler.security import (
    LADDER,
    OPEN_ROUTES,
    ROUTE_ROLES,
    Principals,
    Role,
    create_token,
    grants,
)
from apollo11.scheduler.security import roles as policy
from apollo11.scheduler.web.server import make_app

SIGNED_IN = (Role.READER, Role.SUBMITTER, Role.OPERATOR)


def served(app: FastAPI) -> set[str]:
    """Each route of `app` by the name the policy gives it: "GET /tasks/{task_id}"."""
    names: set[str] = set()
    for route in app.routes:
        if isinstance(route, Mount):
            names.add(f"GET {route.path}")
        else:
            assert isinstance(route, APIRoute), route
            names |= {f"{m} {route.path}" for m in route.methods}
    return names


Web = tuple[httpx.AsyncClient, FastAPI, dict[Role, str]]


@pytest.fixture
async def web(tmp_path: Path) -> AsyncIterator[Web]:
    tokens_file = tmp_path / "tokens"
    tokens = {r: create_token(tokens_file, r.value, r) for r in (*SIGNED_IN, Role.WORKER)}
    settings = SimpleNamespace(
        node_id="n1",
        tls_cert=None,
        tls_key=None,
        metrics_open=False,
        http="127.0.0.1:0",
        advertise=None,
        http_allowed_hosts=["testserver"],
    )
    # nothing behind the pages: a refused request never reaches them
    node: Any = SimpleNamespace(
        settings=settings, principals=Principals(tokens_file), role="primary"
    )
    app = make_app(node)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        yield client, app, tokens


async def sign_in(client: httpx.AsyncClient, token: str) -> None:
    form = await client.get("/login")
    login_csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert login_csrf is not None
    r = await client.post("/login", data={"token": token, "csrf": login_csrf.group(1), "next": "/"})
    assert r.status_code == 303 and r.headers["location"] == "/", r.text


@asynccontextmanager
async def signed_in(client: httpx.AsyncClient, token: str) -> AsyncIterator[str]:
    """A session for `token` (the login form, then its POST): the session's CSRF token."""
    await sign_in(client, token)
    # a page that answers before it reads the node (as_of is not an event id)
    page = await client.get("/tasks/t1?as_of=x")
    assert page.status_code == 400, page.text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf is not None
    try:
        yield csrf.group(1)
    finally:
        client.cookies.clear()


def _url(route: str) -> tuple[str, str]:
    method, _, path = route.partition(" ")
    kind = "pause" if path.startswith("/schedules/") else "retry"
    path = path.replace("{schedule_id}", "s1").replace("{kind}", kind)
    return method, path.replace("{task_id}", "t1")


def test_every_route_the_app_serves_has_a_rule(web: Web) -> None:
    _, app, _ = web
    routes = served(app)
    assert routes - (set(ROUTE_ROLES) | OPEN_ROUTES) == set(), "a route without a rule"
    assert (set(ROUTE_ROLES) | OPEN_ROUTES) - routes == set(), "a rule for no route"
    assert not set(ROUTE_ROLES) & OPEN_ROUTES


async def test_every_rule_is_enforced(web: Web) -> None:
    """Without a session no closed route is served; with one of a role the rule does
    not grant, the refusal names the role the table gives."""
    client, _, tokens = web
    for route, need in ROUTE_ROLES.items():
        method, url = _url(route)
        r = await client.request(method, url, data={"csrf": "x"} if method == "POST" else None)
        if route == "POST /logout":
            assert r.status_code == 303, "signing out without a session ends nothing"
        elif method == "POST":
            assert r.status_code == 403 and "sign in first" in r.text, route
        elif route == "GET /metrics":
            assert r.status_code == 401, route
        else:
            assert r.status_code == 303 and r.headers["location"].startswith("/login"), route
        for role in SIGNED_IN:
            if grants(role, need):
                continue
            async with signed_in(client, tokens[role]) as csrf:
                data = {"csrf": csrf} if method == "POST" else None
                r = await client.request(method, url, data=data)
            assert r.status_code == 403, (route, role)
            assert f"this needs role {need.value}; {role.value} has role {role.value}" in r.text
    assert any(not grants(LADDER[0], need) for need in ROUTE_ROLES.values())


async def test_the_guard_reads_the_table(web: Web, monkeypatch: pytest.MonkeyPatch) -> None:
    client, _, tokens = web
    # copies, not edits: the table's order is the docs' (test_roledoc.py)
    raised = {**policy.ROUTE_ROLES, "GET /tasks/{task_id}": Role.OPERATOR}
    monkeypatch.setattr(policy, "ROUTE_ROLES", raised)
    async with signed_in(client, tokens[Role.OPERATOR]):
        pass  # the page answered it (400: as_of is not an event id)
    await sign_in(client, tokens[Role.READER])
    r = await client.get("/tasks/t1?as_of=x")
    assert r.status_code == 403 and "this needs role operator; reader has role reader" in r.text
    gone = {k: v for k, v in raised.items() if k != "GET /tasks/{task_id}"}
    monkeypatch.setattr(policy, "ROUTE_ROLES", gone)
    r = await client.get("/tasks/t1?as_of=x")
    assert r.status_code == 403 and "GET /tasks/{task_id} has no role in the policy" in r.text


def test_each_action_form_takes_its_rpcs_role() -> None:
    """The task page's forms (retry, skip, cancel, hold, release, redact) post to one
    route: its role must be what each action's RPC takes, so that the web grants no
    more and no less than `apollo11 hold` or `apollo11 redact`."""
    from apollo11.scheduler.nodeview import ACTION_KINDS, RPCS
    from apollo11.scheduler.security import METHOD_ROLES
    from apollo11.scheduler.web.pages import ACT

    assert {"hold", "release", "redact"} <= set(ACTION_KINDS)
    for kind in ACTION_KINDS:
        assert METHOD_ROLES[f"/apollo11.v1.Scheduler/{RPCS[kind]}"] == ROUTE_ROLES[f"POST {ACT}"]
