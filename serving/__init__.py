"""The model server (`lake serve-model`): the trained policy behind an OpenAI-compatible API, every call recorded
in the lake, a streaming trainer's increments swapped in as they land (docs/serving.md).

Entry points: `serving.config.ServeModelConfig` (the options), `serving.app.create_app(config)` /
`serving.app.serve(config)`, `serving.app.load_engine(config)` (the engine with its first version, and the
follower of --follow). Imports trainers, edge (the HTTP edge shared with `lake serve`: guards, body limits, tokens,
the options both servers share), lake and envs, never ingest (contract `serving-not-ingest`); imported only by
lachesis/ (import-linter contract `serving-on-top`).
"""
