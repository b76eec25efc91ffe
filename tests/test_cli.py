"""The ``agentic-rl`` command line, run as a subprocess.

User errors (wrong key, env id, model path, config file, run directory) must print exactly one
line ``error: …`` naming the culprit on stderr and exit with status 2, without a traceback, and
before any model weights load. The subprocess commands are started together (they spend most
of their time importing torch) and their results shared by the tests; a few more cases call
:func:`agentic_rl.cli.main.main` in-process.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

NOT_A_RUN_DIR = "not-a-run"

COMMANDS = {
    "bogus_key": ["train", "--set", "algorithm.bogus=1"],
    "unknown_env": ["train", "--set", "env.id=nope-v0", "--set", "output_dir=out-env"],
    "bad_model": ["train", "--set", "model.path=/nonexistent/x", "--set", "output_dir=out-model"],
    "missing_config": ["train", "--config", "/nonexistent.toml"],
    "missing_resume": ["train", "--resume", "/nonexistent"],
    "envs": ["envs"],
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("cli")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "agentic_rl.cli", *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, args in COMMANDS.items()
    }
    out = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=300)
        out[name] = (proc.returncode, stdout, stderr)
    out["cwd"] = cwd
    return out


def _one_error_line(result) -> str:
    rc, _stdout, stderr = result
    assert rc == 2, stderr
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_unknown_config_key(results):
    line = _one_error_line(results["bogus_key"])
    assert "'algorithm.bogus'" in line and "--set" in line


def test_unknown_env_id(results):
    line = _one_error_line(results["unknown_env"])
    assert "'nope-v0'" in line and "agentic-rl envs" in line


def test_missing_model_path(results):
    assert _one_error_line(results["bad_model"]) == "error: model path not found: /nonexistent/x"


def test_missing_config_file(results):
    assert (
        _one_error_line(results["missing_config"])
        == "error: config file not found: /nonexistent.toml"
    )


def test_missing_resume_dir(results):
    assert (
        _one_error_line(results["missing_resume"]) == "error: run directory not found: /nonexistent"
    )


def test_envs_lists_calculator(results):
    rc, stdout, stderr = results["envs"]
    assert rc == 0, stderr
    assert stdout.split()[0] == "calculator-v0"
    assert "calculator tool" in stdout


def test_a_closed_stdout_ends_the_command_quietly():
    """Issue 39, item 6: ``agentic-rl envs | head`` printed a BrokenPipeError traceback and
    exited 1; every command now stops as Unix tools do (status 141 = 128 + SIGPIPE)."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write, as after `head` exits
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "agentic_rl.cli", "envs"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 141 and proc.stderr == "", proc.stderr


def test_a_broken_pipe_that_is_not_stdout_stays_an_error(monkeypatch, capsys):
    """Only a closed standard output is quiet: a BrokenPipeError from a socket or a child's
    pipe is a real failure (here stdout is pytest's capture, which no reader closed)."""
    import importlib

    # the module: the package's attribute `main` is the function of that name
    cli_main = importlib.import_module("agentic_rl.cli.main")

    def broken(_args):
        raise BrokenPipeError("a child's pipe")

    monkeypatch.setattr(cli_main, "_cmd_check_env", broken)
    with pytest.raises(BrokenPipeError):
        cli_main.main(["check-env", "calculator-v0"])


def test_config_errors_create_no_run_directory(results):
    assert not (results["cwd"] / "runs").exists()


def test_env_and_model_errors_create_no_run_directory(results):
    assert not (results["cwd"] / "out-env").exists()
    assert not (results["cwd"] / "out-model").exists()


# -- in-process ------------------------------------------------------------------------------


def _main(args, capsys):
    from agentic_rl.cli import main

    rc = main(args)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_out_of_range_value(capsys):
    line = _one_error_line(_main(["train", "--set", "algorithm.steps=0"], capsys))
    assert "'algorithm.steps' must be > 0" in line


def test_resume_from_a_directory_that_is_not_a_run(tmp_path, capsys):
    (tmp_path / NOT_A_RUN_DIR).mkdir()
    line = _one_error_line(_main(["train", "--resume", str(tmp_path / NOT_A_RUN_DIR)], capsys))
    assert "not a run directory" in line and NOT_A_RUN_DIR in line


def test_resume_from_a_run_without_checkpoint(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.toml").write_text("")
    line = _one_error_line(_main(["train", "--resume", str(tmp_path / "run")], capsys))
    assert "no checkpoint to resume from" in line


def test_no_command_is_a_usage_error(capsys):
    from agentic_rl.cli import main

    with pytest.raises(SystemExit) as exc_info:
        main([])
    assert exc_info.value.code == 2 and "usage:" in capsys.readouterr().err


@pytest.mark.parametrize(
    "override, culprit",
    [
        ("env.id=nope-v0", "nope-v0"),
        ("model.path=/nonexistent/x", "/nonexistent/x"),
        ("env.kwargs={levels=['calculus']}", "calculus"),
        ("env.kwargs={colour='red'}", "colour"),
        ("warmup.env_kwargs={levels=['calculus']}", "calculus"),
    ],
)
def test_user_errors_are_raised_before_any_weights_load(
    override, culprit, tmp_path, capsys, monkeypatch
):
    """setup() checks the env id/kwargs and resolves the model path before loading anything."""
    import agentic_rl.trainer.records.model_setup as model_setup
    import agentic_rl.trainer.run as run

    def must_not_load(*args, **kwargs):
        raise AssertionError("model or tokenizer loaded before the user error was reported")

    monkeypatch.setattr(model_setup, "load_model", must_not_load)
    monkeypatch.setattr(run, "load_tokenizer", must_not_load)
    rc, out, err = _main(["train", "--set", override, "--set", f"output_dir='{tmp_path}'"], capsys)
    line = _one_error_line((rc, out, err))
    assert culprit in line


def test_library_debug_logging_is_not_printed():
    """bm25s sets its logger to DEBUG on import; the CLI must not print those records."""
    import subprocess
    import sys

    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from agentic_rl.cli import main; raise SystemExit(main())",
            "check-env",
            "memory-recall-v0",
            "--seeds",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "passed" in out.stdout
    assert "DEBUG" not in out.stderr and "DEBUG" not in out.stdout
