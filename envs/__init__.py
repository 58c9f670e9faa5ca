"""Lachesis environments: gymnasium text environments with seeded task suites and a real sandbox.

Imports gymnasium, orjson and the stdlib only (no torch, nothing else of Lachesis), so it works on its own.

    import envs
    env = envs.make("bash_exec_env", split="test")       # or an alias ("shell"), tasks="my_tasks.jsonl", max_steps=6
    obs, info = env.reset(seed=0)                         # info: a ResetInfo (task_id, split, env, tags, tools, ...)
    obs, reward, terminated, truncated, info = env.step('<tool_call>{"name": "run", ...}</tool_call>')
    record = envs.policy_record(env, envs.get_policy("bash_exec_env", "expert"), seed=0,
                                options={"index": 0}, source="me")   # one episode as a trajectory record
    env = envs.make("python_debug_env", reward_weights=envs.RewardWeights(well_formed_call_bonus=0.05))
"""
from __future__ import annotations

from envs.core.contract import ResetInfo, ResetOptions, StepInfo
from envs.core.episode import play, policy_record
from envs.core.policies import KINDS as POLICY_KINDS, Policy, make_policy
from envs.core.registry import (UnknownEnvironmentError, UnknownTagError, aliases, all_tags, env_info, make,
                                register_environment, resolve_name, unregister)
from envs.core.rewards import RewardWeights
from envs.core.suites import builtin_suite, find_task, list_environments, load_tasks, reply_tokens
from envs.core.tasks import SPLITS, Task, TaskFileError, load_tasks_file
from transcript.recorder import EpisodeRecorder
from transcript.toolcalls import ParsedAction, ToolCall, format_tool_call, parse_tool_calls

__all__ = [
    "make", "list_environments", "register_environment", "unregister", "resolve_name", "aliases", "load_tasks",
    "load_tasks_file", "find_task", "parse_tool_calls", "format_tool_call", "get_policy", "Policy", "POLICY_KINDS",
    "SPLITS", "Task", "TaskFileError", "ToolCall", "ParsedAction", "all_tags", "env_info", "UnknownEnvironmentError",
    "UnknownTagError", "builtin_suite", "ResetInfo", "ResetOptions", "StepInfo", "EpisodeRecorder", "play",
    "policy_record", "RewardWeights", "reply_tokens",
]

register_environment(
    "python_debug_env", "envs.families.python_debug:PythonDebugEnv", tags=["python", "debug", "code"],
    aliases=["debug-python", "python-debug", "python"],
    description="Fix the bug in a small Python module; reward = fraction of hidden tests passing.")
register_environment(
    "bash_exec_env", "envs.families.bash_exec:BashExecEnv", tags=["shell", "bash"], aliases=["shell", "bash"],
    description="Shell tasks over a prepared directory tree: create, find, count, transform, archive.")
register_environment(
    "git_repo_env", "envs.families.git_repo:GitRepoEnv", tags=["shell", "git"], aliases=["git"],
    description="Git tasks on a scripted repository: commit, branch, merge, conflicts, revert, "
                "cherry-pick, bisect, recover a branch.")
register_environment(
    "web_form_env", "envs.web.env:WebFormEnv", tags=["web"], aliases=["web-form", "web"],
    description="MiniWoB++ forms and widgets in headless Chromium: click, type, select, press; "
                "reward = MiniWoB's verdict.")
register_environment(
    "web_click_env", "envs.web.env:WebClickEnv", tags=["web"], aliases=["web-click"],
    description="web_form_env's click tasks (14 + 2 held out): find the named button, link, tab or box and "
                "click it.")
register_environment(
    "web_fill_env", "envs.web.env:WebFillEnv", tags=["web"], aliases=["web-fill"],
    description="web_form_env's field tasks (11 + 4 held out): type, pick and submit the values asked for.")
register_environment(
    "web_gen_env", "envs.web.generated.env:WebGenEnv", tags=["web"], aliases=["web-gen"],
    description="Generated web forms (unlimited seeds): find each field by its label in varied layouts, widgets, "
                "tabs, sections and popups; reward = the form's verdict.")

register_environment(
    "web_mix_env", "envs.web.mix:WebMixEnv", tags=["web"], aliases=["web-mix"],
    description="web_form_env's MiniWoB tasks with generated forms (4 layouts) mixed into the train split; "
                "test and held-out splits are web_form_env's own.")


def get_policy(env_name: str, kind: str, seed: int = 0) -> Policy:
    """A scripted policy: "expert" (reference solution), "noisy" (realistic mistakes) or "random"."""
    name = resolve_name(env_name)
    if "web" in env_info(name).tags:  # web experts read the page each turn instead of replaying a fixed solution
        from envs.web.experts import make_web_policy
        return make_web_policy(name, kind, seed)
    return make_policy(name, kind, seed)
