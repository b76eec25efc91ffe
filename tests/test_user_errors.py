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
