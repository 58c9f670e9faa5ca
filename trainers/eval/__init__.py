"""hermes_eval: greedy episodes of a model on an environment's split, recorded in the lake."""
