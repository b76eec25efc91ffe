"""Ranks on one process: every collective is the identity (or a plain call), so the recipe reads
the same with and without torchrun (the W = 2 behaviour: tests/trainer/parallel/test_distributed.py)."""

from __future__ import annotations

import torch

from agentic_rl.trainer.parallel.ranks import Ranks


def test_one_process_collectives_do_nothing():
    ranks = Ranks()
    assert ranks.is_main and ranks.rank == 0 and ranks.world_size == 1 and not ranks.distributed
    assert ranks.shard(range(5)) == [0, 1, 2, 3, 4]
    items = [object(), object()]
    assert ranks.gather_to_main(items) == items and ranks.all_gather(items) == items
    row = {"a": 1}
    assert ranks.broadcast_from_main(row) is row
    assert ranks.sum([2, 3.5]) == [2.0, 3.5]
    assert ranks.replica_digests(torch.nn.Linear(2, 1)) == []
    assert ranks.metrics_log(lambda: "log") == "log"


def test_update_is_a_plain_call_and_minibatches_the_split():
    ranks = Ranks()
    calls = []

    def update(model, optimizer, trajectories, *args, **kwargs):
        calls.append((model, optimizer, trajectories, args, kwargs))
        return "result"

    assert ranks.update(update, "m", "o", [1], "adv", k=1) == "result"
    assert calls == [("m", "o", [1], ("adv",), {"k": 1})]
    assert ranks.minibatches(lambda parts: [[0], [1]][:parts], [0, 1], 2) == [[0], [1]]
