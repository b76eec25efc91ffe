"""``code-repair-v0``: repair a seeded bug in a HumanEval function, checked by unit tests in the sandbox
(tasks in :mod:`.tasks`, catalogue in ``data/``)."""
