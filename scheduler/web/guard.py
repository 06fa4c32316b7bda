"""Who is looking at a page, and whether a POST may act.

With a tokens file (authentication on), each route takes the role the policy
gives it (security/roles.py ROUTE_ROLES, looked up by the route the request
matched: reading the pages takes a session of role reader, acting one of role
operator), and a route the policy does not name is refused; without one (a
loopback node), the viewer is the anonymous principal, who may do everything,
as over gRPC. How the role is proven is this module's: a session for a page
(none: to the login form), a session and the form's CSRF token for a POST, a
bearer token or a session for /metrics.

Every POST, signed in or not, must come from this server's own pages: its
Origin (or, absent that, its Referer) must be this server's origin when the
browser sends one, and it must carry the CSRF token of the page that rendered
the form. SameSite=Strict alone is not enough: a page on another port of the
same host is the same *site*, and its form posts would carry the cookie. On an
open loopback node the token is one per node process, which still keeps any
web page the developer visits from posting to it: it cannot read ours.

Nor may another site read our pages through DNS rebinding (its name, re-pointed
at 127.0.0.1, would make it our "same origin"): every request but /healthz must
name, in its Host header, a host this node knows (see `allowed_hosts`), and an
Origin must be one of those too.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from fastapi import Request, Response

from apollo11.scheduler.security import (
    ANONYMOUS,
    LANDING,
    Principal,
    Principals,
    Role,
    grants,
    route_role,
)
from apollo11.scheduler.web.flash import Flash
from apollo11.scheduler.web.sessions import Session, Sessions

LOGIN_TTL_S = 600  # the login form's CSRF cookie: long enough to paste a token
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def host_name(authority: str) -> str:
    """The host of a Host header (or a URL's netloc): lowercased, no port, no brackets."""
    a = authority.strip().lower()
    if a.startswith("["):
        end = a.find("]")
        return a[1:end] if end > 0 else a
    if a.count(":") == 1:
        a = a.partition(":")[0]
    return a.rstrip(".")


def allowed_hosts(
    *, node_id: str, http: str | None, advertise: str | None, extra: Iterable[str] = ()
) -> frozenset[str]:
    """The host names the pages answer to. In docker compose Prometheus scrapes
    `node1:7412`: the node id and the --advertise host cover such service names."""
    names = {*LOOPBACK_NAMES, node_id.lower(), *(host_name(h) for h in extra)}
    for hostport in (http, advertise):
        if hostport:
            names.add(host_name(hostport))
    names.discard("")
    return frozenset(names)


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def route_of(request: Request) -> str:
    """The policy's name for the route `request` matched: "GET /tasks/{task_id}"."""
    return f"{request.method} {getattr(request.scope.get('route'), 'path', '?')}"


def needed(route: str) -> Role | None:
    """The role `route` needs (None: open); PageRefused when the policy does not name it."""
    try:
        return route_role(route)
    except KeyError:
        raise PageRefused(403, f"{route} has no role in the policy: refused") from None


def may(principal: Principal, route: str) -> bool:
    """Would `principal` be let through `route` (a page's links and buttons ask)?"""
    need = needed(route)
    return need is None or principal.may(need)


class LoginRequired(Exception):
    """A page asked for without a session: the handler redirects to /login."""

    def __init__(self, next_url: str) -> None:
        super().__init__(next_url)
        self.next_url = next_url


class PageRefused(Exception):
    """The request may not be served: `status` 401, 403 or 421, and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class Viewer:
    principal: Principal
    csrf: str  # the token this viewer's forms carry
    token: str | None  # to forward actions to the primary with; None: authentication is off
    sid: str | None


class Gate:
    def __init__(
        self,
        principals: Principals | None,
        *,
        node_id: str,
        tls: bool,
        metrics_open: bool,
        hosts: Iterable[str] = LOOPBACK_NAMES,
    ) -> None:
        self.principals = principals
        self.hosts = frozenset(hosts)
        self.sessions = None if principals is None else Sessions(principals)
        self.tls = tls
        self.metrics_open = metrics_open
        # Cookies ignore the port: three nodes on one host must not overwrite each
        # other's session, so the node id is in the name.
        self.cookie = f"apollo11-session-{node_id}"
        self.login_cookie = f"apollo11-login-{node_id}"
        self.flash = Flash(cookie=f"apollo11-flash-{node_id}", tls=tls)
        self._open_csrf = secrets.token_urlsafe(32)

    @property
    def enabled(self) -> bool:
        return self.sessions is not None

    # ----------------------------------------------------------- who is it

    def host_allowed(self, authority: str) -> bool:
        """Whether a Host (or Origin netloc) names this node. Any IP literal does: a
        page can only be served from an address by whoever listens there (us), and
        rebinding needs a name. Other names only from the allowed list."""
        name = host_name(authority)
        return name in self.hosts or _is_ip(name)

    def check_host(self, request: Request) -> None:
        authority = request.headers.get("host", "")
        if not self.host_allowed(authority):
            raise PageRefused(
                421,
                f"this node does not answer to host {host_name(authority)[:100]!r}: use "
                "localhost, its --http or --advertise host or its node id, or add the "
                "name with --http-allowed-hosts",
            )

    def viewer(self, request: Request) -> Viewer | None:
        """The viewer of this request; None when authentication is on and no live session."""
        if self.sessions is None:
            return Viewer(ANONYMOUS, self._open_csrf, None, None)
        sid = request.cookies.get(self.cookie)
        session = self.sessions.get(sid) if sid else None
        if session is None:
            return None
        return Viewer(session.principal, session.csrf, session.token, session.sid)

    def reader(self, request: Request) -> Viewer:
        """For a page: the viewer, or LoginRequired."""
        need = needed(route_of(request))
        viewer = self.viewer(request)
        if viewer is None:
            path = request.url.path
            if request.url.query:
                path += "?" + request.url.query
            raise LoginRequired(path)
        _need(viewer.principal, need)
        return viewer

    def actor(self, request: Request, csrf: str) -> Viewer:
        """For a POST: the viewer, if it comes from our own form and may do this (else
        PageRefused)."""
        need = needed(route_of(request))
        self.same_origin(request)
        viewer = self.viewer(request)
        if viewer is None:
            raise PageRefused(
                403, "sign in first: this needs a session (your session may have ended)"
            )
        if not hmac.compare_digest(csrf.encode(), viewer.csrf.encode()):
            raise PageRefused(
                403, "the form's CSRF token is missing or wrong: reload the page and try again"
            )
        _need(viewer.principal, need)
        return viewer

    def same_origin(self, request: Request) -> None:
        """Refuse a request a browser says comes from another origin."""
        claimed = request.headers.get("origin")
        if claimed is None:
            referer = request.headers.get("referer")
            if referer:
                parts = urlsplit(referer)
                claimed = f"{parts.scheme}://{parts.netloc}"
        if claimed is None:
            return  # not a browser's cross-site request (curl, tests): the CSRF token decides
        claimed_host = urlsplit(claimed).netloc
        if claimed.lower() != self.origin(request) or not self.host_allowed(claimed_host):
            raise PageRefused(403, f"cross-site request refused: it comes from {claimed}")

    def origin(self, request: Request) -> str:
        return f"{request.url.scheme}://{request.headers.get('host', '')}".lower()

    def scraper(self, request: Request) -> None:
        """For /metrics: a bearer token or a session of its role, unless metrics are open."""
        need = needed(route_of(request))
        if self.principals is None or self.metrics_open or need is None:
            return
        auth = request.headers.get("authorization")
        if auth is None:
            viewer = self.viewer(request)
            if viewer is None:
                raise PageRefused(
                    401, f"/metrics needs a bearer token of role {need.value} (or --metrics-open)"
                )
            _need(viewer.principal, need)
            return
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise PageRefused(401, "the Authorization header must be 'Bearer <token>'")
        principal = self.principals.by_token(token.strip())
        if principal is None:
            raise PageRefused(401, "the bearer token is not valid (unknown or revoked)")
        _need(principal, need)

    def sign_in(self, token: str) -> Session:
        """A new session for `token`; PageRefused (401, 403) says why there is none."""
        assert self.sessions is not None
        principal = self.sessions.principals.by_token(token)
        if principal is None:
            raise PageRefused(401, "that token is not valid (unknown or revoked)")
        why = sign_in_refusal(principal)
        if why is not None:  # no session: every page would answer it 403
            raise PageRefused(403, why)
        session = self.sessions.open(token)
        assert session is not None  # the file read a moment ago, with no await between
        return session

    # -------------------------------------------------------------- cookies

    def start_session(self, response: Response, session: Session) -> None:
        assert self.sessions is not None
        response.set_cookie(
            self.cookie,
            session.sid,
            max_age=int(self.sessions.ttl_s),
            path="/",
            httponly=True,
            samesite="strict",
            secure=self.tls,
        )

    def end_session(self, response: Response, viewer: Viewer | None) -> None:
        if self.sessions is not None and viewer is not None and viewer.sid is not None:
            self.sessions.close(viewer.sid)
        response.delete_cookie(
            self.cookie, path="/", httponly=True, samesite="strict", secure=self.tls
        )

    def set_login_cookie(self, response: Response, token: str) -> None:
        """The login form's CSRF token, as a short-lived cookie beside the form's field.

        An attacker's page can neither read nor set our cookie, so it cannot post a
        matching pair, and cannot sign a victim in with the attacker's own token."""
        response.set_cookie(
            self.login_cookie,
            token,
            max_age=LOGIN_TTL_S,
            path="/login",
            httponly=True,
            samesite="strict",
            secure=self.tls,
        )

    def check_login(self, request: Request, form_token: str) -> None:
        self.same_origin(request)
        cookie = request.cookies.get(self.login_cookie, "")
        if not cookie or not hmac.compare_digest(cookie.encode(), form_token.encode()):
            raise PageRefused(
                403, "the login form expired or did not come from this server: load it again"
            )


def sign_in_refusal(principal: Principal) -> str | None:
    """Why `principal` may not sign in to the pages (None: it may). A token whose role
    cannot read the landing page (worker; node has no token) would get a session that
    the pages refuse, so it gets none, and is told which roles can."""
    need = needed(LANDING)
    if need is None or principal.may(need):
        return None
    have = principal.role.value if principal.role else "none"
    readers = [r.value for r in Role if grants(r, need)]
    return (
        f"that token ({principal.name}, role {have}) cannot read these pages: sign in "
        f"with a token of role {', '.join(readers[:-1])} or {readers[-1]}"
    )


def _need(principal: Principal, need: Role | None) -> None:
    if need is not None and not principal.may(need):
        have = principal.role.value if principal.role else "none"
        raise PageRefused(403, f"this needs role {need.value}; {principal.name} has role {have}")


def safe_next(url: str) -> str:
    """Where to go after signing in: a path on this server only (no open redirect)."""
    if not url.startswith("/") or url.startswith("//") or "\\" in url:
        return "/"
    return url
