"""Credit assignment of the recipe (``algorithm.name``) on hand-built two-turn tool trajectories,
and one update per method on the tiny random Llama through the recipe's own credit+update path."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from agentic_rl.algorithms import gigpo_advantages, grpo_advantages
from agentic_rl.algorithms.trajectory_steps import anchor_keys, pad_turns, turn_rewards
from agentic_rl.config import AlgorithmConfig, OptimConfig, PPOConfig, TrainConfig
from agentic_rl.trainer.learning.credit import (
    ALGORITHMS,
    assign_credit,
    spread_over_turns,
    turn_means,
    turn_rewards_on_tokens,
)
from agentic_rl.types import (
    Action,
    Message,
    Observation,
    StopReason,
    ToolCall,
    ToolResult,
    Trajectory,
    Turn,
)


def _traj(gid: str, tid: str, reward: float, tool_result: str = "6", seed: int = 0) -> Trajectory:
    """Turn 0: 4 context tokens, 3 sampled (a tool call); turn 1: the tool result + template
    (3 tokens, mask 0), 2 sampled (the answer); then 1 trailing env token.

    token index: 0 1 2 3 | 4 5 6 | 7 8 9 | 10 11 | 12
    loss mask:   0 0 0 0 | 1 1 1 | 0 0 0 | 1  1  | 0
    turn:        0 0 0 0   0 0 0   1 1 1   1  1    -1
    """
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 49152, (13,), generator=g).tolist()
    mask = [0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 0]
    call = ToolCall("calculator", {"expression": "2*3"}, id="call_0_0")
    turn0 = Turn(
        0,
        Action("c", (call,)),
        Observation((Message("tool", tool_result),)),
        0.0,
        (ToolResult("call_0_0", "calculator", tool_result, ok=tool_result != "err"),),
        tuple(ids[:7]),
        tuple(mask[:7]),
        (0.0,) * 7,
    )
    turn1 = Turn(
        1,
        Action("<answer>6</answer>"),
        None,
        1.0,
        (),
        tuple(ids[7:12]),
        tuple(mask[7:12]),
        (0.0,) * 5,
    )
    messages = (
        Message("system", "s"),
        Message("user", "q"),
        Message("assistant", "c"),
        Message("tool", tool_result),
        Message("assistant", "<answer>6</answer>"),
    )
    return Trajectory(
        "calculator-v0",
        0,
        gid,
        tid,
        messages,
        (turn0, turn1),
        tuple(ids),
        tuple(mask),
        (0.0,) * 13,
        StopReason.TERMINATED,
        reward=reward,
    )


def _batch() -> list[Trajectory]:
    # group g: rewards [1, 0, 1]; the first two saw tool result "6", the third "err"
    return [
        _traj("g", "a", 1.0, "6", 1),
        _traj("g", "b", 0.0, "6", 2),
        _traj("g", "c", 1.0, "err", 3),
    ]


def test_token_helpers_by_hand():
    t = _traj("g", "a", 1.5)
    # trained tokens 4,5,6 (turn 0) and 10,11 (turn 1)
    assert spread_over_turns(t, [2.0, -1.0]) == [0, 0, 0, 0, 2, 2, 2, 0, 0, 0, -1, -1, 0]
    # turn rewards [0, 1.5] on each turn's last trained token (6 and 11)
    assert turn_rewards_on_tokens(t, turn_rewards(t)) == [0] * 11 + [1.5, 0]
    assert turn_rewards_on_tokens(t, [0.5, 1.0])[6] == 0.5
    tokens = [0, 0, 0, 0, 1, 2, 3, 0, 0, 0, 4, 6, 0]
    assert turn_means(t, tokens) == [2.0, 5.0]


def test_group_methods_match_the_pure_functions():
    trajs = _batch()
    cfg = AlgorithmConfig(name="grpo", std_eps=0.0)
    credit = assign_credit(trajs, cfg)
    expected = grpo_advantages(torch.tensor([1.0, 0.0, 1.0]), ["g"] * 3, eps=0.0).tolist()
    assert credit.advantages == pytest.approx(expected) and credit.outcome == pytest.approx(
        expected
    )
    assert credit.turn[0] == pytest.approx([expected[0]] * 2)
    # rloo: [1 - .5, 0 - 1, 1 - .5]
    assert assign_credit(trajs, AlgorithmConfig(name="rloo")).advantages == pytest.approx(
        [0.5, -1.0, 0.5]
    )


def test_gigpo_credit_spreads_turn_advantages_over_tokens():
    trajs = _batch()
    cfg = AlgorithmConfig(name="gigpo", std_eps=1e-6, gamma=1.0, gigpo_step_weight=1.0)
    credit = assign_credit(trajs, cfg)
    sr, m = pad_turns([turn_rewards(t) for t in trajs])
    turn = gigpo_advantages(
        torch.tensor([1.0, 0.0, 1.0]),
        ["g"] * 3,
        sr,
        m,
        [anchor_keys(t) for t in trajs],
        gamma=1.0,
        eps=1e-6,
    )
    # turn 1 of a and b share the anchor "tool: 6": a step group {1, 0}; c's "err" is alone
    assert credit.turn[0] == pytest.approx(turn[0].tolist())
    assert credit.advantages[1][10] == pytest.approx(turn[1, 1].item())
    assert credit.advantages[1][4] == pytest.approx(turn[1, 0].item())
    assert credit.advantages[1][8] == 0.0  # tool output token


def test_turn_grpo_penalises_the_failed_tool_turn():
    # c's tool call failed (process -1 on turn 0), a's did not: same outcome, so c's turn-0
    # advantage is lower than a's, while their turn-1 advantages (no process signal) are equal
    credit = assign_credit(_batch(), AlgorithmConfig(name="turn_grpo", gamma=0.0, process_coef=0.5))
    a, c = credit.turn[0], credit.turn[2]
    assert c[0] < a[0] and c[1] == pytest.approx(a[1])


def test_ppo_and_reinforce_pp_credit():
    trajs = _batch()
    credit = assign_credit(trajs, AlgorithmConfig(name="ppo"))
    assert credit.advantages is None
    assert [sum(r) for r in credit.token_rewards] == pytest.approx([1.0, 0.0, 1.0])
    rpp = assign_credit(trajs, AlgorithmConfig(name="reinforce_pp"))
    # baseline: [1/3, -2/3, 1/3] on 5 tokens each, whitened over all 15 tokens -> [.7071, -1.4142, .7071]
    assert rpp.advantages[0][4] == pytest.approx(math.sqrt(0.5), abs=1e-5)
    assert rpp.advantages[1][11] == pytest.approx(-math.sqrt(2), abs=1e-5)
    assert rpp.advantages[0][8] == 0.0


def test_unknown_name_raises():
    with pytest.raises(KeyError, match="gigpo"):
        assign_credit(_batch(), AlgorithmConfig(name="a2c"))


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_credit_and_update_on_the_tiny_model(name, tiny_model_dir, tmp_path):
    """Each method's credit reaches the loss: a real gradient, finite metrics, and the recorded
    token advantages are the ones the loss used (for group methods: the credit itself)."""
    from agentic_rl.policy.model_loading import load_model
    from agentic_rl.trainer.learning.critic import Critic
    from agentic_rl.trainer.learning.scoring import pack, score
    from agentic_rl.trainer.recipe import Run, credit_and_update

    model = load_model(tiny_model_dir)
    trajs = []
    for t in _batch():  # old logprobs = the model's own, so ρ = 1
        with torch.no_grad():
            lp, _ = score(model, pack([t]))
        full = list(t.logprobs)
        for i, v in zip([i for i, m in enumerate(t.loss_mask) if m and i > 0], lp.tolist()):
            full[i] = v
        trajs.append(dataclasses.replace(t, logprobs=tuple(full)))
    config = TrainConfig(
        algorithm=AlgorithmConfig(name=name), optim=OptimConfig(micro_batch_size=2)
    )
    alg = config.algorithm
    critic = (
        Critic(model, 1e-3, alg.gamma, alg.lam, config.ppo.value_clip, config.optim.max_grad_norm)
        if name == "ppo"
        else None
    )
    run = Run(config, tmp_path, model, None, None, None, None, None, None, critic=critic)
    stats, view = credit_and_update(run, torch.optim.SGD(model.parameters(), lr=0.1), None, trajs)
    assert stats["train/grad_norm"] > 0 and all(math.isfinite(v) for v in stats.values()), stats
    credit = assign_credit(trajs, config.algorithm)
    for i, t in enumerate(trajs):
        v = view[id(t)]
        assert len(v["advantages"]["token"]) == 13 and len(v["advantages"]["turn"]) == 2
        if name != "ppo":
            expected = credit.advantages[i]
            expected = (
                spread_over_turns(t, [expected] * 2) if isinstance(expected, float) else expected
            )
            assert v["advantages"]["token"][1:] == pytest.approx(expected[1:], abs=1e-6)
    if name == "ppo":
        # V ≡ 0 at the start, γ = 1, λ = .95: GAE advantages of the last token = its reward R
        assert view[id(trajs[0])]["advantages"]["token"][11] == pytest.approx(1.0)
        # the value head took a step
        assert critic.value_model.head.linear.bias.item() != 0.0


@pytest.mark.parametrize("name", ["grpo", "ppo"])
def test_second_ppo_epoch_reuses_the_first_pass(name, tiny_model_dir, tmp_path):
    """ppo_epochs = 2: the second step sees a moved policy (ρ ≠ 1) with the first pass's advantages
    (and, for ppo, the first pass's values as V_old; the clipping itself: test_update_credit)."""
    from agentic_rl.policy.model_loading import load_model
    from agentic_rl.trainer.learning.critic import Critic
    from agentic_rl.trainer.recipe import Run, credit_and_update

    model = load_model(tiny_model_dir)
    config = TrainConfig(
        algorithm=AlgorithmConfig(name=name),
        optim=OptimConfig(micro_batch_size=3, ppo_epochs=2),
        ppo=PPOConfig(value_clip=0.01),
    )
    alg = config.algorithm
    critic = (
        Critic(model, 0.5, alg.gamma, alg.lam, 0.01, config.optim.max_grad_norm)
        if name == "ppo"
        else None
    )
    run = Run(config, tmp_path, model, None, None, None, None, None, None, critic=critic)
    stats, view = credit_and_update(
        run, torch.optim.SGD(model.parameters(), lr=1.0), None, _batch()
    )
    assert abs(stats["train/ratio_mean"] - 1.0) > 1e-4 and math.isfinite(stats["train/loss"])
    if name == "ppo":
        assert math.isfinite(stats["train/value_loss"]) and "train/value_clip_fraction" in stats
