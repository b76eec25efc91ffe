"""Every built-in env is a real gymnasium.Env: Gymnasium's own check_env passes on each registered
id made through gymnasium.make, and the chat spaces behave as Gymnasium spaces."""

from __future__ import annotations

import pickle
import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from agentic_rl.envs import make, registered
from agentic_rl.envs.registry import gymnasium_id, register_family_in_gymnasium
from agentic_rl.envs.spaces import ActionSpace, ObservationSpace
from agentic_rl.errors import EnvUnavailableError, UnknownEnvError
from agentic_rl.types import (
    Action,
    MemoryEvent,
    Message,
    Observation,
    RiskEvent,
    ToolCall,
    ToolCallError,
    ToolResult,
)
from tests.markers import SANDBOXED_ENVS, needs_bwrap

# every registered id with its registered defaults (the sandboxed ones skip without bubblewrap,
# their default sandbox), and code-repair on the sandbox every machine has
CASES = [
    pytest.param(
        spec.env_id, {}, id=spec.env_id, marks=[needs_bwrap] * (spec.env_id in SANDBOXED_ENVS)
    )
    for spec in registered()
] + [
    pytest.param(
        "code-repair-v0", {"sandbox_backend": "unsafe_local"}, id="code-repair-v0-unsafe_local"
    )
]


def gym_make(env_id: str, **kwargs):
    """gymnasium.make of a registered id; skips with the env's reason when an optional extra or
    an offline asset it needs is missing here (textworld, NLTK corpora)."""
    try:
        return gymnasium.make(gymnasium_id(env_id), **kwargs)
    except EnvUnavailableError as exc:
        pytest.skip(f"{env_id}: {exc}")


def assert_check_env_passes(env) -> None:
    """Gymnasium's check_env on the unwrapped env (it warns about wrappers otherwise), with
    every warning recorded: a warning of check_env is a failed check, so none may come."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    assert [str(w.message) for w in caught] == []


@pytest.mark.parametrize(("env_id", "kwargs"), CASES)
def test_gymnasium_check_env_passes(env_id, kwargs):
    env = gym_make(env_id, **kwargs)
    try:
        assert env.unwrapped.env_id == env_id
        assert env.unwrapped.spec.id == gymnasium_id(env_id)
        assert isinstance(env.observation_space, ObservationSpace)
        assert isinstance(env.action_space, ActionSpace)
        assert_check_env_passes(env)
        # through Gymnasium's wrappers (PassiveEnvChecker, OrderEnforcing) too
        obs, info = env.reset(seed=0)
        assert obs in env.observation_space and isinstance(info, dict)
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert obs in env.observation_space and isinstance(reward, float)
    finally:
        env.close()


def test_module_prefix_form_imports_the_registering_package():
    env = gymnasium.make("agentic_rl.envs:agentic_rl/calculator-v0")
    assert env.unwrapped.env_id == "calculator-v0"
    env.close()


def test_gymnasium_make_passes_kwargs_to_the_factory():
    env = gymnasium.make("agentic_rl/calculator-v0", levels=("direct",))
    assert env.unwrapped.levels == ("direct",)
    assert env.unwrapped.spec.kwargs == {"env_id": "calculator-v0", "levels": ("direct",)}


def test_family_members_enter_gymnasium_on_request():
    ids = register_family_in_gymnasium("rg/")
    assert "agentic_rl/rg.basic_arithmetic-v0" in ids and ids == sorted(ids)
    env = gymnasium.make("agentic_rl/rg.basic_arithmetic-v0")
    assert env.unwrapped.env_id == "rg/basic_arithmetic-v0"
    assert_check_env_passes(env)
    with pytest.raises(UnknownEnvError, match="no env family with prefix 'zz/'"):
        register_family_in_gymnasium("zz/")


def test_unseeded_reset_follows_the_seeded_one():
    # Gymnasium's seeding: reset(seed=n) seeds np_random; reset() then draws the next task's
    # seed from it, so the sequence after a seeded reset repeats
    env = make("calculator-v0")
    first = [env.reset(seed=7)[0]] + [env.reset()[0] for _ in range(3)]
    again = [env.reset(seed=7)[0]] + [env.reset()[0] for _ in range(3)]
    assert first == again
    assert len({o.messages[1].content for o in first}) > 1  # the unseeded resets draw new tasks
    assert env.reset(seed=7)[0] == make("calculator-v0").reset(seed=7)[0]


def test_spaces_pickle_with_their_rng():
    # spaces cross processes (Gymnasium's AsyncVectorEnv, Ray workers) with their seeded state
    for space in (ActionSpace(max_sample_length=8), ObservationSpace()):
        space.seed(5)
        copy = pickle.loads(pickle.dumps(space))
        assert copy == space and copy.sample() == space.sample()


def test_spaces_are_per_instance_and_assignable():
    a, b = make("calculator-v0"), make("calculator-v0")
    assert a.action_space is not b.action_space and a.action_space == b.action_space
    a.action_space = ActionSpace(max_sample_length=3)
    assert a.action_space.max_sample_length == 3 and b.action_space.max_sample_length == 32


def test_action_space_contains_text_and_tool_calls():
    space = ActionSpace()
    call = ToolCall("add", {"a": 1}, raw='{"name": "add"}', id="call_0_0")
    assert Action("hi") in space
    assert Action("", (call,), (ToolCallError("<bad>", "not JSON"),)) in space
    assert "hi" not in space
    assert Action(3) not in space  # type: ignore[arg-type]
    assert Action("x", [call]) not in space  # type: ignore[arg-type]  # a list, not a tuple
    assert Action("x", (ToolCall("add", "a=1"),)) not in space  # type: ignore[arg-type]
    assert Action("x", (), ("error",)) not in space  # type: ignore[arg-type]


def test_action_space_sampling_is_seeded_and_in_the_space():
    space = ActionSpace(max_sample_length=5, charset="ab")
    space.seed(1)
    first = [space.sample() for _ in range(20)]
    space.seed(1)
    assert [space.sample() for _ in range(20)] == first
    assert all(a in space and 1 <= len(a.text) <= 5 and set(a.text) <= {"a", "b"} for a in first)
    assert all(a.tool_calls == () for a in first)
    with pytest.raises(ValueError, match="without masks"):
        space.sample(mask=1)
    with pytest.raises(ValueError, match="max_sample_length"):
        ActionSpace(max_sample_length=0)
    with pytest.raises(ValueError, match="charset"):
        ActionSpace(charset="")


def test_observation_space_contains_chat_observations():
    space = ObservationSpace()
    obs = Observation(
        messages=(Message("system", "rules"), Message("tool", "3")),
        tools=({"name": "add", "description": "", "parameters": {"type": "object"}},),
        tool_results=(ToolResult("call_0_0", "add", "3"),),
        risk_events=(RiskEvent("denied", tool="rm"),),
        memory_events=(MemoryEvent("write", True, (1,)),),
        process_reward=0.5,
    )
    assert obs in space and Observation(messages=()) in space
    assert Observation(messages=(Message("robot", "x"),)) not in space
    assert Observation(messages=(Message("user", b"x"),)) not in space  # type: ignore[arg-type]
    assert Observation(messages=[Message("user", "x")]) not in space  # type: ignore[arg-type]
    assert Observation(messages=(), tools=({"description": "no name"},)) not in space
    assert Observation(messages=(), process_reward=float("nan")) not in space
    assert (Message("user", "x"),) not in space
    space.seed(0)
    sample = space.sample()
    assert sample in space and sample.messages[0].role == "user"


def test_jsonable_round_trip():
    actions = ActionSpace()
    action = Action(
        "t", (ToolCall("add", {"a": [1]}, "raw", "call_0_0"),), (ToolCallError("r", "m"),)
    )
    assert actions.from_jsonable(actions.to_jsonable([action])) == [action]
    observations = ObservationSpace()
    obs = Observation(
        messages=(Message("tool", "3"),),
        tools=({"name": "add"},),
        tool_results=(ToolResult("call_0_0", "add", "3", ok=False),),
        risk_events=(RiskEvent("denied", "rm", "no", "call_0_0", "rule", True),),
        memory_events=(MemoryEvent("search", True, (1, 2), 2, 5),),
        process_reward=-1.0,
        context_reset=True,
    )
    assert observations.from_jsonable(observations.to_jsonable([obs])) == [obs]
