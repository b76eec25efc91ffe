"""Overrides shared by the tests that check the recipe's mechanics on tiny models."""

#: one round of sampling that keeps every group, sequential task seeds, no off-policy guidance and
#: one optimizer step per RL step: the mechanics (records, checkpoints, resume, envs) are checked
#: with a known count of the policy's own rollouts; the default dynamic sampling and guidance have
#: their own end-to-end tests (tests/trainer/test_recipe.py, tests/trainer/test_guidance.py)
SIMPLE_SAMPLING = (
    "sampling.dynamic_sampling=false",
    "sampling.guidance='off'",
    "sampling.task_sampling='sequential'",
    "optim.minibatches=1",
)
