"""ANSI stripping and the action syntax of the game adapters."""

from agentic_rl.envs.games.text import last_bracketed, parse_action, strip_ansi

NAMES = ("left", "down", "right", "up")


def test_strip_ansi_removes_colour_codes_only():
    # FrozenLake's ANSI render highlights the agent's cell with a red background
    assert strip_ansi("\n\x1b[41mS\x1b[0mFFF\nFHFH\n") == "\nSFFF\nFHFH\n"
    assert strip_ansi("|\x1b[34;1mB\x1b[0m: |") == "|B: |"
    assert strip_ansi("plain [text]") == "plain [text]"


def test_parse_action_tag_name_and_index():
    assert parse_action("I go <action>right</action>", NAMES) == (2, "")
    assert parse_action("<action> UP </action>", NAMES) == (3, "")
    assert parse_action("<action>1</action>", NAMES) == (1, "")
    assert parse_action("<action>down</action><action>up</action>", NAMES) == (
        1,
        "",
    )  # the first tag counts
    assert parse_action("  left \n", NAMES) == (0, "")  # a bare name is accepted


def test_parse_action_invalid_replies_give_reasons():
    assert parse_action("go left", NAMES) == (None, "no <action>...</action> tag in the reply")
    index, reason = parse_action("<action>jump</action>", NAMES)
    assert index is None and "jump" in reason
    assert parse_action("<action>4</action>", NAMES)[0] is None  # out of range
    assert parse_action("<action>-1</action>", NAMES)[0] is None
    assert parse_action("", NAMES)[0] is None


def test_last_bracketed():
    assert last_bracketed("first [A B] then [A C]") == "[A C]"
    assert last_bracketed("no move") is None
    assert last_bracketed("[1 2\n3]") is None  # a move never spans lines
