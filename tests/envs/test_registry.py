"""The env registry: ids of the form name-vN, helpful errors, kwargs overrides."""

from __future__ import annotations

import json
import subprocess
import sys

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


def test_unknown_id_names_the_closest_ids_not_all_of_them():
    """Issue 39, item 7: the message used to list every id on one 600-character line."""
    with pytest.raises(UnknownEnvError) as exc_info:
        make("calculatr-v0")
    message = str(exc_info.value)
    assert message.startswith("unknown env id 'calculatr-v0'")  # not KeyError's quoted repr
    assert "did you mean 'calculator-v0'?" in message and "`agentic-rl envs`" in message
    assert "web-shop-v0" not in message and "\n" not in message
    assert isinstance(exc_info.value, KeyError) and isinstance(exc_info.value, AgenticRLError)
    with pytest.raises(UnknownEnvError) as exc_info:
        make("nope-v0")
    assert "did you mean" not in str(exc_info.value) and "agentic-rl envs" in str(exc_info.value)
    with pytest.raises(UnknownEnvError, match="did you mean 'calculator-v0'"):
        registry_module.get_spec("calculatr-v0")


def test_unknown_family_member_names_the_closest_members():
    with pytest.raises(UnknownEnvError) as exc_info:
        make("miniwob/click-buton-v0")
    message = str(exc_info.value)
    assert "did you mean 'miniwob/click-button-v0'" in message and "miniwob/<task>-v0" in message
    assert "use-autocomplete" not in message  # not the whole member list


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


def test_an_unknown_kwarg_lists_the_accepted_ones(scratch_id):
    """Issue 39, item 8: Python's own TypeError names only the unknown keyword."""
    with pytest.raises(TypeError) as exc_info:
        make("calculator-v0", level=["direct"], colour="red")
    message = str(exc_info.value)
    assert "calculator-v0 takes no argument 'level', 'colour'" in message
    assert "did you mean 'levels'?" in message
    assert "(its arguments: levels, context, mcp_servers)" in message

    def open_factory(**kwargs):  # takes any keyword: nothing to check
        assert kwargs == {"anything": 1}
        return CalculatorEnv()

    register(scratch_id, open_factory, "any kwargs")
    assert make(scratch_id, anything=1).env_id == scratch_id


#: the modules ``import agentic_rl.envs`` may load: the contract, the registry and its data
#: (no env implementation: each loads on the first make of its id)
REGISTRY_MODULES = {
    "agentic_rl.envs",
    "agentic_rl.envs.base",
    "agentic_rl.envs.builtin",
    "agentic_rl.envs.context",
    "agentic_rl.envs.contract",
    "agentic_rl.envs.games",
    "agentic_rl.envs.games.textarena_games",
    "agentic_rl.envs.registry",
    "agentic_rl.envs.spaces",
    "agentic_rl.envs.user_envs",
}


def test_importing_and_listing_the_envs_imports_no_env_module():
    """Lazy registration (issue 38): entry points are strings, imported on first make."""
    code = (
        "import sys, agentic_rl.envs as e\n"
        "ids = [s.env_id for s in e.registered()] + [f.pattern for f in e.families()]\n"
        "before = sorted(m for m in sys.modules if m.startswith('agentic_rl.envs'))\n"
        "e.make('calculator-v0').close()\n"
        "after = sorted(m for m in sys.modules if m.startswith('agentic_rl.envs'))\n"
        "print(json.dumps([len(ids), before, after]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", "import json\n" + code], capture_output=True, text=True, check=True
    )
    count, before, after = json.loads(out.stdout)
    assert count >= 28 and set(before) == REGISTRY_MODULES
    assert "agentic_rl.envs.calculator.env" in after  # the first make imported it
    assert not any(m.startswith("agentic_rl.envs.web") for m in after)  # and nothing else's


def test_builtin_entries_match_their_classes():
    """Each lazy entry's description is its class's (no drift), and every entry point loads."""
    from agentic_rl.envs.builtin import BUILTIN

    for env_id, _entry, description, _recipe, _kwargs in BUILTIN:
        factory = registry_module.get_spec(env_id).factory
        own = getattr(factory, "description", None)
        if isinstance(own, str) and env_id not in ("frozenlake-v0", "frozenlake-slippery-v0"):
            assert description.startswith(own), env_id  # textworld adds its extra's name


def test_recipe_overrides_are_declared_on_the_entry(scratch_id):
    from agentic_rl.config.env_recipe import env_recipe_defaults

    register(scratch_id, CalculatorEnv, "x", recipe_overrides={"rollout.max_turns": 3})
    assert env_recipe_defaults(scratch_id)["rollout.max_turns"] == 3
    assert registry_module.get_spec("search-qa-v0").recipe_overrides["algorithm.steps"] == 10
    assert env_recipe_defaults("swe-repo-v0")["warmup.env_kwargs"] == {"levels": ["easy"]}
