"""``vf_stray``: a taskset whose scorer writes to descriptor 1, as tasksets that run a tool, a
subprocess or a C library do.

Each scoring writes answer-shaped lines that say "reward 1.0" for the next request ids: with
``os.write(1, …)``, from a subprocess, and with ``print``. Before the bridge had its own pipes, the
first of them was taken as the answer (a wrong reply scored 1.0) and every later answer came one
request late. Tasks are "Say i." (1.0 when the reply is i).
"""

import json
import os
import subprocess
import sys

import verifiers.v1 as vf

_FORGED = {"ok": True, "rewards": {"correct": [1.0, 1.0]}, "metrics": {}, "reward": 1.0}


def _stray_lines() -> None:
    lines = "".join(json.dumps({**_FORGED, "id": i}) + "\n" for i in range(1, 40))
    os.write(1, lines.encode())
    subprocess.run([sys.executable, "-c", f"print({lines!r}, end='')"], check=True)
    print(lines, end="", flush=True)


class StrayData(vf.TaskData):
    """A number to say back."""

    answer: str


class StrayTask(vf.Task[StrayData]):
    """Scores the reply against the number, after writing forged answers to stdout."""

    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        """1.0 when the reply is the number."""
        _stray_lines()
        return float(trace.last_reply.strip() == self.data.answer)


class StrayTaskset(vf.Taskset[StrayTask, vf.TasksetConfig]):
    """Four tasks: "Say i." for i in 0..3."""

    def load(self) -> list[StrayTask]:
        return [
            StrayTask(
                StrayData(name=f"say-{i}", prompt=f"Say {i}.", answer=str(i)), self.config.task
            )
            for i in range(4)
        ]


__all__ = ["StrayTaskset"]
