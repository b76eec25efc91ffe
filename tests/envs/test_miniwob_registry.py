"""The ``miniwob/<task>-v0`` family in the registry, without a browser: ids, errors, laziness."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agentic_rl.envs import families
from agentic_rl.envs.registry import get_spec
from agentic_rl.envs.web.miniwob import MINIWOB_PATTERN, miniwob_task_names, resolve_miniwob_id
from agentic_rl.errors import EnvUnavailableError, UnknownEnvError


def test_the_family_is_registered_with_the_task_set():
    family = next(f for f in families() if f.prefix == "miniwob/")
    assert family.pattern == MINIWOB_PATTERN and len(family.member_names()) >= 12
    assert "click-button" in miniwob_task_names() and "search-engine" in miniwob_task_names()


@pytest.mark.parametrize(
    "env_id", ["miniwob/book-flight-v0", "miniwob/click-button-v1", "miniwob/x"]
)
def test_ids_outside_the_set_are_unknown_and_name_the_set(env_id):
    with pytest.raises(UnknownEnvError, match="click-button"):
        resolve_miniwob_id(env_id)


def test_the_factory_takes_the_envs_keywords():
    try:
        assert get_spec("miniwob/click-button-v0").takes_context  # audit log and run id
    except EnvUnavailableError as exc:
        assert "agentic-rl[web]" in str(exc)  # no extra or browser here: the message says how


def test_importing_the_envs_imports_no_browser_package():
    code = (
        "import sys, agentic_rl.envs; "
        "print(any(m.split('.')[0] in ('selenium', 'miniwob') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
