"""The guides' code runs as written: each example file and each command a guide shows.

The code blocks are read from the pages themselves (```python title="FILE"```), written to a
temporary folder and run there in a fresh interpreter, with the commands the page prints, so a
guide cannot describe an API that no longer exists. Each runs in its own process because the
examples register env ids in the process-wide registry.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.recipe_settings import TWO_STEP_SMOKE

ROOT = Path(__file__).resolve().parents[2]
GUIDES = ROOT / "docs" / "guides"


def code_block(page: str, title: str) -> str:
    """The text of the ```python title="TITLE"``` block of ``docs/guides/PAGE``."""
    text = (GUIDES / page).read_text(encoding="utf-8")
    match = re.search(rf'```python title="{re.escape(title)}"\n(.*?)```', text, re.S)
    assert match, f"docs/guides/{page} has no code block titled {title}"
    return match.group(1)


def shown_commands(page: str, module: str) -> list[str]:
    """The ``python -c "import MODULE; ..."`` commands that ``docs/guides/PAGE`` prints."""
    text = (GUIDES / page).read_text(encoding="utf-8")
    commands = re.findall(rf'^python -c "(import {module};[^"]*)"', text, re.M)
    assert commands, f"docs/guides/{page} shows no 'python -c \"import {module}; ...\"' command"
    return commands


def run_python(code: str, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """``python -c CODE`` in ``cwd`` (where the example file lies), as the guide runs it."""
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


def _example(tmp_path: Path, page: str, title: str) -> Path:
    (tmp_path / title).write_text(code_block(page, title), encoding="utf-8")
    return tmp_path


def agentic_rl_commands(page: str) -> list[list[str]]:
    """The ``agentic-rl ...`` command lines that ``docs/guides/PAGE`` shows, split into words."""
    text = (GUIDES / page).read_text(encoding="utf-8")
    commands = [line.split() for line in re.findall(r"^agentic-rl [^\n#]*", text, re.M)]
    assert commands, f"docs/guides/{page} shows no agentic-rl command"
    return commands


def run_cli(words: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """An ``agentic-rl`` command line run in ``cwd`` with the installed console script (which,
    unlike ``python -m``, does not put the current directory on the module path)."""
    script = Path(sys.executable).parent / "agentic-rl"
    return subprocess.run(
        [str(script), *words[1:]],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


def _command(page: str, verb: str) -> list[str]:
    (words,) = [w for w in agentic_rl_commands(page) if w[1] == verb]
    return words


def test_write_an_env_passes_check_env_with_the_command_shown(tmp_path):
    folder = _example(tmp_path, "write_an_env.md", "letter_count.py")
    result = run_cli(_command("write_an_env.md", "check-env"), folder)
    assert result.returncode == 0, result.stderr
    assert "letter_count:LetterCountEnv: passed 10 checks" in result.stdout
    assert "oracle success 100%" in result.stdout


def test_write_an_env_is_a_tool_env_of_at_most_40_lines_written_with_hooks_only():
    """Issue 38: a new tool env (a task, one tool, a rubric, an oracle) is <= 40 lines in one
    file; it writes hooks (new_task, grade_answer, oracle_turn, rubric), not the step protocol."""
    code = code_block("write_an_env.md", "letter_count.py")
    assert len(code.splitlines()) <= 40, len(code.splitlines())
    defined = set(re.findall(r"^    def (\w+)\(", code, re.M))
    assert defined == {"__init__", "new_task", "grade_answer", "oracle_turn", "rubric"}
    assert not re.search(r"self\._(done|turn|trajectory_id)\b", code)  # no private base field


def test_write_an_env_is_a_tool_env_whose_bad_answer_scores_zero(tmp_path):
    """The example is honest: a wrong answer fails, a tool call is a tool turn with its result."""
    folder = _example(tmp_path, "write_an_env.md", "letter_count.py")
    code = """
from agentic_rl.envs import make
from agentic_rl.tools import parse_tool_calls
from agentic_rl.types import Action
env = make("letter_count:LetterCountEnv")
obs, _ = env.reset(seed=7)            # word 7 % 5 = mississippi, letter 7 // 5 = index 1: 'i'
assert "'i' occur in 'mississippi'" in obs.messages[1].content, obs.messages[1].content
reply = '<tool_call>{"name": "count_letter", "arguments": {"word": "mississippi", "letter": "i"}}</tool_call>'
calls, errors = parse_tool_calls(reply)
obs, reward, done, _, info = env.step(Action(reply, calls, errors))
assert obs.messages[0].content == "4" and not done and info["tool_calls"] == 1
obs, reward, done, _, info = env.step(Action("<answer>5</answer>"))
assert done and reward == 0.0 and info == {"correct": False}
print("ok")
"""
    result = run_python(code, folder)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_write_an_env_trains_evaluates_and_replays_with_the_commands_shown(
    tmp_path, tiny_model_dir
):
    """The guide's train, eval and replay commands with the env's module:Class id, on the tiny
    model and a two-step recipe: a whole run, evaluated and replayed from the example's folder."""
    folder = _example(tmp_path, "write_an_env.md", "letter_count.py")
    out = tmp_path / "runs"
    sets = [f"model.path='{tiny_model_dir}'", f"output_dir='{out}'", *TWO_STEP_SMOKE]
    train = _command("write_an_env.md", "train") + [a for s in sets for a in ("--set", s)]
    result = run_cli(train, folder)
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = out.iterdir()
    config = tomllib.loads((run / "config.toml").read_text())
    assert config["env"]["id"] == "letter_count:LetterCountEnv"
    summary = json.loads((run / "summary.json").read_text())
    assert set(summary["success"]) >= {"warmup", "final"}
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["rl_step"] for r in rows if r.get("phase") == "rl"] == [1, 2]
    evaluate = [
        w.replace("runs/calculator-grpo", str(run)) for w in _command("write_an_env.md", "eval")
    ]
    result = run_cli([*evaluate[:-1], "2"], folder)  # 2 episodes, not the page's 20
    assert result.returncode == 0, result.stderr[-3000:]
    replay = [
        w.replace("runs/calculator-grpo", str(run)) for w in _command("write_an_env.md", "replay")
    ]
    result = run_cli([*replay, "--limit", "4"], folder)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


def test_add_a_tool_runs_and_prints_what_the_page_says(tmp_path):
    folder = _example(tmp_path, "add_a_tool.md", "tool_demo.py")
    result = run_python(Path(folder / "tool_demo.py").read_text(), folder)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1:] == ["26.219 mi", "16.093 km"]  # the values in the page's comments
    schema = eval(lines[0])  # noqa: S307 - the repr of a JSON schema dict printed by the example
    assert schema["properties"]["unit"]["enum"] == ["km", "mi"]
    (record,) = [json.loads(x) for x in (folder / "audit.jsonl").read_text().splitlines()]
    assert (record["tool"], record["decision"], record["ok"]) == ("convert", "allow", True)


def test_add_a_reward_prints_the_total_shown_and_passes_check_env(tmp_path):
    folder = _example(tmp_path, "add_a_reward.md", "reward_demo.py")
    page = (GUIDES / "add_a_reward.md").read_text(encoding="utf-8")
    shown = re.search(r"\$ python reward_demo.py\n(.*?)\n```", page, re.S).group(1)
    result = run_python("import reward_demo", folder)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == shown.strip()
    for command in shown_commands("add_a_reward.md", "reward_demo"):
        if "check-env" in command:
            checked = run_python(command, folder)
            assert checked.returncode == 0, checked.stderr
            assert "careful-calculator-v0: passed" in checked.stdout


def test_add_a_reward_component_counts_repeated_calls(tmp_path):
    folder = _example(tmp_path, "add_a_reward.md", "reward_demo.py")
    code = """
import contextlib, io
with contextlib.redirect_stdout(io.StringIO()):
    import reward_demo
from agentic_rl.types import Action, Observation, StopReason, ToolCall, Trajectory, Turn
a, b = ToolCall("calculator", {"expression": "2*3"}), ToolCall("calculator", {"expression": "2*4"})
turns = tuple(Turn.from_step(i, Action("", calls), Observation(()), 0.0, {})
              for i, calls in enumerate([(a, b), (a,), (b, a)]))
t = Trajectory("x", 0, "g", "t", (), turns, (), (), (), StopReason.TERMINATED)
print(reward_demo.repeated_calls(t))
"""
    result = run_python(code, folder)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "3.0"  # a again in turn 1, b and a again in turn 2


@pytest.mark.parametrize("page", sorted(p.name for p in GUIDES.glob("*.md")))
def test_every_titled_python_block_of_a_guide_is_run_by_a_test(page):
    """A new titled example in a guide needs a test here (this file names each one)."""
    text = (GUIDES / page).read_text(encoding="utf-8")
    titles = re.findall(r'```python title="([^"]+)"', text)
    tested = Path(__file__).read_text(encoding="utf-8")
    for title in titles:
        assert f'"{page}", "{title}"' in tested, f"docs/guides/{page}: {title} is not run by a test"
