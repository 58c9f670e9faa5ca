"""The message model every wing shares, below envs, ingest, serving and trainers (it imports nothing of ours).

- toolcalls: the tool-call format of a reply (`ToolCallFormat`; Hermes' `<tool_call>` blocks by default): the one
  parser (`parse_tool_calls`) and writer (`format_tool_call`) of a call, and the JSON bounds of text read as JSON.
- messages: one role map, one normaliser to the lake's message struct, the play form a chat template reads.
- trajectory_row: the one builder of a row of the lake's trajectories table.
- recorder: an episode's turns as a trajectory record (`EpisodeRecorder`), the rules every writer follows.
"""
