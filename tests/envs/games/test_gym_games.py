"""Gymnasium toy-text games as text POMDPs: determinism, oracles, invalid actions, horizon, rubric."""

from __future__ import annotations

import pytest

from agentic_rl.envs import EpisodeEndedError, EpisodeNotStartedError, make
from agentic_rl.envs.games import GymTextEnv
from agentic_rl.types import Action, StopReason, Trajectory, Turn

GYM_IDS = ["frozenlake-v0", "frozenlake-slippery-v0", "taxi-v0", "cliffwalking-v0"]


def _play_oracle(env, seed: int) -> tuple[list[dict], list[float]]:
    env.reset(seed=seed)
    infos, rewards = [], []
    while True:
        obs, reward, terminated, truncated, info = env.step(Action(env.oracle_reply()))
        infos.append({**info, "process_reward": obs.process_reward})
        rewards.append(reward)
        if terminated or truncated:
            return infos, rewards


@pytest.mark.parametrize("env_id", GYM_IDS)
def test_same_seed_same_start_and_same_transitions(env_id):
    a, b = make(env_id), make(env_id)
    obs_a, _ = a.reset(seed=7)
    obs_b, _ = b.reset(seed=7)
    assert obs_a == obs_b
    assert all("\x1b" not in m.content for m in obs_a.messages)  # ANSI codes stripped
    for name in a.action_names[:3]:
        step_a = a.step(Action(f"<action>{name}</action>"))
        step_b = b.step(Action(f"<action>{name}</action>"))
        assert step_a == step_b
        if step_a[2] or step_a[3]:
            break


def test_frozenlake_maps_differ_across_seeds_but_not_within():
    env = make("frozenlake-v0")
    maps = {env.reset(seed=s)[0].messages[1].content for s in range(6)}
    assert len(maps) > 1
    assert env.reset(seed=3)[0] == env.reset(seed=3)[0]


@pytest.mark.parametrize(
    "env_id,seeds", [("frozenlake-v0", range(10)), ("taxi-v0", range(10)), ("cliffwalking-v0", [0])]
)
def test_oracle_wins_deterministic_games(env_id, seeds):
    env = make(env_id)
    for seed in seeds:
        infos, rewards = _play_oracle(env, seed)
        assert infos[-1]["won"], (env_id, seed)
        assert all(i["valid_action"] and i["process_reward"] == 0.0 for i in infos)
    if env_id == "cliffwalking-v0":
        # the shortest safe path: up, 11 x right, down = 13 moves at -1 each
        assert len(infos) == 13 and sum(rewards) == -13
    if env_id == "taxi-v0":
        assert rewards[-1] == 20.0 and all(r == -1.0 for r in rewards[:-1])


def test_slippery_oracle_wins_often():
    env = make("frozenlake-slippery-v0")
    wins = sum(_play_oracle(env, seed)[0][-1]["won"] for seed in range(30))
    assert wins >= 6  # optimal play on slippery random 4x4 maps wins well above chance


@pytest.mark.parametrize("env_id", GYM_IDS)
def test_invalid_action_is_an_error_observation_not_a_crash(env_id):
    env = make(env_id)
    first, _ = env.reset(seed=1)
    for reply in ["", "go north!", "<action>fly</action>", "<action>99</action>", "\x00\x1b[31m"]:
        obs, reward, terminated, truncated, info = env.step(Action(reply))
        assert reward == 0.0 and not terminated and not truncated
        assert info["valid_action"] is False and info["action"] is None
        assert obs.process_reward == -1.0
        assert obs.messages[0].content.startswith("Invalid action")
        assert "<action>" in obs.messages[0].content  # the syntax is repeated
    assert env.state_text() == first.messages[1].content  # the game never saw the invalid replies


def test_horizon_truncates_and_step_after_end_raises():
    env = make("frozenlake-v0", max_steps=3)
    env.reset(seed=0)
    results = [env.step(Action("nonsense")) for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True]
    assert "turn limit" in results[-1][0].messages[0].content
    with pytest.raises(EpisodeEndedError):
        env.step(Action("<action>left</action>"))
    with pytest.raises(EpisodeNotStartedError):
        make("taxi-v0").step(Action("<action>north</action>"))


def test_hole_ends_the_game_lost():
    env = make("frozenlake-v0", map_name="4x4")  # Gymnasium's fixed map: a hole at row 1, column 1
    env.reset(seed=0)
    env.step(Action("<action>down</action>"))
    obs, reward, terminated, truncated, info = env.step(Action("<action>right</action>"))
    assert terminated and not info["won"] and reward == 0.0
    assert "you lost" in obs.messages[0].content


def test_neighbour_line_names_the_cells_each_move_leads_to():
    # Gymnasium's fixed 4x4 map: SFFF / FHFH / FFFH / HFFG
    env = make("frozenlake-v0", map_name="4x4", describe_neighbours=True)
    obs, _ = env.reset(seed=0)
    text = obs.messages[-1].content
    assert text.startswith("PFFF\nFHFH\nFFFH\nHFFG\nYou are at row 0, column 0.")
    assert text.endswith("Moves: left edge, down F (ice), right F (ice), up edge.")
    obs, *_ = env.step(Action("<action>right</action>"))  # now at row 0, column 1: a hole below
    assert (
        "Moves: left S (start), down H (hole), right F (ice), up edge." in obs.messages[-1].content
    )
    plain, _ = make("frozenlake-v0", map_name="4x4").reset(seed=0)
    assert "Moves:" not in plain.messages[-1].content  # off by default: frozenlake-v0 unchanged


def test_without_history_each_step_is_a_context_reset_with_the_state():
    env = make("frozenlake-v0", map_name="4x4", describe_neighbours=True, keep_history=False)
    env.reset(seed=0)
    obs, *_ = env.step(Action("<action>right</action>"))
    assert obs.context_reset and len(obs.messages) == 1
    text = obs.messages[0].content
    assert text.startswith("You chose right. Reward: 0.\nSPFF\nFHFH")  # last move and full state
    assert text.endswith("Moves: left S (start), down H (hole), right F (ice), up edge.")
    obs, *_ = env.step(Action("no action here"))  # an invalid reply also resets, with the error
    assert obs.context_reset and obs.messages[0].content.startswith("Invalid action")
    env = make("frozenlake-v0", map_name="4x4")  # history is kept by default
    env.reset(seed=0)
    assert not env.step(Action("<action>right</action>"))[0].context_reset


def test_without_history_the_engine_starts_one_short_segment_per_turn(chat):
    from agentic_rl.policy.scripted import ScriptedPolicy
    from agentic_rl.rollout import RolloutConfig, run_episodes

    envs = [make("frozenlake-v0", describe_neighbours=True, keep_history=False) for _ in range(2)]
    oracle = ScriptedPolicy(chat, lambda i, _context: envs[i].oracle_reply() or "")
    config = RolloutConfig(max_turns=16, max_new_tokens=24, max_total_tokens=2048)
    for t in run_episodes(oracle, chat, envs, [3, 4], ["a", "b"], config):
        assert t.turns[-1].reward == 1.0  # the oracle still wins
        assert len(t.segment_starts) == len(t.turns)  # one segment per turn
        bounds = [*t.segment_starts, len(t.token_ids)]
        for start, end in zip(bounds, bounds[1:]):
            segment = chat.decode(t.token_ids[start:end])
            assert segment.count("Moves:") == 1 and end - start < 260  # one state, short


def _trajectory(infos: list[dict], rewards: list[float], tokens_per_turn: int = 2) -> Trajectory:
    turns = tuple(
        Turn(
            i,
            Action(""),
            None,
            r,
            (),
            (0,) * tokens_per_turn,
            (1,) * tokens_per_turn,
            (0.0,) * tokens_per_turn,
            info,
        )
        for i, (info, r) in enumerate(zip(infos, rewards))
    )
    n = tokens_per_turn * len(turns)
    return Trajectory(
        "taxi-v0", 0, "g", "t", (), turns, (0,) * n, (1,) * n, (0.0,) * n, StopReason.TERMINATED
    )


def test_rubric_components_by_hand():
    infos = [
        {"valid_action": True, "won": False},
        {"valid_action": False, "won": False},
        {"valid_action": True, "won": True},
    ]
    total, parts = make("taxi-v0").rubric().score(_trajectory(infos, [-1.0, 0.0, 20.0]))
    assert parts["game_won"] == 1.0
    assert parts["valid_actions"] == pytest.approx(2 / 3)
    assert parts["game_return"] == 19.0  # logged only (weight 0)
    assert parts["turns"] == 3.0 and parts["generated_tokens"] == 6.0
    # R = 1*1 + 0.1*(2/3) - 1*(0.01*3 + 0.0005*6) = 1 + 0.0666.. - 0.033
    assert total == pytest.approx(1 + 0.1 * 2 / 3 - 0.033)


def test_generic_adapter_plays_any_discrete_gym_env():
    env = GymTextEnv("Blackjack-v1", action_names=["stick", "hit"], max_steps=5)
    obs, _ = env.reset(seed=3)
    assert (
        "Observation: (" in obs.messages[1].content
    )  # Blackjack has no text render: the tuple is shown
    assert env.oracle_reply() is None  # no known model, no oracle
    _, _, terminated, _, info = env.step(Action("<action>stick</action>"))
    assert terminated and info["valid_action"]


def test_generic_adapter_rejects_bad_configuration():
    with pytest.raises(ValueError, match="Discrete"):
        GymTextEnv("MountainCarContinuous-v0")
    with pytest.raises(ValueError, match="action names"):
        GymTextEnv("FrozenLake-v1", action_names=["a", "b"])
    with pytest.raises(ValueError, match="max_steps"):
        make("taxi-v0", max_steps=0)
    with pytest.raises(ValueError, match="unknown Gymnasium id 'NoSuchGame-v0'"):
        make("gym-v0", gym_id="NoSuchGame-v0")


def test_gym_v0_plays_gymnasium_ids_by_kwargs():
    env = make("gym-v0", gym_id="Taxi-v4")
    obs, info = env.reset(seed=4)
    assert info == {"game": "Taxi-v4"} and env.action_names[-1] == "dropoff"
    assert "The taxi is at row" in obs.messages[1].content  # the known game keeps its state text
    infos, _ = _play_oracle(env, 4)
    assert infos[-1]["won"]
    blackjack = make("gym-v0", gym_id="Blackjack-v1")
    assert blackjack.action_names == ("stick", "hit")
    text = blackjack.reset(seed=3)[0].messages[1].content
    assert text.startswith("Your hand totals ") and "The dealer shows" in text
    frozen = make("gym-v0", gym_id="FrozenLake-v1", gym_kwargs={"is_slippery": False})
    assert frozen.action_names == ("left", "down", "right", "up")
    cartpole = make(
        "gym-v0", gym_id="CartPole-v1"
    )  # unknown to us: numbered actions, raw observation
    assert cartpole.action_names == ("0", "1")
    obs, _ = cartpole.reset(seed=0)
    assert obs.messages[1].content.startswith("Observation: [")
    assert cartpole.step(Action("<action>1</action>"))[4]["valid_action"]
