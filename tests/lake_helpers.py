"""Record builders and queries shared by the lake tests."""
from __future__ import annotations


def scalar(root, sql: str):
    """The first value of `sql` on a fresh snapshot of the lake at `root`."""
    from lake import Lake

    with Lake(root).snapshot() as snap:
        return snap.sql(sql).fetchall()[0][0]


def trajectory(i: int, **extra) -> dict:
    return {
        "trajectory_id": f"traj-{i}",
        "task_id": f"task-{i % 7}",
        "env": "bash_exec_env",
        "messages": [
            {"role": "user", "content": f"count the lines of file{i}.txt"},
            {"role": "assistant", "content": "",
             "tool_calls": [{"id": "c1", "name": "run", "arguments": {"command": f"wc -l < file{i}.txt"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": str(i)},
        ],
        "reward": (i % 10) / 10,
        "success": i % 10 == 9,
        **extra,
    }
