"""The browser's login, for a server with a token: a browser cannot send `Authorization: Bearer`, so

* `GET /ui/login`: a form asking for the token (without a token on the server: a page saying none is needed);
* `POST /ui/login`: the form's `token` (an urlencoded body of at most LOGIN_MAX_BODY bytes, and never more than the
  server's --max-body-mb), checked against the server's tokens as the guard checks a bearer header (edge/guards.py
  login_client: one constant-time digest lookup); a right one is set as the login cookie (HttpOnly, SameSite=Strict,
  Path=/ui, Secure over https) and the browser sent to /ui (303), a wrong one is the form again (401) with a line;
  an address with edge.attempts.LOGIN_FAILURES wrong tokens within LOGIN_WINDOW_S seconds is answered 429 with
  Retry-After (the form again, saying when) before its token is looked at, until the oldest leaves the window;
* `POST /ui/logout`: the cookie cleared, back to the form.

All three are open routes (edge.guards.OPEN_PATHS): the guard takes the cookie on page reads only (GET and HEAD of
/ui paths), so it never lets a form, a cross-site one least of all, write into the lake. The two POSTs refuse a
request from another origin (edge.guards.same_origin) and read no body but the login form's, within its bound.
"""
from __future__ import annotations

from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from edge.attempts import FailedAttempts
from edge.errors import BadInput
from edge.guards import (LOGIN_PATH, PAGES, TOKEN_COOKIE, ServerState, cookie_token, cookie_value, login_client,
                         read_limited, same_origin)
from ui.pages import page

LOGIN_MAX_BODY = 16 * 1024  # `token=` and a token of 4096 visible characters, each percent-encoded, fit
FORM_TYPE = "application/x-www-form-urlencoded"


def server_state(request: Request) -> ServerState:
    """The state of the server whose guard let the request in (edge.guards.require_token sets it on every request,
    open routes included): its tokens and limits. The UI's router is only ever served behind that guard."""
    return request.state.server


def login_page(request: Request, status: int = 200, error: str | None = None) -> Response:
    """The form; with the line `error` when the last try failed; what the browser's saved login is worth."""
    state = server_state(request)
    token = cookie_token(request)
    signed_in = token is not None and bool(state.config.tokens) and login_client(state, token) is not None
    stale = TOKEN_COOKIE in request.cookies and not signed_in
    return page("login.jinja", status, request=request, title="Log in", as_of=None, versions={},
                needed=bool(state.config.tokens), error=error, signed_in=signed_in, stale=stale)


def client_address(request: Request) -> str:
    """The TCP peer's address (what the login's failures are counted by)."""
    return request.client.host if request.client else ""


def login_router(attempts: FailedAttempts | None = None) -> APIRouter:
    """The login form, its POST and the logout; `attempts`: the failed logins by address (one per server)."""
    attempts = attempts or FailedAttempts()
    router = APIRouter(prefix=PAGES, include_in_schema=False)

    @router.get("/login")
    def login_form(request: Request) -> Response:
        return login_page(request)

    @router.post("/login")
    async def login(request: Request) -> Response:
        state = server_state(request)
        await same_origin(request)
        if not state.config.tokens:  # nothing to log in to
            return RedirectResponse(PAGES, 303)
        client = client_address(request)
        wait = attempts.retry_after(client)
        if wait is not None:
            refused = login_page(request, 429, f"too many wrong tokens from this address: try again in {wait} s")
            refused.headers["Retry-After"] = str(wait)
            return refused
        ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if ctype != FORM_TYPE:
            return login_page(request, 415, f"send the form ({FORM_TYPE}), not {ctype[:60] or 'no body type'}")
        if request.headers.get("content-encoding", "identity").lower() != "identity":
            return login_page(request, 415, "send the form unencoded")
        try:
            body = await read_limited(request, min(state.config.max_body, LOGIN_MAX_BODY))
        except BadInput as exc:
            return login_page(request, exc.status, f"the form was not taken: {exc.describe()}")
        try:
            fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False, max_num_fields=4)
        except (UnicodeDecodeError, ValueError):
            return login_page(request, 400, "the form was not taken: not a login form")
        tokens = fields.get("token") or []
        if len(tokens) != 1 or not tokens[0]:
            return login_page(request, 400, "give the token")
        if login_client(state, tokens[0]) is None:
            attempts.failed(client)
            return login_page(request, 401, "wrong token")
        done = RedirectResponse(PAGES, 303)
        done.set_cookie(TOKEN_COOKIE, cookie_value(tokens[0]), path=PAGES, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")
        return done

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        await same_origin(request)
        done = RedirectResponse(LOGIN_PATH, 303)
        done.delete_cookie(TOKEN_COOKIE, path=PAGES, httponly=True, samesite="strict",
                           secure=request.url.scheme == "https")
        return done

    return router
