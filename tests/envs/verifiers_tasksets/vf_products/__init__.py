"""``vf_products``: a small verifiers (v1) taskset for the adapter's tests, written in verifiers' own API.

verifiers 0.4.0 ships no taskset that runs offline (its textarena taskset downloads NLTK
corpora, harbor and nemo_gym need containers or servers), so this package is a real taskset
laid out as ``vf-init`` scaffolds one: a ``vf.TaskData`` with the reference ``answer``, a
``vf.Task`` that scores a trace with ``@vf.reward`` (the product is right) and ``@vf.metric``
(the reply's length), and a ``vf.Taskset`` whose ``load`` builds the tasks. It is imported only
by the verifiers virtualenv's Python (the adapter's bridge), never by agentic-rl.
"""

import random
import re

import verifiers.v1 as vf


class ProductsData(vf.TaskData):
    """One question and its reference answer."""

    answer: str


class ProductsTask(vf.Task[ProductsData]):
    """Scores the reply's last integer against the answer."""

    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        """1.0 when the reply's last integer is the product, else 0.0 (raises on the reply "raise")."""
        if trace.last_reply == "raise":
            raise ValueError("vf_products was asked to raise")  # for the adapter's error test
        found = re.findall(r"-?\d+", trace.last_reply)
        return float(bool(found) and found[-1] == self.data.answer)

    @vf.reward(weight=0.0)
    async def has_number(self, trace: vf.Trace) -> float:
        """1.0 when the reply holds an integer at all (a zero-weight signal)."""
        return float(bool(re.search(r"\d", trace.last_reply)))

    @vf.metric
    async def reply_chars(self, trace: vf.Trace) -> float:
        """Characters in the reply."""
        return float(len(trace.last_reply))


class ProductsConfig(vf.TasksetConfig):
    """How many tasks to build."""

    num_tasks: int = 64


class ProductsTaskset(vf.Taskset[ProductsTask, ProductsConfig]):
    """Multiplication questions; task i uses ``random.Random(i)``."""

    def load(self) -> list[ProductsTask]:
        tasks = []
        for i in range(self.config.num_tasks):
            rng = random.Random(i)
            a, b = rng.randint(2, 12), rng.randint(2, 12)
            data = ProductsData(
                name=f"products-{i}",
                prompt=f"What is {a} * {b}? End your reply with the number.",
                system_prompt="You are a careful calculator.",
                answer=str(a * b),
            )
            tasks.append(ProductsTask(data, self.config.task))
        return tasks


__all__ = ["ProductsTaskset"]
