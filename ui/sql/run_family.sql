-- The runs the lake records as related to one run (its page's lineage and evaluations), each with `relation`:
--   'increment': an event of the same streaming trainer (metadata.serial = $serial: `lake train watch` writes one
--                runs event per increment, run_id `<serial>-inc-<N>`, metadata.increment N);
--   'evaluation': an eval run that names the run as metadata.train_run_id (online RL's evaluations), or that
--                evaluated weights the run wrote (adapter_path among $adapters: hermes_eval --adapter, the
--                watcher's evaluations of its increments).
-- A run is never its own relation. Oldest first. $serial NULL and $adapters empty: no rows but the trainer's evals.
WITH r AS (
    SELECT
        *,
        json_extract_string(metadata, '$.serial') AS serial,
        json_extract_string(metadata, '$.train_run_id') AS train_run_id
    FROM runs
)
SELECT
    CASE WHEN kind = 'eval' THEN 'evaluation' ELSE 'increment' END AS relation,
    run_id, kind, status, model, adapter_path, config, metrics, manifest, metadata, event_id, occurred_at, ingested_at
FROM r
WHERE run_id <> $run_id
  AND ((kind <> 'eval' AND $serial::VARCHAR IS NOT NULL AND serial = $serial)
       OR (kind = 'eval' AND (train_run_id = $run_id OR list_contains($adapters::VARCHAR[], adapter_path))))
ORDER BY ingested_at, event_id
