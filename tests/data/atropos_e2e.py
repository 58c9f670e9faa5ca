"""Real atroposlib 0.4.0 clients for tests/test_server_atropos.py (run with a Python that has atroposlib).

  python atropos_e2e.py env URL TOKENIZER_DIR ACKED_FILE TOTAL_STEPS
      a BaseEnv subclass run by BaseEnv.env_manager() (register-env, status-env polling, throttling,
      handle_send_to_api with gzip): every group the API acknowledged is appended to ACKED_FILE.
  python atropos_e2e.py trainer URL RECEIVED_FILE STOP_FILE
      atroposlib's example_trainer.api register_trainer/get_batch loop, writing each received group.
"""
import asyncio
import json
import os
import sys
import time
import types


def run_env(url, tok_dir, acked_file, total_steps):
    from atroposlib.envs.base import BaseEnv, BaseEnvConfig, ScoredDataGroup
    from atroposlib.envs.server_handling.server_baseline import ServerBaseline

    class ToyEnv(BaseEnv):
        name = "toy_math"

        async def setup(self):
            self.i = 0

        async def get_next_item(self):
            self.i += 1
            return self.i

        async def collect_trajectories(self, item):
            n = self.config.group_size
            toks = [[5, 6, item % 200 + 10, k + 7] for k in range(n)]
            g = ScoredDataGroup(
                tokens=toks, masks=[[-100, -100, t[2], t[3]] for t in toks],
                scores=[1.0 if k % 2 else -1.0 for k in range(n)], advantages=[], ref_logprobs=[], images=[],
                group_overrides={}, overrides=[{"temperature": 1.0}] * n,
                messages=[[{"role": "user", "content": f"item {os.getpid()}-{item}"},
                           {"role": "assistant", "content": f"answer {k}"}] for k in range(n)])
            return g, []

        async def evaluate(self, *args, **kwargs):
            return None

        async def wandb_log(self, wandb_metrics=None):
            return None

        def save_checkpoint(self, step, data=None):
            return None

        async def _send_scored_data_to_api(self, scored_data):
            await super()._send_scored_data_to_api(scored_data)
            groups = scored_data if isinstance(scored_data, list) else [scored_data]
            with open(acked_file, "a") as f:
                for g in groups:
                    f.write(g["messages"][0][0]["content"] + "\n")

    cfg = BaseEnvConfig(tokenizer_name=tok_dir, group_size=4, use_wandb=False, rollout_server_url=url, wandb_name="toy_math",
                        total_steps=int(total_steps), max_token_length=64, steps_per_eval=-1,
                        max_num_workers=2, max_batches_offpolicy=2, include_messages=True)
    env = ToyEnv(cfg, ServerBaseline(), testing=True)
    asyncio.run(env.env_manager())


def run_trainer(url, received_file, stop_file):
    from example_trainer import api

    api.check_atropos_api(url, timeout=30)
    cfg = types.SimpleNamespace(atropos_url=url, checkpoint_interval=1000, training_steps=1000, wandb_group=None,
                                wandb_project=None, batch_size=8, gradient_accumulation_steps=1, seq_len=64,
                                save_path="ckpt")
    api.register_trainer(cfg)
    while True:
        data = api.get_batch(url)
        batch = data.get("batch")
        if batch:
            assert sum(len(g["tokens"]) for g in batch) == 8, batch
            with open(received_file, "a") as f:
                for g in batch:
                    assert len(g) == 14 and "overrides" in g and "inference_logprobs" in g
                    f.write(json.dumps(g["messages"][0][0]["content"]) + "\n")
        elif os.path.exists(stop_file):
            return
        else:
            time.sleep(0.2)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "env":
        run_env(*sys.argv[2:6])
    else:
        run_trainer(*sys.argv[2:5])
