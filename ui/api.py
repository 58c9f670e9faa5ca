"""The read API under /v1 (JSON, in the app's OpenAPI): the data the pages show, for scripts and notebooks.

* `GET /v1/trajectories`: a page of current trajectories, filtered (ui/params.py TRAJECTORY_LIST), newest first,
  with `next_cursor` (pages at one pinned version never repeat or skip a row);
* `GET /v1/trajectories/{trajectory_id}`: one trajectory's current row, every column, messages as objects and
  tool-call arguments parsed; 404 when no such trajectory is in the lake at the pin;
* `GET /v1/versions`: every table's version and newest commits; `GET /v1/runs`: the runs table's rows;
* `GET /v1/runs/{run_id}`: one run, its related runs (increments, evaluations), episodes and served versions;
* `GET /v1/skills`: current skills with usage, the skill_effect view, skill_to_instruction's selection;
* `GET /v1/views`, `GET /v1/views/{name}`: the views of views/*.sql, and the rows one yields at a pin;
* `GET /v1/loop`: success rate and mean reward by policy_version (the loop page's table).

Every answer names the versions it read. A bad parameter is a 400 of one line naming it; no route writes.
"""
from __future__ import annotations

from typing import Any, Callable

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response

from transcript.messages import arguments_object
from ui import params as P
from ui.conversation import valid_text
from ui.params import ParamError, read_params
from ui.reader import LakeReader, QueryLimit


def json_response(obj: Any, status: int = 200) -> Response:
    """JSON (times as RFC 3339, non-string keys allowed: a struct's map)."""
    return Response(orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS, default=str), status_code=status,
                    media_type="application/json")


def answered(fn: Callable[[], Any]) -> Response:
    """fn()'s value as JSON; a ParamError a 400 naming its parameter, a query past the time or memory limit a 400
    too (an expensive filter is the request's, not the server's)."""
    try:
        return json_response(fn())
    except ParamError as exc:
        return json_response(exc.body(), 400)
    except QueryLimit as exc:
        return json_response({"detail": str(exc), "param": "where"}, 400)


def with_arguments(row: dict[str, Any]) -> dict[str, Any]:
    """The row with each tool call's arguments as the object they encode (text that is not JSON stays text; a lone
    surrogate a JSON escape encodes is U+FFFD, which JSON can carry: ui.conversation.valid_text)."""
    for m in row.get("messages") or []:
        for c in (m or {}).get("tool_calls") or []:
            c["arguments"] = valid_text(arguments_object(c.get("arguments")))
    return row


def api_router(reader: LakeReader) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["read"])

    @router.get("/trajectories", summary="A page of trajectories, filtered",
                openapi_extra=P.openapi_parameters(P.TRAJECTORY_LIST))
    def trajectories(request: Request) -> Response:
        """The current row of each trajectory (late rewards applied), newest first: `rows` (without messages),
        `versions` read, `next_cursor` (null on the last page)."""
        return answered(lambda: reader.trajectories(read_params(request.query_params.multi_items(),
                                                                P.TRAJECTORY_LIST)))

    @router.get("/trajectories/{trajectory_id:path}", summary="One trajectory, every column",
                openapi_extra=P.openapi_parameters(P.PINNED))
    def trajectory(trajectory_id: str, request: Request) -> Response:
        """The current row of `trajectory_id` with its messages (tool-call arguments parsed), steps and rewards;
        404 when the lake holds no such trajectory at the pin."""
        def one() -> Any:
            q = read_params(request.query_params.multi_items(), P.PINNED)
            row, versions = reader.trajectory(trajectory_id, q["as_of"])
            if row is None:
                return None, versions
            return with_arguments(row), versions

        try:
            row, versions = one()
        except ParamError as exc:
            return json_response(exc.body(), 400)
        except QueryLimit as exc:  # a lookup by id takes no filter of the client's: the server is busy
            return json_response({"detail": f"the lake could not answer ({exc}): try again"}, 503)
        if row is None:
            return json_response({"detail": f"no trajectory {trajectory_id[:200]!r} in the lake at these versions",
                                  "versions": versions}, 404)
        return json_response({"trajectory": row, "versions": versions})

    @router.get("/versions", summary="Every table's version and newest commits",
                openapi_extra=P.openapi_parameters(P.VERSIONS))
    def versions(request: Request) -> Response:
        """What an `as_of` can pin: each table's latest version and its newest `limit` commits."""
        return answered(lambda: reader.versions(read_params(request.query_params.multi_items(), P.VERSIONS)["limit"]))

    @router.get("/runs", summary="The runs table's rows", openapi_extra=P.openapi_parameters(P.RUN_LIST))
    def runs(request: Request) -> Response:
        """Training runs, increments, evaluations and the queue's records, newest first, with `next_cursor`."""
        return answered(lambda: reader.runs(read_params(request.query_params.multi_items(), P.RUN_LIST)))

    @router.get("/runs/{run_id:path}", summary="One run: its events, related runs, episodes and served versions",
                openapi_extra=P.openapi_parameters(P.PINNED))
    def run(run_id: str, request: Request) -> Response:
        """Every event of `run_id` (oldest first), the runs the lake records as related to it (`relation`:
        increment, evaluation), its evaluation episodes (at most 200; `episodes_total`) and the versions served
        from its weights; 404 when the lake holds no such run at the pin."""
        try:
            data = reader.run(run_id, read_params(request.query_params.multi_items(), P.PINNED)["as_of"])
        except ParamError as exc:
            return json_response(exc.body(), 400)
        if not data["events"]:
            return json_response({"detail": f"no run {run_id[:200]!r} in the lake at these versions",
                                  "versions": data["versions"]}, 404)
        return json_response(data)

    @router.get("/skills", summary="Skills, their usage and effect, and what skill_to_instruction would pick",
                openapi_extra=P.openapi_parameters(P.SKILLS))
    def skills(request: Request) -> Response:
        """`skills` (current, with usage), `effect` (the skill_effect view's rows), `selection` (what
        `skill_to_instruction --lake` would pick with `min_uses` and `provenance`: its candidates, funnel and why
        none), at one pin."""
        def get() -> Any:
            q = read_params(request.query_params.multi_items(), P.SKILLS)
            return reader.skills(q["as_of"], q["min_uses"], q["provenance"])
        return answered(get)

    @router.get("/views", summary="The views of views/*.sql")
    def views() -> Response:
        """Each view's name, kind (dataset or helper) and description, as `lake views` lists them."""
        return json_response({"views": reader.views()})

    @router.get("/views/{name}", summary="The rows a view yields at one pin",
                openapi_extra=P.openapi_parameters(P.VIEW))
    def view(name: str, request: Request) -> Response:
        """The view's first `limit` rows (20 by default) in its declared order, `total` rows, `columns`, and
        `error` when it does not bind on this lake; 404 for a name that is no view."""
        try:
            q = read_params(request.query_params.multi_items(), P.VIEW)
            v = reader.view(name, q["as_of"], q["limit"])
        except ParamError as exc:
            return json_response(exc.body(), 400)
        except QueryLimit as exc:
            return json_response({"detail": str(exc), "param": "as_of"}, 400)
        if v is None:
            return json_response({"detail": f"no view {name[:200]!r} in views/*.sql"}, 404)
        return json_response(v)

    @router.get("/loop", summary="Success rate and mean reward by policy_version",
                openapi_extra=P.openapi_parameters(P.PINNED))
    def loop(request: Request) -> Response:
        """One row per policy_version over the trajectories' current rows (late rewards applied), in the order the
        versions first appeared: counts, success rate, mean reward, first and last ingestion; `split`: the same per
        kind (evaluation, served, other); `increments`: the training events the loop's chart marks."""
        return answered(lambda: reader.loop(read_params(request.query_params.multi_items(), P.PINNED)["as_of"]))

    return router
