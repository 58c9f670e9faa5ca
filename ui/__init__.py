"""The read-only web UI over the lake and the read API its pages use (`lake ui`, and `lake serve` beside its own
routes), by job:

* config.py: `UiConfig`, the options of `lake ui` (edge's ServerOptions plus the query time limit);
* params.py: the query parameters of the read API and the pages, parsed once (a bad one is a `ParamError` naming
  it), the `as_of` pin (lake/as_of.py's spellings, never a file path) and the opaque keyset cursor;
* reader.py: `LakeReader`, every query the UI runs, on a read-only snapshot (lake.Lake.snapshot(read_only=True),
  the path `lake sql` takes), from the SQL files in sql/, within a time limit;
* conversation.py: a trajectory row as the turns a page shows (tool calls split by transcript's one parser);
* api.py: the JSON routes under /v1 (trajectories, one trajectory, versions, runs, loop); pages.py: the HTML pages
  under /ui (overview, trajectories, conversation, runs, loop; jinja2 templates in templates/, autoescaped, served
  with a Content-Security-Policy without inline scripts);
* login.py: the browser's login for a server with a token (a form that sets the token as a cookie edge's guard
  takes on page reads only) and its logout;
* routes.py: `ui_router(lake_root, ...)`, both, for `lake serve` (ingest/app.py takes extra routers) and `lake ui`;
* app.py: `lake ui` alone: the same router behind edge's guards (Host check, token) and HTTP limits.

No route writes. Of ours it imports the ground, the lake, the views' SQL (as data, through the snapshot), edge and
transcript only, and nothing but the face (lachesis) imports it: the contract `ui-on-lake-views` in pyproject.toml.
"""
