"""Hand-checked tests for turn-level credit: GiGPO, turn process credit, turn → token, and the
per-turn quantities read off a Trajectory."""

import pytest
import torch

from agentic_rl.algorithms import gigpo_advantages, turn_process_advantages
from agentic_rl.algorithms.trajectory_steps import (
    anchor_keys,
    pad_turns,
    token_turn_index,
    turn_process_rewards,
    turn_rewards,
)
from agentic_rl.types import (
    Action,
    Message,
    Observation,
    StopReason,
    ToolCall,
    ToolCallError,
    ToolResult,
    Trajectory,
    Turn,
)


def close(actual, expected, atol=1e-6):
    expected = torch.as_tensor(expected, dtype=torch.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert torch.allclose(actual.double(), expected, atol=atol, rtol=0), f"{actual} != {expected}"


# ---------------------------------------------------------------- GiGPO


def _gigpo_set():
    """Group g: three trajectories; group h: one. Anchors are the observations acted on.

    τ0 (g): anchors [S0, A, B], step rewards [0, 0, 1], R = 1
    τ1 (g): anchors [S0, A],    step rewards [0, 0],    R = 0
    τ2 (g): anchors [S0, C],    step rewards [0, 1],    R = 1
    τ3 (h): anchors [S0, A],    step rewards [0, 5],    R = 5   (own group: never mixed with g)
    """
    rewards, mask = pad_turns([[0, 0, 1], [0, 0], [0, 1], [0, 5]])
    anchors = [["S0", "A", "B"], ["S0", "A"], ["S0", "C"], ["S0", "A"]]
    return torch.tensor([1.0, 0.0, 1.0, 5.0]), ["g", "g", "g", "h"], rewards, mask, anchors


def test_gigpo_step_groups_by_hand():
    # γ = .5, ω = 1, no std (F = 1).
    # episode: mean_g R = 2/3 -> A^E = [1/3, -2/3, 1/3]; group h has one member -> 0
    # step returns: τ0 [.25, .5, 1], τ1 [0, 0], τ2 [.5, 1], τ3 [2.5, 5]
    # step groups in g: S0 {τ0:.25, τ1:0, τ2:.5} mean .25 -> [0, -.25, .25]
    #                   A  {τ0:.5, τ1:0} mean .25 -> [.25, -.25]; B and C are single -> 0
    # group h: S0 and A are single steps (A of τ3 is not grouped with A of g) -> 0
    er, gids, sr, mask, anchors = _gigpo_set()
    adv = gigpo_advantages(
        er, gids, sr, mask, anchors, gamma=0.5, step_weight=1.0, normalize_std=False
    )
    third = 1 / 3
    close(
        adv,
        [
            [third, third + 0.25, third],
            [-2 * third - 0.25, -2 * third - 0.25, 0],
            [third + 0.25, third, 0],
            [0, 0, 0],
        ],
    )
    # ω = 0 leaves the episode advantage on every turn
    adv0 = gigpo_advantages(
        er, gids, sr, mask, anchors, gamma=0.5, step_weight=0.0, normalize_std=False
    )
    close(adv0, [[third] * 3, [-2 * third] * 2 + [0], [third] * 2 + [0], [0, 0, 0]])


def test_gigpo_with_std_and_degenerate_groups():
    # with std: episode group g [1, 0, 1]: mean 2/3, std sqrt(2/9) -> [.7071, -1.4142, .7071];
    # step group A {.5, 0}: centred [.25, -.25] / std .25 -> [1, -1]
    er, gids, sr, mask, anchors = _gigpo_set()
    adv = gigpo_advantages(er, gids, sr, mask, anchors, gamma=0.5, eps=0.0)
    assert abs(adv[0, 1].item() - (2**0.5 / 2 + 1)) < 1e-6
    assert abs(adv[1, 1].item() - (-(2**0.5) - 1)) < 1e-6
    # all-equal rewards, group of one: exactly 0, no NaN
    r, m = pad_turns([[0, 1], [0, 1]])
    adv = gigpo_advantages(torch.tensor([1.0, 1.0]), ["g", "g"], r, m, [["a", "b"], ["a", "b"]])
    assert torch.equal(adv, torch.zeros(2, 2))
    r, m = pad_turns([[0, 1]])
    assert torch.equal(
        gigpo_advantages(torch.tensor([1.0]), ["solo"], r, m, [["a", "b"]]), torch.zeros(1, 2)
    )


def test_gigpo_bad_inputs():
    er, gids, sr, mask, anchors = _gigpo_set()
    with pytest.raises(ValueError, match="anchor_keys"):
        gigpo_advantages(er, gids, sr, mask, anchors[:3])
    with pytest.raises(ValueError, match="left-aligned"):
        gigpo_advantages(
            er[:1], ["g"], torch.zeros(1, 2), torch.tensor([[False, True]]), [["a", "b"]]
        )


# ---------------------------------------------------------------- turn process credit


def test_turn_process_advantages_by_hand():
    # group g: τ0 outcome 1, process [-1, 0]; τ1 outcome 0, process [0]; γ = 1, c = .5, no std.
    # A^O = [.5, -.5]; process mean over the group's 3 turns = -1/3 -> p̃ τ0 [-2/3, 1/3], τ1 [1/3]
    # process returns (γ = 1): τ0 [-1/3, 1/3], τ1 [1/3]
    # A = τ0 [.5 - 1/6, .5 + 1/6] = [1/3, 2/3];  τ1 [-.5 + 1/6] = [-1/3]
    p, m = pad_turns([[-1, 0], [0]])
    adv = turn_process_advantages(
        torch.tensor([1.0, 0.0]), ["g", "g"], p, m, gamma=1.0, process_coef=0.5, normalize_std=False
    )
    close(adv, [[1 / 3, 2 / 3], [-1 / 3, 0]])


def test_turn_process_all_equal_is_exactly_zero():
    p, m = pad_turns([[0.2, 0.2], [0.2]])
    adv = turn_process_advantages(torch.tensor([1.0, 1.0]), ["g", "g"], p, m)
    assert torch.equal(adv, torch.zeros(2, 2))
    p, m = pad_turns([[0.5, -1.0]])  # group of one: its turns differ, but there is no peer
    adv = turn_process_advantages(torch.tensor([1.0]), ["solo"], p, m)
    assert not torch.isnan(adv).any()


# ---------------------------------------------------------------- reading a Trajectory


def _trajectory(process_reward=None) -> Trajectory:
    calls = (ToolCall("calculator", {"expression": "2*3"}, id="call_0_0"),)
    turn0 = Turn(
        0,
        Action("x", calls, (ToolCallError("{bad", "not JSON"),)),
        Observation((Message("tool", "6"), Message("tool", "error: not JSON"))),
        0.2,
        (
            ToolResult("call_0_0", "calculator", "6"),
            ToolResult("", "", "error: not JSON", ok=False),
        ),
        (5, 6, 7),
        (0, 1, 1),
        (0.0, -0.1, -0.2),
    )
    turn1 = Turn(
        1,
        Action("<answer>6</answer>"),
        None,
        1.0,
        (),
        (8, 9),
        (0, 1),
        (0.0, -0.3),
        process_reward=process_reward,
    )
    messages = (
        Message("system", "s"),
        Message("user", "q"),
        Message("assistant", "x"),
        Message("tool", "6"),
        Message("assistant", "<answer>6</answer>"),
    )
    return Trajectory(
        "calculator-v0",
        1,
        "g",
        "t0",
        messages,
        (turn0, turn1),
        (5, 6, 7, 8, 9, 2),
        (0, 1, 1, 0, 1, 0),
        (0.0, -0.1, -0.2, 0.0, -0.3, 0.0),
        StopReason.TERMINATED,
        reward=1.5,
    )


def test_turn_rewards_sum_to_the_trajectory_reward():
    # env step rewards [.2, 1.0], scored R = 1.5 -> [.2, 1.5 - .2] = [.2, 1.3]
    assert turn_rewards(_trajectory()) == pytest.approx([0.2, 1.3])
    import dataclasses

    with pytest.raises(ValueError, match="not scored"):
        turn_rewards(dataclasses.replace(_trajectory(), reward=None))


def test_turn_process_rewards_env_given_and_fallback():
    # turn 0: 1 accepted + 1 rejected call, 1 failed result (the parse error) -> -1/2; turn 1: no call -> 0
    assert turn_process_rewards(_trajectory()) == [-0.5, 0.0]
    assert turn_process_rewards(_trajectory(process_reward=0.7)) == [-0.5, 0.7]
    with pytest.raises(ValueError, match="finite number"):
        turn_process_rewards(_trajectory(process_reward="good"))


def test_anchor_keys_and_token_turn_index():
    traj = _trajectory()
    keys = anchor_keys(traj)
    assert keys[0] == ("initial", (("system", "s"), ("user", "q")))
    assert keys[1] == ("observation", (("tool", "6"), ("tool", "error: not JSON")))
    assert token_turn_index(traj) == [0, 0, 0, 1, 1, -1]
