"""Command line of agentic-rl: ``agentic-rl train | eval | envs | check-env | audit | replay | view |
export | compare``.

:mod:`agentic_rl.cli.main` builds the parser and runs the training and evaluation commands;
:mod:`agentic_rl.cli.trajectories` registers the commands that read recorded trajectories
(``view``, ``export``; ``replay`` in :mod:`agentic_rl.cli.replay`); :mod:`agentic_rl.cli.evaluation`
holds ``eval`` and ``compare``, :mod:`agentic_rl.cli.common` the helpers they share.
"""

from agentic_rl.cli.main import env_overrides, main

__all__ = ["env_overrides", "main"]
