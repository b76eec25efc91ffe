"""The env registry: ids of the form name-vN, helpful errors, kwargs overrides."""

from __future__ import annotations

import pytest

from agentic_rl.envs import CalculatorEnv, make, register, registered
from agentic_rl.envs import registry as registry_module
from agentic_rl.errors import AgenticRLError, UnknownEnvError


@pytest.fixture
def scratch_id():
    env_id = "test-scratch-v0"
    yield env_id
    registry_module._REGISTRY.pop(env_id, None)


def test_calculator_is_registered():
    specs = registered()
    assert "calculator-v0" in [s.env_id for s in specs]
    assert [s.env_id for s in specs] == sorted(s.env_id for s in specs)
    env = make("calculator-v0")
    assert isinstance(env, CalculatorEnv) and env.env_id == "calculator-v0"


def test_unknown_id_lists_registered_ids():
    with pytest.raises(UnknownEnvError) as exc_info:
        make("nope-v0")
    message = str(exc_info.value)
    assert "'nope-v0'" in message and "calculator-v0" in message
    assert message.startswith("unknown env id")  # not KeyError's quoted repr
    assert isinstance(exc_info.value, KeyError) and isinstance(exc_info.value, AgenticRLError)


@pytest.mark.parametrize("bad_id", ["calculator", "calc-v", "calc v0", "calc-vX", "-v0x", ""])
def test_bad_id_format_rejected(bad_id):
    with pytest.raises(ValueError, match="must look like"):
        register(bad_id, CalculatorEnv, "bad")


def test_duplicate_id_rejected():
    with pytest.raises(ValueError, match="already registered"):
        register("calculator-v0", CalculatorEnv, "again")


def test_register_with_default_kwargs_and_override(scratch_id):
    register(scratch_id, CalculatorEnv, "direct only", levels=("direct",))
    env = make(scratch_id)
    assert env.env_id == scratch_id and env.levels == ("direct",)
    assert make(scratch_id, levels=("word",)).levels == ("word",)
    spec = next(s for s in registered() if s.env_id == scratch_id)
    assert spec.description == "direct only" and spec.kwargs == {"levels": ("direct",)}


def test_bad_kwargs_reach_the_env():
    with pytest.raises(ValueError):
        make("calculator-v0", levels=("nope",))
    with pytest.raises(TypeError):
        make("calculator-v0", colour="red")
