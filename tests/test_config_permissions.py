"""The typed ``[tools.permissions]`` section: validated at load, passed to envs that take it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from agentic_rl.config import ToolsConfig, TrainConfig, load_config, save_config
from agentic_rl.errors import ConfigError
from agentic_rl.tools.governance.permissions import PermissionPolicy

TABLE = """
[tools.permissions]
default = "deny"
[tools.permissions.tools.calculator]
side_effect = "read_only"
[tools.permissions.tools.write_file]
side_effect = "workspace_write"
paths = { path = ["**"] }
"""


def test_table_loads_into_a_policy(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(TABLE)
    config = load_config(path)
    policy = config.tools.policy()
    assert isinstance(policy, PermissionPolicy) and policy.rules_of("write_file").paths == (
        ("path", ("**",)),
    )
    assert (
        TrainConfig().tools == ToolsConfig() and ToolsConfig().policy() is None
    )  # empty: env's own policy
    save_config(config, tmp_path / "saved.toml")
    assert load_config(tmp_path / "saved.toml") == config


@pytest.mark.parametrize(
    "text, key",
    [
        ('[tools.permissions]\ndefualt = "deny"', "tools.permissions.defualt"),
        ('[tools.permissions]\ndefault = "maybe"', "tools.permissions.default"),
        (
            "[tools.permissions.tools.write_file]\npathz = {}",
            "tools.permissions.tools.write_file.pathz",
        ),
        (
            '[tools.permissions.side_effects]\nnetwork = "yes"',
            "tools.permissions.side_effects.network",
        ),
        ("[tools]\npermission = {}", "tools.permission"),
        ("[tools]\npermissions = 3", "tools.permissions"),
    ],
)
def test_broken_permissions_fail_at_load_with_key_and_file(tmp_path, text, key):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert key in str(err.value) and str(path) in str(err.value)


def test_override_is_validated_too():
    with pytest.raises(ConfigError, match="tools.permissions.ask_default"):
        load_config(None, ["tools.permissions.ask_default=1"])
    assert (
        load_config(None, ['tools.permissions.default="allow"']).tools.policy().default == "allow"
    )


def test_recipe_passes_permissions_to_envs_that_take_them(tmp_path):
    pytest.importorskip("torch")
    from agentic_rl.trainer.recipe import env_kwargs, permission_kwargs, validate

    config = load_config(None, ['tools.permissions.tools.calculator.side_effect="read_only"'])
    run = SimpleNamespace(config=config, run_dir=Path(tmp_path / "run-1"))
    kwargs = env_kwargs(run)
    assert kwargs["permissions"] == {"tools": {"calculator": {"side_effect": "read_only"}}}
    assert permission_kwargs(TrainConfig()) == {}
    # a policy that denies the calculator reaches the env
    from agentic_rl.envs import make
    from agentic_rl.types import Action, ToolCall

    denying = load_config(None, ['tools.permissions.default="deny"'])
    env = make(
        "calculator-v0", **env_kwargs(SimpleNamespace(config=denying, run_dir=tmp_path / "run-2"))
    )
    env.reset(seed=0)
    obs, _, _, _, _ = env.step(
        Action("", tool_calls=(ToolCall("calculator", {"expression": "1+1"}, id="c"),))
    )
    assert obs.risk_events[0].denied and obs.tool_results[0].content.startswith("Denied:")
    env.close()
    # an env that takes no permissions argument is a config error, named
    from agentic_rl.envs import register
    from agentic_rl.envs.registry import _REGISTRY

    register("no-permissions-v0", lambda: make("calculator-v0"), "test")
    try:
        bad = load_config(None, ["env.id=no-permissions-v0", 'tools.permissions.default="deny"'])
        with pytest.raises(
            ConfigError, match="tools.permissions is set, but env 'no-permissions-v0'"
        ):
            validate(bad)
    finally:
        del _REGISTRY["no-permissions-v0"]
