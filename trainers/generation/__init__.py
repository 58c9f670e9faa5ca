"""The one generation path (batched, shared prefix, KV cache kept across turns), episodes of a model in an
environment and `play`, and scripted-policy rollouts. Imports the lake, views and ingest never."""
