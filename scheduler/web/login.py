"""Signing in to the pages with a bearer token, and signing out.

The login form is protected like every other form: its POST must come from
this server's origin and carry the token of a short-lived cookie set with the
form (a login CSRF would sign the victim in as the attacker, whose actions
would then be recorded under the attacker's name on the victim's screen).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable

from fastapi import FastAPI, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from apollo11.scheduler.web.guard import Gate, PageRefused, safe_next

log = logging.getLogger(__name__)

Render = Callable[..., HTMLResponse]


def add_login(app: FastAPI, gate: Gate, render: Render) -> None:
    def form(next_url: str, status: int = 200, error: str = "") -> Response:
        token = secrets.token_urlsafe(32)
        response = render("login.html", status, login_csrf=token, next=next_url, error=error)
        gate.set_login_cookie(response, token)
        return response

    @app.get("/login")
    async def login_form(next: str = "/") -> Response:
        if gate.sessions is None:
            return RedirectResponse("/", status_code=303)  # nothing to sign in to
        return form(safe_next(next))

    @app.post("/login")
    async def login(
        request: Request, token: str = Form(""), csrf: str = Form(""), next: str = Form("/")
    ) -> Response:
        if gate.sessions is None:
            return RedirectResponse("/", status_code=303)
        gate.check_login(request, csrf)
        try:
            session = gate.sign_in(token.strip())
        except PageRefused as e:  # the form again, saying why
            client = request.client.host if request.client else "?"
            log.warning("web sign-in refused from %s: %s", client, e.message)
            return form(safe_next(next), e.status, e.message)
        p = session.principal
        log.info("web sign-in: %s (role %s)", p.name, p.role.value if p.role else "none")
        response = RedirectResponse(safe_next(next), status_code=303)
        gate.start_session(response, session)
        response.delete_cookie(gate.login_cookie, path="/login")
        return response

    @app.post("/logout")
    async def logout(request: Request, csrf: str = Form("")) -> Response:
        gate.same_origin(request)
        viewer = gate.viewer(request)
        if viewer is not None and viewer.sid is not None:
            # a forged sign-out is only a nuisance, but still needs the form's token
            gate.actor(request, csrf)
        response = RedirectResponse("/login" if gate.enabled else "/", status_code=303)
        gate.end_session(response, viewer)
        return response
