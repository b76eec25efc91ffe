"""Rollouts: the multi-turn loop that turns envs and a policy into trajectories."""

from agentic_rl.rollout.engine import RolloutConfig, run_episodes

__all__ = ["RolloutConfig", "run_episodes"]
