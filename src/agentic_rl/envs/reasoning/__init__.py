"""Reasoning tasks: ``math-python-v0`` (arithmetic and GSM-style problems with the sandboxed Python
tool) and the ``rg/<task>-v0`` family over reasoning-gym's procedural tasks."""
