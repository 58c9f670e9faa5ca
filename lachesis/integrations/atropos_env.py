"""Any registered Lachesis environment as an Atropos environment: a `BaseEnv` subclass (atroposlib 0.4.0).

Why: Atropos users run environments as processes that post scored groups to a trajectory API (`run-api`, or
our `lake serve`, which keeps them) and let a trainer pull batches from /batch. This class makes each of our
environments (sandbox, seeded suites, hidden-test graders) such a process with Atropos' own CLI, config
namespaces and wire format (docs/atropos-api.md sections 3, 5 and 8), nothing of ours in between.

    PYTHONPATH=. $ATROPOS_PYTHON -m lachesis.integrations.atropos_env serve \\
        --env.environment bash_exec_env --env.tokenizer_name NousResearch/Hermes-3-Llama-3.1-8B \\
        --env.rollout_server_url http://localhost:8000 --openai.base_url http://localhost:9001/v1 ...

An item is a task id of `--env.split` (in suite order, resumed from the env checkpoint); a group is
`group_size` episodes of that task. Each episode runs the environment turn after turn: the action comes from
the inference server (`--env.policy model`: a completion of the conversation rendered by the tokenizer's chat
template, tools included) or from one of our scripted policies (`expert`, `noisy`, `random`: no server, e.g.
to fill a lake or test a pipeline). The score is the episode's return (the sum of the environment's rewards);
`tokens` are the whole conversation as the chat template renders it and `masks` keep the assistant turns'
tokens (every turn, Atropos' train_on_all_assistant_turns convention; MASKED elsewhere). `messages` are the
episode recorder's (transcript/recorder.py), sent when `--env.include_messages`. The group's `desired_name` (its
wandb_name) is the environment's name, so `lake serve` files the trajectories under that env.

Known limits: with `--env.policy model` the tokens are the re-tokenized text of the completion, not the
server's own token ids, and no inference logprobs are sent.

Import only under a Python that has atroposlib (lachesis/integrations/__init__.py).
"""
from __future__ import annotations

import asyncio
import time
import zlib
from typing import Optional

from atroposlib.envs.base import BaseEnv, BaseEnvConfig, ScoredDataGroup
from atroposlib.envs.server_handling.server_baseline import ServerBaseline
from pydantic import Field

import envs
from envs.core.base import ToolEnv
from trainers.modeling.chat import render
from trainers.modeling.token_columns import MASKED
from transcript.recorder import EpisodeRecorder

POLICIES = ("model", *envs.POLICY_KINDS)


class LachesisEnvConfig(BaseEnvConfig):
    """BaseEnvConfig plus which environment to serve and who acts in it (`--env.<field>` on the CLI)."""

    environment: str = Field(default="bash_exec_env",
                             description="a registered Lachesis environment or alias (rl_list_environments)")
    split: str = Field(default="train", description="the tasks to serve: train or test")
    tasks: Optional[str] = Field(default=None, description="a task file (JSONL) instead of the built-in suite")
    max_steps: int = Field(default=6, description="turns per episode before the environment truncates it")
    policy: str = Field(default="model", description="model: the inference server (--openai.*); expert, noisy or "
                                                     "random: a scripted policy, no server")
    max_tokens_per_turn: int = Field(default=512, description="tokens the model may write per turn")
    temperature: float = Field(default=1.0, description="sampling temperature of the model's turns")
    eval_tasks: int = Field(default=16, description="test-split tasks evaluate() plays, one episode each (0: none)")


def tokens_and_masks(tok, messages: list[dict], tools: list[dict] | None) -> tuple[list[int], list[int]]:
    """The conversation's token ids as the chat template renders it, and Atropos masks: the token id on every
    assistant turn's tokens (what that turn adds to the rendering), MASKED (trainers/modeling/token_columns.py)
    elsewhere."""

    def ids(msgs: list[dict], generation_prompt: bool) -> list[int]:
        return list(tok.apply_chat_template(msgs, tools=tools, tokenize=True, return_dict=False,
                                            add_generation_prompt=generation_prompt))

    full = ids(messages, False)
    masks = [MASKED] * len(full)
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        start = len(ids(messages[:i], True))
        upto = ids(messages[: i + 1], False)
        if full[: len(upto)] != upto:
            raise ValueError("the chat template does not render a conversation as its turns appended one after "
                             "another: assistant tokens cannot be masked")
        masks[start: len(upto)] = upto[start:]
    return full, masks


class LachesisEnv(BaseEnv):
    """Serves `config.environment`; see the module docstring."""

    name = "lachesis"
    env_config_cls = LachesisEnvConfig

    def __init__(self, config: LachesisEnvConfig, server_configs, slurm: bool = False, testing: bool = False):
        if config.policy not in POLICIES:
            raise ValueError(f"unknown --env.policy {config.policy!r}; policies: {', '.join(POLICIES)}")
        config.environment = envs.resolve_name(config.environment)
        if config.wandb_name in (None, self.name):  # the CLI defaults it to the class name
            config.wandb_name = config.environment  # desired_name: the env the lake files the groups under
        super().__init__(config, server_configs, slurm, testing)
        self.next_index = 0  # the next task of the split (saved in the env checkpoint)
        self._suite = None
        self._returns: list[float] = []
        self._successes: list[bool] = []

    @classmethod
    def config_init(cls) -> tuple[LachesisEnvConfig, ServerBaseline]:
        return LachesisEnvConfig(), ServerBaseline()

    def _make(self, split: str | None = None):
        kwargs = {"split": split or self.config.split, "max_steps": self.config.max_steps}
        if self.config.tasks:
            kwargs["tasks"] = self.config.tasks
        env = envs.make(self.config.environment, **kwargs)
        if not isinstance(env.unwrapped, ToolEnv):
            env.close()
            raise ValueError(f"{self.config.environment} is not a tool environment (envs.core.base.ToolEnv)")
        return env

    async def setup(self):
        env = self._make()
        self._suite = env.unwrapped.suite
        env.close()
        if self._suite.count(self.config.split) == 0:
            raise ValueError(f"{self.config.environment}: no {self.config.split} tasks")

    async def get_next_item(self) -> str:
        split = self.config.split
        task = self._suite.task(split, self.next_index % self._suite.count(split))
        self.next_index += 1
        return task.task_id

    def save_checkpoint(self, step, data=None):
        super().save_checkpoint(step, {"next_index": self.next_index} if data is None else data)

    async def _action(self, rec: EpisodeRecorder, policy, observation: str) -> str | None:
        """The next action: the scripted policy's, or the model's completion (None: no room left in the context)."""
        if policy is not None:
            return policy.act(observation, rec.messages)
        prompt = render(self.tokenizer, rec.messages, rec.info["tools"], add_generation_prompt=True)
        used = len(self.tokenizer(prompt, add_special_tokens=False)["input_ids"])
        room = min(self.config.max_tokens_per_turn, self.config.max_token_length - used)
        if room <= 0:
            return None
        completion = await self.server.completion(prompt=prompt, n=1, max_tokens=room,
                                                  temperature=self.config.temperature,
                                                  stop=[self.tokenizer.eos_token])
        return completion.choices[0].text

    async def _episode(self, task_id: str, member: int, split: str | None = None) -> EpisodeRecorder:
        """One episode of the task, the environment's blocking calls in a thread (the event loop keeps polling)."""
        env = await asyncio.to_thread(self._make, split)
        try:
            seed = zlib.crc32(f"{task_id}#{member}".encode())
            observation, info = await asyncio.to_thread(env.reset, seed=seed, options={"task_id": task_id})
            policy = None
            if self.config.policy != "model":
                policy = envs.get_policy(self.config.environment, self.config.policy, seed=seed)
                policy.reset(info)
            rec = EpisodeRecorder(observation, info)
            while not rec.done:
                action = await self._action(rec, policy, observation)
                if action is None:
                    rec.stop()
                    break
                observation, reward, terminated, truncated, step_info = await asyncio.to_thread(env.step, action)
                rec.add_step(action, observation, reward, terminated, truncated, step_info)
            return rec
        finally:
            await asyncio.to_thread(env.close)

    async def collect_trajectories(self, item: str) -> tuple[ScoredDataGroup, list]:
        recs = await asyncio.gather(*(self._episode(item, k) for k in range(self.config.group_size)))
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], advantages=None, ref_logprobs=None,
                                messages=[] if self.config.include_messages else None, group_overrides={},
                                overrides=None, images=None)
        for rec in recs:
            tokens, masks = tokens_and_masks(self.tokenizer, rec.messages, rec.info["tools"])
            group["tokens"].append(tokens)
            group["masks"].append(masks)
            group["scores"].append(rec.reward)
            if self.config.include_messages:
                group["messages"].append(rec.messages)
            self._returns.append(rec.reward)
            self._successes.append(rec.success)
        return group, []

    async def evaluate(self, *args, **kwargs):
        """One episode on each of the first `eval_tasks` test tasks; mean reward and success rate."""
        n = min(self.config.eval_tasks, self._suite.count("test"))
        if n == 0:
            return
        start = time.time()
        ids = [self._suite.task("test", i).task_id for i in range(n)]
        recs = await asyncio.gather(*(self._episode(t, 0, split="test") for t in ids))
        metrics = {"eval/mean_reward": sum(r.reward for r in recs) / n,
                   "eval/success_rate": sum(r.success for r in recs) / n}
        samples = [{"task_id": t, "reward": r.reward, "success": r.success, "messages": r.messages}
                   for t, r in zip(ids, recs)]
        await self.evaluate_log(metrics=metrics, task_name=self.config.environment, start_time=start,
                                end_time=time.time(), samples=samples, verbose=False)

    async def wandb_log(self, wandb_metrics: Optional[dict] = None):
        wandb_metrics = dict(wandb_metrics or {})
        if self._returns:
            wandb_metrics["train/mean_return"] = sum(self._returns) / len(self._returns)
            wandb_metrics["train/success_rate"] = sum(self._successes) / len(self._successes)
            self._returns, self._successes = [], []
        await super().wandb_log(wandb_metrics)


if __name__ == "__main__":
    LachesisEnv.cli()
