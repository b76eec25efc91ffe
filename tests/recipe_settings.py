"""Overrides shared by the tests that check the recipe's mechanics on tiny models."""

#: one round of sampling that keeps every group, sequential task seeds, no off-policy guidance and
#: one optimizer step per RL step: the mechanics (records, checkpoints, resume, envs) are checked
#: with a known count of the policy's own rollouts; the default dynamic sampling and guidance have
#: their own end-to-end tests (tests/trainer/test_recipe.py, tests/trainer/sampling/test_guidance.py)
SIMPLE_SAMPLING = (
    "sampling.dynamic_sampling=false",
    "sampling.guidance='off'",
    "sampling.task_sampling='sequential'",
    "optim.minibatches=1",
)

#: a 2-step run on the tiny model with 2 demonstrations, 2 groups of 2 and 2 held-out tasks (no base
#: evaluation): the smoke run of an env's recipe (add model.path and output_dir)
TWO_STEP_SMOKE = (
    "model.num_threads=1",
    "warmup.num_demos=2",
    "warmup.batch_size=2",
    "algorithm.steps=2",
    *SIMPLE_SAMPLING,
    "algorithm.tasks_per_step=2",
    "algorithm.group_size=2",
    "eval.size=2",
    "eval.base=false",
)

#: two RL steps of 2 groups of 2, every trajectory trained, no warm-up, no base evaluation and one
#: held-out task: the smoke run of a rollout backend, an algorithm or a loss option on a tiny model
#: (add model.path and output_dir)
TWO_RL_STEPS = (
    "algorithm.steps=2",
    *SIMPLE_SAMPLING,
    "algorithm.tasks_per_step=2",
    "algorithm.group_size=2",
    "optim.skip_zero_advantage=false",
    "warmup.enabled=false",
    "eval.base=false",
    "eval.size=1",
)


def tiny_rl_overrides(model_dir, output_dir, steps: int, *extra: str) -> list[str]:
    """``--set`` overrides of a ``steps``-step RL run (no warm-up, 2 groups of 2, 16-token replies,
    one held-out task) of the model in ``model_dir`` writing to ``output_dir``, then ``extra``."""
    return [
        f"model.path='{model_dir}'",
        "model.num_threads=1",
        f"algorithm.steps={steps}",
        *SIMPLE_SAMPLING,
        "algorithm.tasks_per_step=2",
        "algorithm.group_size=2",
        "warmup.enabled=false",
        "eval.base=false",
        "eval.size=1",
        "tracking.tensorboard=false",
        f"output_dir='{output_dir}'",
        "rollout.max_new_tokens=16",
        *extra,
    ]
