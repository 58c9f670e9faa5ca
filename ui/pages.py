"""The HTML pages under /ui: the overview, the trajectory list (the read API's filters as a form, sortable column
headers, pagination links), a trajectory's conversation (bounded: ui/conversation.py; its log-prob heat: ui/heat.py,
its screenshot: ui/screenshots.py, the exports holding it: ui/export_index.py), the runs (config and metrics
summarised, pages), a run (ui/runview.py: curves, lineage, evaluations), the loop (success rate and mean reward by
policy_version, with its chart), the skills (usage, skill_effect, skill_to_instruction's selection) and the views
(the rows each yields; the export button: ui/exports.py); the same reader and parameter grammar as the read API
(ui/api.py).

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
from typing import Any, Callable
from urllib.parse import quote, urlencode

import jinja2
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from edge.guards import TOKEN_COOKIE
from lake.query import literal
from ui import conversation, screenshots
from ui.export_index import ExportIndex
from ui.heat import token_heat
from ui.charts import number as chart_number
from ui.runview import loop_chart, run_view
from ui import params as P
from ui.params import ParamError, read_params
from ui.reader import LakeReader, QueryLimit

# no script from anywhere, styles and images from this server only, forms only to it, never framed; a referrer for
# this server only (with none at all, a browser sends `Origin: null` on the login and logout forms, which
# edge.guards.same_origin must refuse as it refuses another site)
CSP = ("default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; "
       "frame-ancestors 'none'")
SECURITY_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                    "Referrer-Policy": "same-origin", "X-Frame-Options": "DENY", "Cache-Control": "no-store"}
STYLESHEET = "/ui/static/ui.css"


def link(path: str, **query: Any) -> str:
    """`path` with the query parameters that are set (None and "" left out), percent-encoded."""
    kept = {k: v for k, v in query.items() if v is not None and v != ""}
    return path + ("?" + urlencode(kept) if kept else "")


def segment(value: Any) -> str:
    """A value as one path segment: every reserved character encoded, `/` included (a trajectory id of `../x` or
    `a?b` stays one segment)."""
    return quote(str(value), safe="")


def segments(path: str) -> str:
    """A relative path as URL path segments, each percent-encoded (its `/` kept between them)."""
    return "/".join(segment(p) for p in path.split("/"))


PRETTY_CHARS = 50_000


def pretty(value: Any) -> str:
    """A JSON value as indented text (a string as it is), for a <pre>: escaped by the template like any text; past
    PRETTY_CHARS cut, saying so (the JSON API has it whole)."""
    text = value if isinstance(value, str) else json.dumps(conversation.valid_text(value), indent=2,
                                                           ensure_ascii=False, default=str)
    text = conversation.valid_text(text)
    if len(text) <= PRETTY_CHARS:
        return text
    return f"{text[:PRETTY_CHARS]}\n… (shown {PRETTY_CHARS:,} of {len(text):,} characters: the JSON API has it whole)"


SUMMARY_ITEMS = 6
SUMMARY_CHARS = 160


def summary(value: Any) -> str:
    """A config or metrics value in one short line: an object's first SUMMARY_ITEMS keys as `key=value` (a nested
    value as {…} or […]), anything else as compact JSON, cut at SUMMARY_CHARS (the whole value is in a fold)."""
    if value is None:
        return ""
    if isinstance(value, dict):
        def one(v: Any) -> str:
            if isinstance(v, dict):
                return "{…}"
            if isinstance(v, list):
                return "[…]"
            return json.dumps(v, ensure_ascii=False, default=str) if not isinstance(v, str) else v
        items = [f"{k}={one(v)}" for k, v in list(value.items())[:SUMMARY_ITEMS]]
        text = ", ".join(items) + (", …" if len(value) > SUMMARY_ITEMS else "")
    else:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS - 1] + "…"


SHORT_CHARS = 300


def short(value: Any) -> str:
    """A field shown in a line or a cell (an id, a task, an env...): "" for None, valid Unicode, cut at SHORT_CHARS
    with an ellipsis (a 5 MB task id is a page bound too; the JSON has it whole)."""
    if value is None:
        return ""
    text = conversation.valid_text(value if isinstance(value, str) else str(value))
    return text if len(text) <= SHORT_CHARS else text[:SHORT_CHARS - 1] + "…"


def chartnum(value: Any) -> str:
    """A chart's number as the points table shows it (blank for none)."""
    return "" if value is None else chart_number(value)


def rate(value: Any) -> str:
    """A fraction as a percentage with one decimal (blank for none)."""
    return "" if value is None else f"{100 * value:.1f}%"


def mean(value: Any) -> str:
    """A mean reward to three decimals (blank for none)."""
    return "" if value is None else f"{value:.3f}"


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
    env.filters.update(segment=segment, pretty=pretty, when=when, summary=summary, rate=rate, mean=mean,
                       short=short, chartnum=chartnum, segments=segments)
    return env


def page(name: str, status: int = 200, request: Request | None = None, **context: Any) -> HTMLResponse:
    """The template `name` rendered, with the security headers; `request`: the page offers to log out when the
    browser holds the login cookie (ui/login.py)."""
    session = request is not None and TOKEN_COOKIE in request.cookies
    return HTMLResponse(templates().get_template(name).render(session=session, **context), status_code=status,
                        headers=SECURITY_HEADERS)


def error_page(status: int, message: str, as_of: str | None = None) -> HTMLResponse:
    return page("error.jinja", status, title=f"{status}", message=message, as_of=as_of, versions={})


def raw_as_of(request: Request) -> str | None:
    """The pin as the user typed it, carried in every link of the page (parsed separately: read_params)."""
    values = request.query_params.getlist("as_of")
    return values[0] if len(values) == 1 and values[0].strip() else None


def paged(request: Request, path: str, parsers: dict, fetch: Callable[[dict], dict], template: str, title: str,
          **context: Any) -> Response:
    """A paged list page (trajectories, runs): its parameters read with `parsers`, a page of `fetch(q)`, rendered with
    `q`, the query as given (the cursor aside: the form's values), `next_link` (None on the last page) and
    `first_link` (None on the first), each keeping the other parameters."""
    items = request.query_params.multi_items()
    q = read_params(items, parsers)
    data = fetch(q)
    form = {name: value for name, value in items if name != "cursor"}
    nxt = data["next_cursor"]
    return page(template, request=request, title=title, as_of=raw_as_of(request), q=q, form=form,
                next_link=link(path, **form, cursor=nxt) if nxt else None,
                first_link=link(path, **form) if q["cursor"] is not None else None, **context, **data)


def pages_router(reader: LakeReader, runs_root: Any = None, csrf: Callable[[Request], str] | None = None,
                 screenshots_root: Any = None, exports: ExportIndex | None = None) -> APIRouter:
    """The pages over `reader`; `runs_root`: the folder of run folders a run page may read curves from
    (ui/runfiles.py; None: the lake's records only); `csrf`: the export form's token for a request
    (ui/exports.py; None: exports are off and the view pages show no button); `screenshots_root`: the folder web
    episodes' screenshots are served from (ui/screenshots.py; None: their paths as text); `exports`: the exports
    whose rows a conversation page looks its trajectory up in (ui/export_index.py; None: none)."""
    router = APIRouter(prefix="/ui", include_in_schema=False)
    exports = exports or ExportIndex(None)

    def rendered(request: Request, build) -> Response:
        try:
            return build()
        except ParamError as exc:
            return error_page(400, str(exc), raw_as_of(request))
        except QueryLimit as exc:
            return error_page(400, f"where: {exc}", raw_as_of(request))

    @router.get("")
    def overview(request: Request) -> Response:
        def build() -> Response:
            q = read_params(request.query_params.multi_items(), P.PINNED)
            data = reader.overview(q["as_of"])
            return page("overview.jinja", request=request, title="Overview", as_of=raw_as_of(request), **data)
        return rendered(request, build)

    @router.get("/trajectories")
    def trajectories(request: Request) -> Response:
        return rendered(request, lambda: paged(request, "/ui/trajectories", P.TRAJECTORY_LIST, reader.trajectories,
                                               "trajectories.jinja", "Trajectories", help=P.HELP, sorts=P.SORTS))

    @router.get("/trajectories/{trajectory_id:path}")
    def trajectory(trajectory_id: str, request: Request) -> Response:
        def build() -> Response:
            q = read_params(request.query_params.multi_items(), P.PINNED)
            row, versions = reader.trajectory(trajectory_id, q["as_of"])
            as_of = raw_as_of(request)
            if row is None:
                return error_page(404, f"no trajectory {trajectory_id[:200]!r} in the lake at these versions", as_of)
            shots = [screenshots.locate(screenshots_root, p) for p in screenshots.recorded(row)]
            return page("conversation.jinja", request=request, title=f"Trajectory {short(trajectory_id[:80])}",
                        as_of=as_of, row=row, versions=versions, conv=conversation.conversation(row),
                        heat=token_heat(row), shots=shots, holding=exports.holding(trajectory_id),
                        json_link=link(f"/v1/trajectories/{segment(trajectory_id)}", as_of=as_of),
                        here=f"/ui/trajectories/{segment(trajectory_id)}")
        return rendered(request, build)

    @router.get("/screenshots/{path:path}")
    def screenshot(path: str) -> Response:
        """A web episode's screenshot: a .png inside --screenshots only (ui/screenshots.py), else 404 or 403."""
        data, shot = screenshots.read(screenshots_root, path)
        if data is None:
            return error_page(shot.status, f"screenshot {short(path)!r}: {shot.why}")
        return Response(data, media_type="image/png", headers={**SECURITY_HEADERS, "Cache-Control": "max-age=300"})

    @router.get("/runs")
    def runs(request: Request) -> Response:
        return rendered(request, lambda: paged(request, "/ui/runs", P.RUN_LIST, reader.runs, "runs.jinja", "Runs",
                                               here="/ui/runs"))

    @router.get("/runs/{run_id:path}")
    def run(run_id: str, request: Request) -> Response:
        def build() -> Response:
            q = read_params(request.query_params.multi_items(), P.PINNED)
            data = reader.run(run_id, q["as_of"])
            as_of = raw_as_of(request)
            if not data["events"]:
                return error_page(404, f"no run {run_id[:200]!r} in the lake at these versions", as_of)
            v = run_view(data, runs_root)
            evals = sorted({t["eval_run_id"] for t in data["episodes"]})
            where = ("json_extract_string(metadata, '$.eval_run_id') IN (" + ", ".join(map(literal, evals)) + ")"
                     if evals else None)
            return page("run.jinja", request=request, title=f"Run {short(run_id[:80])}", as_of=as_of, v=v,
                        versions=data["versions"], served=data["served"], episodes=data["episodes"],
                        episodes_total=data["episodes_total"], episodes_where=where,
                        json_link=link(f"/v1/runs/{segment(run_id)}", as_of=as_of),
                        here=f"/ui/runs/{segment(run_id)}")
        return rendered(request, build)

    @router.get("/skills")
    def skills(request: Request) -> Response:
        def build() -> Response:
            q = read_params(request.query_params.multi_items(), P.SKILLS)
            data = reader.skills(q["as_of"], q["min_uses"], q["provenance"])
            return page("skills.jinja", request=request, title="Skills", as_of=raw_as_of(request), here="/ui/skills",
                        **data)
        return rendered(request, build)

    @router.get("/views")
    def views(request: Request) -> Response:
        def build() -> Response:
            read_params(request.query_params.multi_items(), P.PINNED)
            return page("views.jinja", request=request, title="Views", as_of=raw_as_of(request), here="/ui/views",
                        versions={}, views=reader.views(), exports_on=csrf is not None)
        return rendered(request, build)

    @router.get("/views/{name}")
    def view(name: str, request: Request) -> Response:
        def build() -> Response:
            q = read_params(request.query_params.multi_items(), P.PINNED)
            v = reader.view(name, q["as_of"])
            as_of = raw_as_of(request)
            if v is None:
                return error_page(404, f"no view {name[:200]!r} in views/*.sql", as_of)
            pin = json.dumps(v["versions"], separators=(",", ":"))  # an export of exactly what the page shows
            return page("view.jinja", request=request, title=f"View {name}", as_of=as_of, versions=v["versions"],
                        here=f"/ui/views/{segment(name)}", v=v, exports_on=csrf is not None, pin=pin,
                        csrf=csrf(request) if csrf is not None else "")
        return rendered(request, build)

    @router.get("/loop")
    def loop(request: Request) -> Response:
        def build() -> Response:
            q = read_params(request.query_params.multi_items(), P.PINNED)
            data = reader.loop(q["as_of"])
            return page("loop.jinja", request=request, title="The loop", as_of=raw_as_of(request), here="/ui/loop",
                        chart=loop_chart(data["rows"], data["increments"], data["split"]), **data)
        return rendered(request, build)

    @router.get("/static/ui.css")
    def stylesheet() -> Response:
        css = (resources.files("ui") / "static" / "ui.css").read_text(encoding="utf-8")
        return Response(css, media_type="text/css", headers={"X-Content-Type-Options": "nosniff",
                                                              "Cache-Control": "max-age=300"})

    return router
