"""Online RL (rl_train_online): GRPO-style updates, the curriculum, configs, the trainer loop, actor processes and
the learner that reads their rollouts from the lake, lachesis.toml, and TRL's environment_factory."""
