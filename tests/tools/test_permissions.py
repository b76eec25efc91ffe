"""The permission policy: modes, side-effect classes, path globs, size limits, ask, config errors."""

from __future__ import annotations

import pytest

from agentic_rl.tools.governance.permissions import PermissionPolicy, glob_match
from agentic_rl.types import ToolCall

CONFIG = {
    "default": "deny",
    "max_argument_bytes": 100,
    "side_effects": {"network": "ask", "irreversible": "deny"},
    "tools": {
        "calculator": {"side_effect": "read_only"},
        "write_file": {
            "side_effect": "workspace_write",
            "paths": {"path": ["workspace/**", "notes.txt"]},
            "max_argument_bytes": 1000,
        },
        "fetch": {"side_effect": "network"},
        "rm": {"side_effect": "irreversible"},
        "shell": {"side_effect": "read_only", "mode": "deny"},
        "deploy": {"side_effect": "irreversible", "mode": "ask"},
    },
}


def _call(name, **arguments):
    return ToolCall(name, arguments, id="call_0_0")


def test_modes_from_tool_class_and_default():
    policy = PermissionPolicy.from_dict(CONFIG)
    d = policy.decide(_call("calculator", expression="1"))
    assert (d.allowed, d.rule, d.risk) == (True, "side_effects.read_only", None)
    d = policy.decide(_call("rm", path="x"))
    assert (d.allowed, d.rule, d.risk) == (False, "side_effects.irreversible", "denied")
    assert "rm" in d.reason and "denied" in d.reason
    d = policy.decide(
        _call("shell", cmd="ls")
    )  # the tool's own mode beats its class (read_only: allow)
    assert (d.allowed, d.rule, d.risk) == (False, "tools.shell.mode", "denied")
    d = policy.decide(_call("unlisted"))
    assert (d.allowed, d.rule, d.risk) == (False, "default", "denied")
    assert PermissionPolicy.from_dict({"default": "allow"}).decide(_call("unlisted")).allowed


@pytest.mark.parametrize(
    "path, allowed",
    [
        ("workspace/a.txt", True),
        ("workspace/deep/er/b.py", True),
        ("./workspace/a.txt", True),  # normalised
        ("notes.txt", True),
        ("other.txt", False),
        ("workspace/../secret", False),  # normalises to "secret": no glob matches
        ("../workspace/a.txt", False),  # climbs out
        ("workspace/../../etc/passwd", False),
        ("/etc/passwd", False),  # absolute: relative globs never match
        ("/workspace/a.txt", False),
        ("", False),
    ],
)
def test_path_globs(path, allowed):
    d = PermissionPolicy.from_dict(CONFIG).decide(_call("write_file", path=path, content="x"))
    assert d.allowed is allowed
    if not allowed:
        assert (d.rule, d.risk) == ("tools.write_file.paths.path", "path_outside_workspace")
        assert repr(path) in d.reason


def test_path_argument_must_be_a_string_and_absent_is_not_checked():
    policy = PermissionPolicy.from_dict(CONFIG)
    assert policy.decide(_call("write_file", path=["workspace/a"])).risk == "path_outside_workspace"
    assert policy.decide(_call("write_file", content="no path")).allowed


def test_glob_semantics():
    assert glob_match("a/b/c.txt", "a/**")
    assert glob_match("a/x.txt", "a/*.txt") and not glob_match("a/b/x.txt", "a/*.txt")
    assert glob_match("a/1", "a/?") and not glob_match("a/12", "a/?")
    assert glob_match("/srv/ws/x", "/srv/ws/**") and not glob_match("/srv/ws/../etc", "/srv/ws/**")
    assert (
        glob_match("anything/rel", "**")
        and not glob_match("/abs", "**")
        and not glob_match("..", "**")
    )


def test_size_limits_global_and_per_tool():
    policy = PermissionPolicy.from_dict(CONFIG)
    # {"expression": "<x * n>"} encodes to n + 18 bytes; the global limit is 100
    assert policy.decide(_call("calculator", expression="1" * 82)).allowed
    d = policy.decide(_call("calculator", expression="1" * 83))
    assert (d.allowed, d.rule, d.risk) == (False, "max_argument_bytes", "argument_too_large")
    assert "101 bytes" in d.reason
    # size counts UTF-8 bytes: "é" is 2 bytes
    assert not policy.decide(_call("calculator", expression="é" * 42)).allowed
    # write_file has its own limit of 1000
    assert policy.decide(_call("write_file", path="notes.txt", content="x" * 500)).allowed
    d = policy.decide(_call("write_file", path="notes.txt", content="x" * 1000))
    assert (d.rule, d.risk) == ("tools.write_file.max_argument_bytes", "argument_too_large")


def test_ask_uses_the_default_answer_without_a_callback():
    denying = PermissionPolicy.from_dict(CONFIG)
    d = denying.decide(_call("fetch", url="http://x"))
    assert (d.allowed, d.rule, d.risk) == (False, "side_effects.network", "denied")
    assert "ask_default" in d.reason
    approving = PermissionPolicy.from_dict({**CONFIG, "ask_default": True})
    d = approving.decide(_call("deploy"))
    assert (d.allowed, d.rule, d.risk) == (True, "tools.deploy.mode", None)


def test_ask_callback_sees_the_call_and_decides():
    seen = []

    def ask(call):
        seen.append(call)
        return call.arguments.get("url") == "https://ok"

    policy = PermissionPolicy.from_dict(CONFIG, ask=ask)
    assert policy.decide(_call("fetch", url="https://ok")).allowed
    d = policy.decide(_call("fetch", url="https://evil"))
    assert (d.allowed, d.risk) == (False, "denied") and "callback" in d.reason
    assert [c.arguments["url"] for c in seen] == ["https://ok", "https://evil"]
    # denials before the ask step never reach the callback
    policy.decide(_call("rm", path="x"))
    assert len(seen) == 2


def test_a_raising_callback_denies():
    def ask(call):
        raise RuntimeError("no terminal")

    d = PermissionPolicy.from_dict(CONFIG, ask=ask).decide(_call("fetch", url="u"))
    assert not d.allowed and "RuntimeError: no terminal" in d.reason


def test_allow_all_helper():
    policy = PermissionPolicy.allow_all({"calculator": "read_only"})
    assert policy.decide(_call("calculator", expression="1")).allowed
    assert not policy.decide(_call("other")).allowed


def test_default_policy_is_deny_with_class_defaults():
    policy = PermissionPolicy()
    assert not policy.decide(_call("anything")).allowed
    assert dict(policy.side_effects) == {
        "read_only": "allow",
        "workspace_write": "allow",
        "network": "deny",
        "irreversible": "deny",
    }


@pytest.mark.parametrize(
    "config, key",
    [
        ({"defualt": "deny"}, "tools.permissions.defualt"),
        ({"side_effects": {"nework": "deny"}}, "tools.permissions.side_effects.nework"),
        ({"tools": {"w": {"pathz": {}}}}, "tools.permissions.tools.w.pathz"),
        ({"default": "maybe"}, "tools.permissions.default"),
        ({"tools": {"w": {"mode": "sometimes"}}}, "tools.permissions.tools.w.mode"),
        ({"tools": {"w": {"side_effect": "nuclear"}}}, "tools.permissions.tools.w.side_effect"),
        ({"tools": {"w": {"paths": {"path": []}}}}, "tools.permissions.tools.w.paths.path"),
        ({"max_argument_bytes": 0}, "tools.permissions.max_argument_bytes"),
        ({"ask_default": "yes"}, "tools.permissions.ask_default"),
        ({"tools": ["w"]}, "tools.permissions.tools"),
    ],
)
def test_config_errors_name_the_key(config, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        PermissionPolicy.from_dict(config)


def test_policy_is_frozen_and_comparable():
    a, b = (
        PermissionPolicy.from_dict(CONFIG),
        PermissionPolicy.from_dict(CONFIG, ask=lambda c: True),
    )
    assert a == b  # the callback is not configuration
    with pytest.raises(AttributeError):
        a.default = "allow"


@pytest.mark.parametrize(
    "path, pattern, matches",
    [
        ("a.py", "**/*.py", True),  # **/ matches zero directories too (gitignore semantics)
        ("src/a.py", "**/*.py", True),
        ("src/deep/a.py", "**/*.py", True),
        ("a.txt", "**/*.py", False),
        ("src/a.pyc", "**/*.py", False),
        ("a/b", "a/**/b", True),
        ("a/x/y/b", "a/**/b", True),
        ("a/xb", "a/**/b", False),
        ("workspace/x/y", "workspace/**", True),
        ("workspace", "workspace/**", False),  # below the folder only, as before
        ("/srv/a.py", "/srv/**/*.py", True),
        ("../a.py", "**/*.py", False),  # climbing out never matches
    ],
)
def test_double_star_slash_matches_zero_or_more_directories(path, pattern, matches):
    assert glob_match(path, pattern) is matches


def test_a_path_rule_for_an_argument_the_tool_lacks_is_rejected():
    from agentic_rl.tools import ToolExecutor
    from agentic_rl.tools.definition.tool import tool

    @tool
    def write_file(path: str, content: str) -> str:
        """Write a file.

        Args:
            path: where.
            content: what.
        """
        return "ok"

    typo = {
        "tools": {
            "write_file": {"side_effect": "workspace_write", "paths": {"file": ["workspace/**"]}}
        }
    }
    policy = PermissionPolicy.from_dict(typo)  # the table alone is well formed
    assert policy.decide(
        _call("write_file", path="/etc/passwd", content="x")
    ).allowed  # the fail-open it prevents
    with pytest.raises(
        ValueError, match=r"tools\.permissions\.tools\.write_file\.paths\.file: .*content, path"
    ):
        ToolExecutor({"write_file": write_file}, policy)
    ok = PermissionPolicy.from_dict(
        {
            "tools": {
                "write_file": {
                    "side_effect": "workspace_write",
                    "paths": {"path": ["workspace/**"]},
                }
            }
        }
    )
    ToolExecutor({"write_file": write_file}, ok)  # a rule for a real argument is fine
    ToolExecutor({}, policy)  # a tool the executor does not offer is not checked


def test_sandbox_tools_reject_a_path_rule_for_a_missing_argument():
    from agentic_rl.tools.sandbox.env_tools import SandboxedTools

    typo = {
        "tools": {"write_file": {"side_effect": "workspace_write", "paths": {"filename": ["**"]}}}
    }
    with pytest.raises(ValueError, match=r"tools\.permissions\.tools\.write_file\.paths\.filename"):
        SandboxedTools(permissions=typo)


def test_a_rule_for_a_tool_the_env_lacks_is_rejected():
    """Issue 39, item 2: with default = "deny" a rule for 'calculatr' denied every calculator
    call for a whole training run; the envs check a user's table against their tools."""
    from agentic_rl.envs import make

    typo = {"default": "deny", "tools": {"calculatr": {"side_effect": "read_only"}}}
    policy = PermissionPolicy.from_dict(typo)
    assert not policy.decide(_call("calculator", expression="1+1")).allowed  # the silent fault
    with pytest.raises(ValueError, match=r"tools\.permissions\.tools\.calculatr: .*'calculator'"):
        policy.check_tool_names(["calculator", "search"])
    policy.check_tool_names(["calculatr"])  # a rule for a real tool is fine
    with pytest.raises(ValueError, match="did you mean 'calculator'.*its tools: calculator"):
        make("calculator-v0", permissions=typo)  # ToolEnv.setup_tools
    make("calculator-v0", permissions={"default": "deny"}).close()  # no rule: nothing to check


def test_sandbox_tools_reject_a_rule_for_a_tool_they_do_not_offer():
    from agentic_rl.tools.sandbox.env_tools import SandboxedTools

    typo = {"tools": {"pyton": {"side_effect": "workspace_write"}}}
    with pytest.raises(ValueError, match=r"tools\.permissions\.tools\.pyton: .*'python'"):
        SandboxedTools(permissions=typo, names=("python",))


def test_code_repair_rejects_a_rule_for_a_tool_it_does_not_have():
    from agentic_rl.envs import make

    typo = {"tools": {"submitt": {"side_effect": "read_only"}}}
    with pytest.raises(ValueError, match=r"tools\.permissions\.tools\.submitt: .*'submit'"):
        make("code-repair-v0", permissions=typo)
