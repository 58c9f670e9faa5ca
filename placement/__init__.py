"""Where a command's work runs beyond its own process: a Ray cluster (placement/ray_cluster.py). Optional: without
Ray (`pip install 'lachesis[ray]'`) every command runs as it does in one process, and `--ray` says what to install.
Imports nothing of ours but the ground (the `placement-bottom` contract), so the rollout runner (ingest) and the
trainers both stand on it."""
