"""The HTML pages under /ui: the overview, the trajectory list (the read API's filters as a form, pagination
links) and a trajectory's conversation; the same reader and parameter grammar as the read API (ui/api.py).

Safe by construction: jinja2 with autoescape on for every template (`<script>` in a message is text), values reach
URLs only percent-encoded (`link`, `segment`: never as a scheme or a raw path), and every page is served with a
Content-Security-Policy that allows no script at all (the pages need none) and styles only from this server's
stylesheet, so a value that somehow slipped through escaping still could not run.
"""
from __future__ import annotations

import datetime as dt
import functools
import json
from importlib import resources
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from ui import conversation
from ui import params as P
from ui.params import ParamError, read_params
from ui.reader import LakeReader, QueryTimeout

# no script from anywhere, styles and images from this server only, forms only to it, never framed
CSP = ("default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; "
       "frame-ancestors 'none'")
SECURITY_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                    "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY", "Cache-Control": "no-store"}
STYLESHEET = "/ui/static/ui.css"


def link(path: str, **query: Any) -> str:
    """`path` with the query parameters that are set (None and "" left out), percent-encoded."""
    kept = {k: v for k, v in query.items() if v is not None and v != ""}
    return path + ("?" + urlencode(kept) if kept else "")


def segment(value: Any) -> str:
    """A value as one path segment: every reserved character encoded, `/` included (a trajectory id of `../x` or
    `a?b` stays one segment)."""
    return quote(str(value), safe="")


def pretty(value: Any) -> str:
    """A JSON value as indented text (a string as it is), for a <pre>: escaped by the template like any text."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def when(value: Any) -> str:
    """A time as the pages show it: UTC to the second (the API gives it whole)."""
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return "" if value is None else str(value)


@functools.cache
def templates() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("ui", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.globals.update(link=link, stylesheet=STYLESHEET)
    env.filters.update(segment=segment, pretty=pretty, when=when)
    return env


def page(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    return HTMLResponse(templates().get_template(name).render(**context), status_code=status,
                        headers=SECURITY_HEADERS)


def error_page(status: int, message: str, as_of: str | None = None) -> HTMLResponse:
    return page("error.jinja", status, title=f"{status}", message=message, as_of=as_of, versions={})


def raw_as_of(request: Request) -> str | None:
    """The pin as the user typed it, carried in every link of the page (parsed separately: read_params)."""
    values = request.query_params.getlist("as_of")
    return values[0] if len(values) == 1 and values[0].strip() else None


def pages_router(reader: LakeReader) -> APIRouter:
    router = APIRouter(prefix="/ui", include_in_schema=False)

    def rendered(request: Request, build) -> Response:
        try:
            return build()
        except ParamError as exc:
            return error_page(400, str(exc), raw_as_of(request))
        except QueryTimeout as exc:
            return error_page(400, f"where: {exc}", raw_as_of(request))

    @router.get("")
    def overview(request: Request) -> Response:
        def build() -> Response:
            q = read_params(request.query_params.multi_items(), P.PINNED)
            data = reader.overview(q["as_of"])
            return page("overview.jinja", title="Overview", as_of=raw_as_of(request), **data)
        return rendered(request, build)

    @router.get("/trajectories")
    def trajectories(request: Request) -> Response:
        def build() -> Response:
            items = request.query_params.multi_items()
            q = read_params(items, P.TRAJECTORY_LIST)
            data = reader.trajectories(q)
            form = {name: value for name, value in items if name != "cursor"}
            as_of = raw_as_of(request)
            next_link = link("/ui/trajectories", **form, cursor=data["next_cursor"]) if data["next_cursor"] else None
            first_link = link("/ui/trajectories", **form) if q["cursor"] is not None else None
            return page("trajectories.jinja", title="Trajectories", as_of=as_of, form=form, help=P.HELP,
                        next_link=next_link, first_link=first_link, **data)
        return rendered(request, build)

    @router.get("/trajectories/{trajectory_id:path}")
    def trajectory(trajectory_id: str, request: Request) -> Response:
        def build() -> Response:
            q = read_params(request.query_params.multi_items(), P.PINNED)
            row, versions = reader.trajectory(trajectory_id, q["as_of"])
            as_of = raw_as_of(request)
            if row is None:
                return error_page(404, f"no trajectory {trajectory_id[:200]!r} in the lake at these versions", as_of)
            return page("conversation.jinja", title=f"Trajectory {trajectory_id[:80]}", as_of=as_of, row=row,
                        versions=versions, turns=conversation.turns(row.get("messages")),
                        steps=conversation.steps(row.get("steps")), here=f"/ui/trajectories/{segment(trajectory_id)}")
        return rendered(request, build)

    @router.get("/static/ui.css")
    def stylesheet() -> Response:
        css = (resources.files("ui") / "static" / "ui.css").read_text(encoding="utf-8")
        return Response(css, media_type="text/css", headers={"X-Content-Type-Options": "nosniff",
                                                              "Cache-Control": "max-age=300"})

    return router
