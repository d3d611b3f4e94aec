"""The console's login, when the broker is secured (it has a SASL listener).

Everything the HTTP listener serves (pages, /metrics, the REST API, the JSON behind the plots)
then needs a user of the broker's SCRAM credentials. The password is checked by the code
SASL PLAIN uses (``CredentialStore.check_password``: the SCRAM keys derived again with the
user's stored salt and iterations, compared in constant time), and the user needs DESCRIBE on
the cluster, as the console shows every topic and group. Browsers log in through a form and
then carry a signed session cookie (starlette's SessionMiddleware: HttpOnly, SameSite=Strict,
so another site cannot post the console's forms; Secure when the console is served over HTTPS); scripts and Prometheus may send HTTP Basic
credentials with each request instead. Failed logins are logged with the peer and slowed down
by the same per-host delay as failed SASL logins.
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import secrets
from collections.abc import Callable
from urllib.parse import quote

from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from headwater.broker.security.acl_operations import AclOperation
from headwater.broker.security.acls import CLUSTER_NAME, ResourceType
from headwater.broker.security.connection import FailedLogins

log = logging.getLogger("headwater.console")
SESSION_COOKIE = "headwater_console"
SESSION_S = 8 * 3600
OPEN_PATHS = ("/login", "/static/")
# What scripts and clients call: /metrics, the REST API, the schema registry's API.
API_PATHS = ("/metrics", "/v3", "/subjects", "/schemas", "/config", "/mode", "/compatibility")
REALM = 'Basic realm="headwater console", charset="UTF-8"'


class Refused(Exception):
    """A login the console refuses: HTTP ``status`` (401 wrong credentials, 403 not allowed) and why."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status


class ConsoleLogin:
    def __init__(self, broker, failed_logins: FailedLogins):
        self.broker, self.failed_logins = broker, failed_logins

    def middleware(self) -> list[Middleware]:
        # A fresh key per broker start: sessions end when the broker restarts.
        return [Middleware(SessionMiddleware, secret_key=secrets.token_urlsafe(32), session_cookie=SESSION_COOKIE,
                           max_age=SESSION_S, same_site="strict", https_only=self.broker.config.http_tls),
                Middleware(_Gate, login=self)]

    async def check(self, user: str, password: str, peer: str) -> None:
        """Raise Refused unless ``user`` has that password and may use the console (a wrong password
        is answered after the failure delay)."""
        if not await asyncio.to_thread(self.broker.credentials.check_password, user, password):
            delay = self.failed_logins.failed(peer)
            log.warning("console login failed from %s as %r (answered in %.1f s)", peer, user, delay)
            await asyncio.sleep(delay)
            raise Refused(401, "wrong user name or password")
        self.failed_logins.succeeded(peer)
        self.allowed(user, peer)

    def allowed(self, user: str, peer: str) -> None:
        """Raise Refused unless ``user`` (still) exists and has DESCRIBE on the cluster: checked at login
        and on every request of a session, so deleting the user or the ACL ends its sessions."""
        if user not in self.broker.credentials.users():
            raise Refused(401, f"user {user!r} no longer exists")
        if not self.broker.authorizer.authorize(f"User:{user}", peer, AclOperation.DESCRIBE, ResourceType.CLUSTER,
                                                CLUSTER_NAME, False):
            log.warning("console login from %s as %r refused: no DESCRIBE on the cluster", peer, user)
            raise Refused(403, f"User:{user} may not use the console: it needs DESCRIBE on the cluster")

    async def user(self, request: Request) -> str | None:
        """The user of the request's session or of its HTTP Basic credentials; None if it has neither
        (or its session's user may no longer use the console). Raises Refused for Basic credentials
        that do not allow the console."""
        host = peer(request)
        if "user" in request.session:
            try:
                self.allowed(request.session["user"], host)
                return request.session["user"]
            except Refused:  # the user or its ACL is gone: the session ends
                request.session.clear()
                return None
        scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            user, sep, password = base64.b64decode(encoded, validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise Refused(401, "malformed Basic credentials") from None
        if not sep:
            raise Refused(401, "malformed Basic credentials")
        await self.check(user, password, host)
        return user

    async def form(self, request: Request, render: Callable[..., Response]) -> Response:
        """GET: the login form; POST: log in and go on to the page asked for (``render``: the console's pages)."""
        if request.method == "GET":
            return render("login.html", next=_local(request.query_params.get("next", "/")), user="", error=None)
        form = await request.form()
        user, target = str(form.get("user", "")), _local(str(form.get("next", "/")))
        try:
            await self.check(user, str(form.get("password", "")), peer(request))
        except Refused as refused:
            return render("login.html", status=refused.status, next=target, user=user, error=str(refused))
        request.session["user"] = user
        return RedirectResponse(target, status_code=303)

    async def logout(self, request: Request) -> Response:
        request.session.clear()
        return RedirectResponse("/login", status_code=303)


def _local(target: str) -> str:
    """Only a path on this console may follow a login (no open redirect to another site)."""
    return target if target.startswith("/") and not target.startswith("//") and "\\" not in target else "/"


def peer(request: Request) -> str:
    """The client's address, as ACLs name hosts."""
    return request.client.host if request.client else ""


def _wants_page(path: str) -> bool:
    """A browser's page (sent to the login form) rather than data a script or a page's script fetches."""
    return not (path.startswith(API_PATHS) or path.endswith((".json", "/tail")))


class _Gate:
    """Lets a request through with a session or valid Basic credentials; otherwise a page goes to
    the login form and anything else is answered 401 (403: not allowed) with a Basic challenge."""

    def __init__(self, app, login: ConsoleLogin):
        self.app, self.login = app, login

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"].startswith(OPEN_PATHS):
            return await self.app(scope, receive, send)
        request = Request(scope)
        try:
            user = await self.login.user(request)
        except Refused as refused:
            response: Response = PlainTextResponse(str(refused), status_code=refused.status,
                                                   headers={"WWW-Authenticate": REALM})
        else:
            if user is not None:
                scope.setdefault("state", {})["user"] = user   # request.state.user: whom writes are authorized as
                return await self.app(scope, receive, send)
            path, query = scope["path"], scope.get("query_string", b"").decode("latin-1")
            if _wants_page(path):
                response = RedirectResponse("/login?next=" + quote(path + (f"?{query}" if query else "")),
                                            status_code=303)
            else:
                response = PlainTextResponse("log in first", status_code=401, headers={"WWW-Authenticate": REALM})
        await response(scope, receive, send)
