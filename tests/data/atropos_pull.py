"""A trainer's side of Atropos for tests/test_atropos_env.py (run with a Python that has atroposlib 0.4.0):
atroposlib's example_trainer.api registers the run and pulls /batch until BATCHES batches arrived, writing each
group it received as one JSON line (scores, message lists, token and mask lists).

  python atropos_pull.py URL OUT_FILE BATCHES BATCH_SIZE SEQ_LEN
"""
import json
import sys
import time
import types


def main(url, out_file, batches, batch_size, seq_len):
    from example_trainer import api

    api.check_atropos_api(url, timeout=30)
    api.register_trainer(types.SimpleNamespace(
        atropos_url=url, checkpoint_interval=1000, training_steps=int(batches), wandb_group=None, wandb_project=None,
        batch_size=int(batch_size), gradient_accumulation_steps=1, seq_len=int(seq_len), save_path="ckpt"))
    got = 0
    while got < int(batches):
        batch = api.get_batch(url).get("batch")
        if not batch:
            time.sleep(0.2)
            continue
        got += 1
        with open(out_file, "a") as f:
            for g in batch:
                f.write(json.dumps({k: g[k] for k in ("scores", "messages", "tokens", "masks")}) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:6])
