"""The HTTP edge both servers stand on (`lake serve`: ingest/, `lake serve-model`: serving/), below both of them:

* options.py: `ServerOptions`, the options both servers take alike with one help text each (their configs derive
  from it), `HttpLimits` and the light helpers of sizes (MiB, inflate_limit) and addresses (is_loopback);
* tokens.py: the bearer tokens (`Tokens`, the --token-file grammar, `resolve_tokens`, `auth_summary`);
* guards.py: what every request passes before a route sees it (the Host check, the token, same-origin, a JSON
  content type, the body read within its limits and parsed), typed against `ServerState`, the Protocol of what they
  read of a server's state;
* limits.py: uvicorn's protocol with the HTTP limits, and `uvicorn_config`; listen.py: `bind_socket`;
* errors.py: `BadInput` / `TooLarge` (a 4xx, or a rejected file) and `OptionError`; lake_errors.py: a lake write that
  failed, told to the client (a 503: `LakeWriteFailed`, `store_failure`) and to the log (`log_line`).

Of ours it may import the ground and the lake (for the lake's error types) and nothing else: the contract
`edge-below-servers` in pyproject.toml (and `serving-not-ingest`: what both servers share is here, not in ingest/).
fastapi, starlette and uvicorn are imported only by guards.py and limits.py, so the CLI builds the servers' options
from options.py without them.
"""
