"""An env whose step takes real time and records when it ran (for the env-worker overlap test).

Shipped to Ray env workers by value (``ray.cloudpickle.register_pickle_by_value``), so the
workers need not import the tests package.
"""

from __future__ import annotations

import time

from agentic_rl.envs.base import Env
from agentic_rl.rewards import RewardWeights, Rubric
from agentic_rl.types import Message, Observation


class SlowStepEnv(Env):
    """One-turn env: ``step`` sleeps ``delay_s`` seconds and reports its wall-clock window
    ``info["step_window"] = (start, end)`` (``time.time()``, seconds)."""

    env_id = "slow-step-v0"

    def __init__(self, delay_s: float = 0.5):
        self.delay_s = delay_s

    def reset(self, seed=None, options=None):
        return Observation(
            (Message("system", "Say anything."), Message("user", f"Task {seed}."))
        ), {}

    def step(self, action):
        start = time.time()
        time.sleep(self.delay_s)
        return Observation(()), 0.0, True, False, {"step_window": (start, time.time())}

    def rubric(self, weights: RewardWeights = RewardWeights()) -> Rubric:
        return Rubric([], weights)  # nothing to score: the test looks at timing only
