"""`lake serve-model`: the trained policy behind an OpenAI-compatible API (serving/app.py), every call recorded in
the lake.

Options are fields of ServeModelConfig (default and help from there; what it shares with `lake serve`, the HTTP
limits included, from edge/options.py's ServerOptions), generated as every config command's are. A bad option, model, adapter or followed
folder is one line on stderr, exit 2, before the port is bound. The token comes from --token-file, LACHESIS_TOKEN
(or LAKE_TOKEN) or --token, as for `lake serve`.
"""
from __future__ import annotations

import os

import typer

from edge.options import HTTP_LIMIT_OPTIONS
from edge.tokens import auth_summary
from lachesis.console import config_command, fail
from serving.access_log import log
from serving.config import ServeModelConfig

SERVE_MODEL_OPTIONS = [
    ("model", "--model"), ("adapter", "--adapter"), ("follow", "--follow"),
    ("promote_if_better", "--promote-if-better"), ("keep_versions", "--keep-versions"),
    ("served_name", "--served-name"), ("engine", "--engine"), ("vllm_url", "--vllm-url"),
    ("vllm_python", "--vllm-python"), ("vllm_dtype", "--vllm-dtype"), ("vllm_max_lora_rank", "--vllm-max-lora-rank"),
    ("vllm_args", "--vllm-args"), ("host", "--host"), ("port", "--port"),
    ("token", "--token"), ("token_file", "--token-file"), ("allowed_hosts", "--allowed-hosts"),
    ("lake_root", "--lake"), ("record", "--record"), ("no_record", "--no-record"), ("record_queue", "--record-queue"),
    ("compact_interval", "--compact-interval"),
    ("batch_window_ms", "--batch-window-ms"), ("max_batch", "--max-batch"), ("max_batch_tokens", "--max-batch-tokens"),
    ("max_tokens", "--max-tokens"),
    ("default_max_tokens", "--default-max-tokens"), ("kv_cache_tokens", "--kv-cache-tokens"),
    ("context", "--context"), ("poll_interval", "--poll-interval"),
    ("max_body_mb", "--max-body-mb"), ("max_messages", "--max-messages"), ("seed", "--seed"), ("threads", "--threads"), ("device", "--device"),
    ("chat_template", "--chat-template"), ("log_level", "--log-level"), ("quiet", "--quiet"),
    ("limits", HTTP_LIMIT_OPTIONS),  # lake serve's HTTP limits: the same options, defaults and help
]


def _serve_model(values: dict, as_json: bool, quiet: bool) -> None:
    from serving.app import serve

    if values["token"]:
        print("warning: --token shows in `ps` to every user of this machine; pass it as LACHESIS_TOKEN or "
              "--token-file")
    elif not values["token_file"]:
        values["token"] = os.environ.get("LACHESIS_TOKEN") or os.environ.get("LAKE_TOKEN") or None
    cfg = ServeModelConfig(**values, quiet=quiet)  # --quiet: the command's own flag, this field
    if not cfg.token and not cfg.loopback:
        print(f"WARNING: lake serve-model listens on {cfg.host}, beyond this machine, WITHOUT A TOKEN: anyone who "
              f"can reach port {cfg.port} can use the model and write calls into the lake. Set LACHESIS_TOKEN or "
              "--token-file.")

    def ready(engine) -> None:
        log(f"ready at http://{cfg.host}:{cfg.port}/v1 serving "
              f"{', '.join(v.name for v in engine.versions())} (a request for {engine.label!r} gets the newest) "
              f"record={cfg.record} {auth_summary(cfg.tokens)}")

    try:
        serve(cfg, on_ready=ready)
    except OSError as exc:  # the port is taken, the address is not ours
        fail(f"cannot listen on {cfg.host}:{cfg.port}: {exc.strerror or exc}")


def register(app: typer.Typer) -> None:
    app.command("serve-model", help="Serve the trained policy over the OpenAI API (chat completions with tools and "
                                    "streaming, completions, models); every call recorded in the lake; --follow swaps "
                                    "in each new increment of a streaming trainer.")(
        config_command(ServeModelConfig, SERVE_MODEL_OPTIONS, _serve_model, output_options=False))

