"""Running a recipe on more than one process: every collective (:mod:`.distributed`), the
data-parallel :class:`~agentic_rl.trainer.parallel.ranks.Ranks`, and scale-out of envs and
generation to Ray workers (:mod:`.scale_out`)."""
