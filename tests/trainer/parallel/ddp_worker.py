"""One rank of the data-parallel invariant test (launched by torchrun from test_distributed.py).

argv: MODEL_DIR TRAJECTORIES_PICKLE OUT_DIR MAX_GRAD_NORM LOSS_AGG[,LOSS_AGG...]
For each loss aggregation: loads the tiny model, takes this rank's share of the groups, runs one
data-parallel policy-gradient step with SGD (lr 1, so the parameter change is minus the clipped
gradient), and saves the parameters and the step's metrics to OUT_DIR/rank{R}-{LOSS_AGG}.pt.
Then the same for one supervised (warm-up) step on its share: OUT_DIR/rank{R}-sft.pt.
"""

import pickle
import sys

import torch
from transformers import AutoModelForCausalLM

from agentic_rl.trainer.learning.update import LossSettings, policy_gradient_update, sft_update
from agentic_rl.trainer.parallel.distributed import (
    DataParallelOptimizer,
    broadcast_parameters,
    data_parallel_update,
    init_distributed,
    shard,
    trained_tokens,
)


def main() -> None:
    model_dir, traj_path, out_dir, max_norm = (
        sys.argv[1],
        sys.argv[2],
        sys.argv[3],
        float(sys.argv[4]),
    )
    ctx = init_distributed("gloo")
    torch.set_num_threads(1)
    with open(traj_path, "rb") as f:
        groups = pickle.load(f)  # list of (trajectories, advantages) per group
    mine = shard(groups, ctx)
    trajs = [t for g, _ in mine for t in g]
    advs = [a for _, group_advs in mine for a in group_advs]
    for loss_agg in sys.argv[5].split(","):
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        broadcast_parameters(model, ctx)
        opt = DataParallelOptimizer(
            torch.optim.SGD(model.parameters(), lr=1.0), ctx, max_grad_norm=max_norm
        )
        settings = LossSettings(micro_batch_size=2, loss_agg=loss_agg)
        metrics = data_parallel_update(
            policy_gradient_update, model, opt, trajs, advs, settings
        ).metrics
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        torch.save(
            {"state": state, "metrics": metrics, "local_tokens": trained_tokens(trajs)},
            f"{out_dir}/rank{ctx.rank}-{loss_agg}.pt",
        )
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    broadcast_parameters(model, ctx)
    opt = DataParallelOptimizer(
        torch.optim.SGD(model.parameters(), lr=1.0), ctx, max_grad_norm=max_norm
    )
    metrics = data_parallel_update(sft_update, model, opt, trajs, micro_batch_size=2)
    torch.save(
        {
            "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "metrics": metrics,
        },
        f"{out_dir}/rank{ctx.rank}-sft.pt",
    )
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
