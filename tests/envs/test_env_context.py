"""EnvContext: the run's audit log, run id and permissions reach an env through one argument.

The rule (agentic_rl.envs.context): ``make`` passes ``context=`` to a factory that has a
``context`` parameter, and builds any other factory without it; ``permissions``/``audit_path``/
``run_id`` keywords are folded into the context of a factory that takes one.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import textwrap

import pytest

from agentic_rl.envs import EnvContext, get_spec, make, register
from agentic_rl.envs.registry import _REGISTRY
from agentic_rl.tools.governance.audit import AuditLog
from agentic_rl.types import Action, ToolCall

CALL = Action("", (ToolCall("calculator", {"expression": "1+2"}, id="c0"),))


def test_the_context_reaches_a_builtin_env_and_its_audit_log(tmp_path):
    audit = tmp_path / "audit.jsonl"
    env = make("calculator-v0", context=EnvContext(audit_path=str(audit), run_id="run-7"))
    env.reset(seed=3, options={"trajectory_id": "t3"})
    obs, *_ = env.step(CALL)
    assert obs.tool_results[0].content == "3"
    (record,) = AuditLog(audit).read()
    assert (record["run_id"], record["trajectory_id"]) == ("run-7", "t3")


def test_context_fields_given_as_keywords_are_folded_into_the_context(tmp_path):
    """Stored run records hold ``permissions`` as an env kwarg; they keep rebuilding the env."""
    env = make(
        "calculator-v0",
        context=EnvContext(run_id="r"),
        permissions={"default": "deny"},
        audit_path=str(tmp_path / "a.jsonl"),
    )
    env.reset(seed=0)
    obs, *_ = env.step(CALL)
    assert obs.risk_events[0].denied  # the keyword's table, not the context's (none) won
    assert AuditLog(tmp_path / "a.jsonl").read()[0]["run_id"] == "r"


def test_the_context_is_immutable():
    with pytest.raises(dataclasses.FrozenInstanceError):
        EnvContext().run_id = "x"  # type: ignore[misc]


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A user's module with an env that takes no context and one that does."""
    (tmp_path / "my_envs.py").write_text(
        textwrap.dedent(
            """
            from agentic_rl.envs import CalculatorEnv, EnvContext

            class PlainEnv(CalculatorEnv):
                \"\"\"A user's env written without a context parameter.\"\"\"

                def __init__(self, levels=("direct",)):
                    super().__init__(levels=levels)

            class ContextEnv(CalculatorEnv):
                \"\"\"A user's env that keeps the run's context.\"\"\"

                def __init__(self, context=EnvContext()):
                    super().__init__(context=context)
                    self.context = context
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_envs"
    sys.modules.pop("my_envs", None)


def test_a_user_env_without_a_context_parameter_is_built_without_it(user_module, tmp_path):
    audit = tmp_path / "audit.jsonl"
    env_id = f"{user_module}:PlainEnv"
    assert not get_spec(env_id).takes_context
    env = make(env_id, context=EnvContext(audit_path=str(audit), run_id="r"))
    env.reset(seed=1)
    env.step(CALL)
    assert env.levels == ("direct",) and not audit.exists()  # built, the context ignored
    with pytest.raises(TypeError, match="^tools.permissions is set, but env 'my_envs:PlainEnv'"):
        make(env_id, permissions={"default": "deny"})  # a table it could never apply


def test_a_user_env_with_a_context_parameter_receives_it(user_module):
    env_id = f"{user_module}:ContextEnv"
    context = EnvContext(run_id="r9", permissions={"default": "deny"})
    assert get_spec(env_id).takes_context
    assert make(env_id, context=context).context == context
    assert make(env_id).context == EnvContext()  # no run: the default context


def test_a_registered_factory_without_context_and_with_its_own_keywords():
    """A factory registered in code that still takes ``audit_path`` gets it as a keyword."""
    seen = {}

    def factory(audit_path=None):
        seen["audit_path"] = audit_path
        return make("calculator-v0")

    register("context-test-v0", factory, "test")
    try:
        make("context-test-v0", context=EnvContext(audit_path="ignored"), audit_path="kept")
        assert seen == {"audit_path": "kept"}
    finally:
        del _REGISTRY["context-test-v0"]


def test_replayed_records_rebuild_with_their_permissions():
    """``replay_kwargs`` drop the context (audit log, run id) and keep ``permissions``."""
    stored = json.loads(json.dumps({"levels": ["direct"], "permissions": {"default": "deny"}}))
    env = make("calculator-v0", **stored)
    env.reset(seed=0)
    assert env.step(CALL)[0].risk_events[0].denied


def test_a_permissions_table_never_slips_into_a_factorys_other_kwargs():
    """A factory with ``**kwargs`` but no ``context`` (TextArena's game kwargs) gets the
    tools.permissions error, not a table passed on as a game setting."""
    with pytest.raises(TypeError, match="^tools.permissions is set, but env 'ta-sudoku-v0'"):
        make("ta-sudoku-v0", permissions={"default": "deny"})
