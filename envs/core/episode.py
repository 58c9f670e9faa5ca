"""Playing an episode: a scripted policy through an environment, recorded by the message model's recorder
(transcript/recorder.py, whose rules every writer of trajectories follows), and played again when the environment,
not the policy, failed.

`play(env, policy, ...)` is the recorder's loop for a scripted policy; `play_retrying` replays a faulted episode
from its reset; `policy_record` is one episode as a trajectory record (`lake rollout`, the demo's rollouts,
trainers' scripted rollouts).
"""
from __future__ import annotations

from envs.core.contract import EnvironmentFault, ResetOptions
from envs.core.policies import Policy
from transcript.recorder import EpisodeRecorder


def play(env, policy: Policy, *, seed: int | None = None, options: ResetOptions | None = None) -> EpisodeRecorder:
    """One episode of a scripted policy, recorded."""
    observation, info = env.reset(seed=seed, options=options)
    policy.reset(info)
    rec = EpisodeRecorder(observation, info)
    while not rec.done:
        action = policy.act(observation, rec.messages)
        observation, reward, terminated, truncated, step_info = env.step(action)
        rec.add_step(action, observation, reward, terminated, truncated, step_info)
    return rec


EPISODE_TRIES = 3  # plays of one episode whose environment failed (EnvironmentFault) before it is given up


class EpisodeLost(EnvironmentFault):
    """Every try of an episode failed at reset: there is no episode to record (the message names the last fault)."""


def play_retrying(env, policy: Policy, *, seed: int | None = None, options: ResetOptions | None = None,
                  tries: int = EPISODE_TRIES) -> EpisodeRecorder:
    """`play`, played again from its reset when the environment failed (an EnvironmentFault at reset, or a final
    info naming a `fault`), up to `tries` plays. The same seed and task each time, so a scripted policy plays the
    same episode. After the last try: the faulted episode as it ended (a failure whose final info names the fault),
    or EpisodeLost when no reset succeeded."""
    last: EpisodeRecorder | None = None
    reason = ""
    for _ in range(max(1, tries)):
        try:
            rec = play(env, policy, seed=seed, options=options)
        except EnvironmentFault as exc:
            reason = str(exc)
            continue
        fault = (rec.final or {}).get("fault")
        if not fault:
            return rec
        last, reason = rec, fault
    if last is None:
        raise EpisodeLost(f"{max(1, tries)} tries failed; the last: {reason}")
    return last


def policy_record(env, policy: Policy, *, seed: int, options: ResetOptions, source: str,
                  group_id: str | None = None, trajectory_id: str | None = None,
                  tries: int = EPISODE_TRIES) -> dict:
    """`play_retrying` then `record`, with the policy's kind as model and version and its notes as metadata (and
    the fault, when every try of the episode failed in the environment)."""
    rec = play_retrying(env, policy, seed=seed, options=options, tries=tries)
    meta = dict(policy.notes())
    fault = (rec.final or {}).get("fault")
    if fault:
        meta["fault"] = fault
    return rec.record(model=f"policy:{policy.kind}", policy_version=policy.kind, source=source, group_id=group_id,
                      seed=seed, metadata=meta, trajectory_id=trajectory_id)
