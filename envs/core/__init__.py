"""The environment contract: ToolEnv and its step (base), tasks and their splits, suites, the registry, grading
(checks, probes), rewards, the word pools tasks are drawn from, scripted policies, and playing an episode."""
