"""Where an RL step's batch comes from: the rollout backends, the async producer and its sampler,
the task pool with dynamic sampling, off-policy guidance, env mixtures, agent-program rollouts and
weight sync to the sampler."""
