"""``vf_hang``: a taskset whose scorer hangs on one reply, as a verifier stuck in a test suite, a
proof checker or a judge call does.

The reply ``"hang"`` blocks its reward function for an hour (a blocking call, not an ``await``:
the bridge's event loop stops too); any other reply is scored at once (1.0 when it is the
task's number). The adapter's test checks that the request times out, the bridge is killed and
restarted, and the taskset's other envs go on.
"""

import time

import verifiers.v1 as vf


class EchoData(vf.TaskData):
    """A number to say back."""

    answer: str


class HangTask(vf.Task[EchoData]):
    """Scores the reply against the number; hangs on ``"hang"``."""

    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        """1.0 when the reply is the number (blocks for an hour on the reply "hang")."""
        if trace.last_reply == "hang":
            time.sleep(3600)
        return float(trace.last_reply.strip() == self.data.answer)


class HangTaskset(vf.Taskset[HangTask, vf.TasksetConfig]):
    """Four tasks: "Say i." for i in 0..3."""

    def load(self) -> list[HangTask]:
        return [
            HangTask(
                EchoData(name=f"echo-{i}", prompt=f"Say {i}.", answer=str(i)), self.config.task
            )
            for i in range(4)
        ]


__all__ = ["HangTaskset"]
