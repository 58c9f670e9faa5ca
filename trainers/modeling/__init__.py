"""Models and what is done with them in one forward pass: the chat template, loading (tiny, SmolLM2, any local
folder), freezing, the policy (base + adapter), batches of tokenised conversations and the forward-pass helpers.
Imports the lake, views and ingest never."""
