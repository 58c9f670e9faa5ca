"""Fine-grained rewards: the per-step terms an environment adds beside its final reward, and their weights.

An online RL learner with sparse, all-or-nothing rewards learns nothing until an episode succeeds by
chance; the guide's "environment coordinator" gives immediate reward and penalty signals instead. Each
step's reward is the sum of its terms:

- `well_formed_call`: +well_formed_call_bonus once per step with at least one tool call that parsed,
  names a known tool and has valid arguments (once per step, so repeating calls earns nothing more);
- `malformed_call`: -malformed_call_penalty per call that did not parse, named an unknown tool or had
  bad arguments;
- `command_error`: -command_error_penalty per tool call that ran and failed (a non-zero exit, a file
  that is not there, a snippet that does not match);
- `final` (the step that ends the episode): a success is worth reward_scale x the environment's reward
  (1.0), the key success action; a failure earns partial_credit x the share of checks or hidden tests
  passing (None keeps the environment's own failure reward: python_debug's share of hidden tests,
  0 for the all-or-nothing bash and git checks).

`RewardWeights()` (all step terms 0, partial_credit None, reward_scale 1) is every environment's
behaviour before these terms existed, byte for byte: the default. The success flag never depends on the
weights. Weights come from the caller (trainers read them from the project file, lachesis.toml); this
module imports nothing of ours but the check report.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from envs.core.checks import CheckReport


@dataclass(frozen=True)
class RewardWeights:
    """Weights of the per-step reward terms (see the module docstring); the default changes nothing."""

    well_formed_call_bonus: float = 0.0
    malformed_call_penalty: float = 0.0
    command_error_penalty: float = 0.0
    partial_credit: float | None = None  # None: the environment's own reward for a failed episode
    reward_scale: float = 1.0

    def __post_init__(self):
        for name, value in asdict(self).items():
            if value is None and name == "partial_credit":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"reward weight {name} must be a finite number, got {value!r}")
            if value < 0:
                raise ValueError(f"reward weight {name} must be at least 0, got {value}")
        if self.reward_scale <= 0:
            raise ValueError(f"reward weight reward_scale must be positive, got {self.reward_scale}")
        if self.partial_credit is not None and self.partial_credit > 1:
            raise ValueError(f"reward weight partial_credit must be at most 1 (a success is worth 1), "
                             f"got {self.partial_credit}")

    @classmethod
    def off(cls) -> "RewardWeights":
        """No step terms, the environment's own final reward: what every environment did before."""
        return cls()


@dataclass
class StepTally:
    """What one step's tool calls did, counted by ToolEnv.step."""

    well_formed: int = 0
    malformed: int = 0
    command_errors: int = 0


def step_terms(weights: RewardWeights, tally: StepTally) -> dict[str, float]:
    """The step's reward terms before the final one (0.0 each under the default weights)."""
    return {"well_formed_call": weights.well_formed_call_bonus if tally.well_formed else 0.0,
            "malformed_call": 0.0 - weights.malformed_call_penalty * tally.malformed,  # 0.0, not -0.0, when off
            "command_error": 0.0 - weights.command_error_penalty * tally.command_errors}


def final_reward(weights: RewardWeights, report: CheckReport) -> float:
    """The reward of the step that ends the episode: scaled success, else (weighted) partial credit."""
    if report.success:
        return weights.reward_scale * float(report.reward)
    if weights.partial_credit is None:
        return float(report.reward)
    share = report.passed / report.total if report.total else 0.0
    return weights.partial_credit * share
