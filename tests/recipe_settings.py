"""Overrides shared by the tests that check the recipe's mechanics on tiny models."""

#: one round of sampling that keeps every group, sequential task seeds and one optimizer step per
#: RL step: the mechanics (records, checkpoints, resume, envs) are checked with a known count of
#: rollouts; the default dynamic sampling has its own end-to-end test in tests/trainer/test_recipe.py
SIMPLE_SAMPLING = (
    "sampling.dynamic_sampling=false",
    "sampling.task_sampling='sequential'",
    "optim.minibatches=1",
)
