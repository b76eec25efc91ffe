"""A user's own env by ``module:Class`` id or by an ``agentic_rl.envs`` entry point.

The CLI end to end (check-env, train, eval, replay with a ``module:Class`` id from the user's
folder) runs in ``tests/docs/test_guides.py`` on the guide's example.
"""

from __future__ import annotations

import sys
import textwrap

import pytest

from agentic_rl.envs import make
from agentic_rl.envs.registry import get_spec, plugins
from agentic_rl.envs.user_envs import is_import_path
from agentic_rl.errors import UnknownEnvError

MODULE = '''
from agentic_rl.envs import CalculatorEnv


class MyCalc(CalculatorEnv):
    """The built-in task under another name."""

    description = "My calculator"


def make_env(levels=("direct",)):
    return CalculatorEnv(levels=list(levels))


NOT_CALLABLE = 3
'''


@pytest.fixture()
def user_folder(tmp_path, monkeypatch):
    """A folder holding ``my_envs.py``, as the current directory (not on ``sys.path``)."""
    (tmp_path / "my_envs.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    yield tmp_path
    sys.modules.pop("my_envs", None)


def test_import_path_ids_are_recognised():
    assert is_import_path("my_envs:MyCalc") and is_import_path("pkg.sub:factory.attr")
    assert not is_import_path("calculator-v0") and not is_import_path("rg/leg_counting-v0")
    assert not is_import_path("a:b:c") and not is_import_path(":x")


def test_a_class_or_a_function_of_a_module_in_the_current_directory(user_folder):
    env = make("my_envs:MyCalc")
    assert env.env_id == "my_envs:MyCalc"
    obs, info = env.reset(seed=3)
    assert obs.messages and info["level"] in ("direct", "multi_op", "word")
    assert get_spec("my_envs:MyCalc").description == "My calculator"  # its description attribute
    assert get_spec("my_envs:make_env").description == "(no description)"  # no docstring
    env = make("my_envs:make_env", levels=["word"])  # kwargs reach the factory
    assert env.reset(seed=1)[1]["level"] == "word"
    with pytest.raises(TypeError, match="its arguments: levels"):
        make("my_envs:make_env", colour="red")


@pytest.mark.parametrize(
    "env_id, message",
    [
        ("no_such_module:Env", "cannot import module 'no_such_module'"),
        ("my_envs:Missing", "module 'my_envs' has no 'Missing'"),
        ("my_envs:NOT_CALLABLE", "'NOT_CALLABLE' is not a class or a function"),
    ],
)
def test_a_bad_import_path_is_one_clear_error(user_folder, env_id, message):
    with pytest.raises(UnknownEnvError, match=message):
        make(env_id)


def test_an_entry_point_gives_a_short_id(tmp_path, monkeypatch):
    """An installed distribution's entry point of the group agentic_rl.envs (a dist-info folder
    on sys.path is what pip installs) is found by id and listed as a plugin."""
    (tmp_path / "plugin_envs.py").write_text(textwrap.dedent(MODULE))
    info = tmp_path / "plugin_envs-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plugin-envs\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[agentic_rl.envs]\nmy-calc-v0 = plugin_envs:MyCalc\nbroken-v0 = plugin_envs:Nope\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        env = make("my-calc-v0")
        assert env.env_id == "my-calc-v0" and type(env).__name__ == "MyCalc"
        listed = {p.env_id if hasattr(p, "env_id") else p[0]: p for p in plugins()}
        assert set(listed) >= {"my-calc-v0", "broken-v0"}
        assert "has no 'Nope'" in listed["broken-v0"][1]  # a broken plugin says why, others work
        with pytest.raises(UnknownEnvError, match="has no 'Nope'"):
            make("broken-v0")
    finally:
        sys.modules.pop("plugin_envs", None)


def test_unknown_ids_point_at_the_ways_to_bring_an_env():
    with pytest.raises(UnknownEnvError, match=r"module:Class or an agentic_rl.envs entry point"):
        make("no-such-env-v0")
