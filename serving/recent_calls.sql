-- The conversations `lake serve-model` answered most recently, newest first: what prefix matching starts from after
-- a restart (serving/record.py), each within the client identity that made it. One row per call; the parameter
-- bounds how many.
SELECT trajectory_id, messages, CAST(json_extract(metadata, '$.call') AS BIGINT) AS call,
       json_extract_string(metadata, '$.client') AS client
FROM trajectories
WHERE json_extract_string(metadata, '$.source') = 'lake serve-model'
  AND json_extract_string(metadata, '$.endpoint') = 'chat.completions'
ORDER BY occurred_at DESC, event_id DESC
LIMIT ?
