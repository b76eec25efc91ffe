"""Held-out evaluation: greedy rollouts on fixed seeds, their metrics, and confidence intervals."""
