"""Transfer (rl_transfer_init, rl_train_transfer): a source run's weights on a target environment, layers frozen."""
