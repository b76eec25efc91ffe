"""User mistakes found by a fresh-user session: each must be one ``error:`` line, exit 2."""

from __future__ import annotations

import pytest

from agentic_rl.cli import main
from tests.recipe_settings import SIMPLE_SAMPLING


def _error_line(capsys, argv) -> str:
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error:"), err
    return err[0]


def test_a_gguf_path_that_is_not_gguf(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("AGENTIC_RL_CACHE", str(tmp_path / "cache"))
    bad = tmp_path / "model.gguf"
    bad.write_text("not a gguf")
    assert "not a loadable GGUF model" in _error_line(
        capsys, ["train", "--set", f"model.path='{bad}'"]
    )


def test_a_model_directory_without_a_model(tmp_path, capsys):
    (tmp_path / "config.json").write_text("{}")
    assert "no loadable" in _error_line(capsys, ["eval", "--model", str(tmp_path)])


def test_config_path_is_a_directory(tmp_path, capsys):
    assert "cannot read config file" in _error_line(capsys, ["train", "--config", str(tmp_path)])


def test_config_file_is_binary(tmp_path, capsys):
    path = tmp_path / "bin.toml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    assert "not valid TOML" in _error_line(capsys, ["train", "--config", str(path)])


@pytest.mark.parametrize("name", ["a/b", "..", ""])
def test_run_name_must_be_a_plain_directory_name(name, capsys):
    assert "'name'" in _error_line(capsys, ["train", "--set", f"name='{name}'"])


def test_output_dir_that_is_a_file(tmp_path, capsys):
    path = tmp_path / "file"
    path.write_text("")
    line = _error_line(
        capsys, ["train", "--set", f"output_dir='{path}'", "--set", "eval.base=false"]
    )
    assert "output_dir is not a directory" in line


def test_levels_given_as_a_string(capsys):
    assert "non-empty list" in _error_line(
        capsys, ["train", "--set", "env.kwargs={levels='direct'}"]
    )


@pytest.mark.parametrize(
    "override, key",
    [
        ("optim.lr=inf", "optim.lr"),
        ("loss.kl_coef=nan", "loss.kl_coef"),
        ("warmup.lr=inf", "warmup.lr"),
        ("reward.outcome=nan", "reward.outcome"),
        ("seed=99999999999999999999999999", "seed"),
        ("seed=-1", "seed"),
    ],
)
def test_non_finite_or_out_of_range_numbers(override, key, capsys):
    assert f"'{key}'" in _error_line(capsys, ["train", "--set", override])


@pytest.mark.parametrize(
    "output_dir", ["/proc/agentic-rl-no-such-dir", "/proc/agentic-rl-no-such-dir/runs"]
)
def test_output_dir_that_cannot_be_created(output_dir, capsys):
    line = _error_line(
        capsys, ["train", "--set", f"output_dir='{output_dir}'", "--set", "eval.base=false"]
    )
    assert "cannot create output_dir" in line and output_dir in line


def test_training_that_diverges_stops_with_one_error_and_no_final_model(
    tiny_model_dir, tmp_path, capsys
):
    """warm-up lr 1e30 (finite, so the config accepts it): the first step puts the weights near
    1e30, the second step's loss or gradient is NaN; training stops there, before that step
    changes a weight, and writes no final_model."""
    sets = [
        f"model.path='{tiny_model_dir}'",
        "model.num_threads=1",
        f"output_dir='{tmp_path}'",
        "eval.base=false",
        "warmup.num_demos=4",
        "warmup.batch_size=2",
        "warmup.lr=1e30",
        "algorithm.steps=1",
        *SIMPLE_SAMPLING,
        "eval.size=1",
    ]
    line = _error_line(capsys, ["train", *[a for s in sets for a in ("--set", s)]])
    assert "non-finite" in line and "warmup.lr" in line
    (run_dir,) = tmp_path.iterdir()
    assert not (run_dir / "final_model").exists() and not (run_dir / "checkpoints").exists()


def test_a_permission_rule_that_could_never_apply_is_rejected_at_load(capsys):
    """calculator(expression): a paths rule for an argument 'expr' would never check anything."""
    table = "{default='deny', tools={calculator={side_effect='read_only', paths={expr=['**']}}}}"
    line = _error_line(capsys, ["train", "--set", f"tools.permissions={table}"])
    assert "tools.permissions.tools.calculator.paths.expr" in line and "expression" in line


@pytest.mark.parametrize(
    "override, culprit",
    [  # issue 39, item 24: each was accepted or a traceback
        (f"algorithm.group_size={2**63 - 1}", "'algorithm.group_size' must be <= 1024"),
        (f"eval.size={2**62}", "'eval.size' must be <= 1000000"),
        ("loss.clip_eps_low=-0.5", "'loss.clip_eps_low' must be >= 0"),
        ("model.lora_alpha=-3", "'model.lora_alpha' must be > 0"),
        ("rollout.temperature=1e-300", "'rollout.temperature' must be >= 0.01"),
        (r'name="a\nb"', "'name' must not contain control characters"),
        (r'name="a\u0000b"', "'name' must not contain control characters"),
        ('output_dir=""', "'output_dir' must be a directory path"),
        (f"model.num_threads={2**40}", "'model.num_threads' must be <= 4096"),
        (
            "env.kwargs={mcp_servers=[{name='s', url='http://127.0.0.1:9/mcp', call_timeout_s=inf}]}",
            "call_timeout_s must be > 0 and <= 86400",
        ),
    ],
)
def test_out_of_range_values_are_one_error_line(override, culprit, capsys):
    assert culprit in _error_line(capsys, ["train", "--set", override])


def test_an_mcp_server_that_cannot_start_at_validation_is_one_error_line(tmp_path, capsys):
    pytest.importorskip("fastmcp")
    server = "{name='s', command='/nonexistent/mcp-server', sandbox='none', startup_timeout_s=20}"
    line = _error_line(capsys, ["train", "--set", f"env.kwargs={{mcp_servers=[{server}]}}"])
    assert "env.kwargs.mcp_servers" in line and "'s'" in line


def test_a_permission_rule_for_a_tool_the_env_lacks_is_rejected_at_load(capsys):
    """Issue 39, item 2: default deny + a rule for 'calculatr' used to train with every calculator
    call denied; it is a config error naming the env's tools."""
    table = "{default='deny', tools={calculatr={side_effect='read_only'}}}"
    line = _error_line(capsys, ["train", "--set", f"tools.permissions={table}"])
    assert "tools.permissions.tools.calculatr" in line
    assert "did you mean 'calculator'" in line and "its tools: calculator" in line


def test_an_unknown_env_id_suggests_the_closest_and_stays_short(capsys):
    """Issue 39, item 7: not every id on one 600-character line."""
    line = _error_line(capsys, ["train", "--set", "env.id=frozenlak-v0"])
    assert "did you mean 'frozenlake-v0'" in line and "agentic-rl envs" in line
    assert "web-shop-v0" not in line and len(line) < 300


def test_an_unknown_env_kwarg_lists_the_accepted_ones(capsys):
    """Issue 39, item 8."""
    line = _error_line(capsys, ["train", "--set", "env.kwargs={level=['direct']}"])
    assert "'level'" in line and "did you mean 'levels'" in line
    assert "its arguments: levels, context" in line


def test_calculator_warmup_kwargs_on_another_env_say_what_to_do(tmp_path, capsys):
    """Issue 39, item 3, second half: a config file that still carries the calculator's warm-up
    level (a copy of configs/default.toml) gets the fix in its error line."""
    path = tmp_path / "c.toml"
    path.write_text('[env]\nid = "frozenlake-v0"\n[warmup.env_kwargs]\nlevels = ["direct"]\n')
    line = _error_line(capsys, ["train", "--config", str(path)])
    assert "warmup.env_kwargs rejected by frozenlake-v0" in line and "warmup.env_kwargs={}" in line


def test_train_model_flag_is_model_path(tmp_path, capsys):
    """Issue 39, item 4: the README's ``train --model DIR``."""
    missing = tmp_path / "no-model"
    assert _error_line(capsys, ["train", "--model", str(missing)]) == (
        f"error: model path not found: {missing}"
    )
    line = _error_line(capsys, ["train", "--model", "default", "--set", "model.path='x'"])
    assert "--model and --set model.path" in line
    line = _error_line(capsys, ["train", "--model", "default", "--resume", str(tmp_path)])
    assert "--model" in line
