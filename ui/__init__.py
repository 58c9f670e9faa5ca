"""The read-only web UI over the lake and the read API its pages use (`lake ui`, and `lake serve` beside its own
routes), by job:

* config.py: `UiConfig`, the options of `lake ui` (edge's ServerOptions, the query time limit, --runs, --exports,
  --screenshots);
* params.py: the query parameters of the read API and the pages, parsed once (a bad one is a `ParamError` naming
  it), the `as_of` pin (lake/as_of.py's spellings, never a file path) and the opaque keyset cursor;
* reader.py: `LakeReader`, every query the UI runs, on a read-only snapshot (lake.Lake.snapshot(read_only=True),
  the path `lake sql` takes), from the SQL files in sql/, within a time limit; the trajectory index (the narrow
  columns of every current trajectory, built once per pin and held in memory) that the list, the loop and a run's
  page read, and the skills page's answers kept per pin;
* conversation.py: a trajectory row as the turns a page shows (tool calls split by transcript's one parser), within
  a page's bounds (turns, steps, characters: what is cut says so);
* heat.py: a row's per-token log-probs as the conversation's heat strip (classes, no style attribute) and its
  summary; screenshots.py: a web episode's screenshot, served only from inside `lake ui --screenshots`;
  export_index.py: which exports of `lake ui --exports` hold a trajectory (their id columns read once, kept);
* charts.py: line charts drawn on the server as inline SVG (templates/chart.jinja; no script);
  runview.py: a run's page (config, loss and evaluation curves, lineage, evaluations) and the loop's chart;
  runfiles.py: a run folder's train_log.jsonl, read only inside `lake ui --runs`;
* api.py: the JSON routes under /v1 (trajectories, one trajectory, versions, runs, one run, skills, views, loop);
  pages.py: the HTML pages under /ui (overview, trajectories, conversation, runs, a run, loop, skills, views, a
  view; jinja2 templates in templates/, autoescaped, served with a Content-Security-Policy without any script);
* login.py: the browser's login for a server with a token (a form that sets the token as a cookie edge's guard
  takes on page reads only), rate-limited by address (edge/attempts.py), and its logout;
* exports.py: the views page's export button (off unless `lake ui --exports`): the same export as `lake export`,
  into a new folder outside the lake, behind a CSRF token bound to the login cookie;
* routes.py: `ui_router(lake_root, ...)`, all of it, for `lake serve` (ingest/app.py takes extra routers) and
  `lake ui`; app.py: `lake ui` alone: the same router behind edge's guards (Host check, token) and HTTP limits.

No route writes into the lake; the one route that writes at all is the export button's, into `--exports`. The
files read outside the lake are only inside the folders the server was given (--runs, --exports, --screenshots). Of ours
it imports the ground, the lake, the views (their SQL, the export and skill_to_instruction's selection), edge and
transcript only, and nothing but the face (lachesis) imports it: the contract `ui-on-lake-views` in pyproject.toml.
"""
