"""The rollout backend of a run (``[rollout] backend``, ``--rollout-backend``, ``--base-url``):
config errors name their key, the local backend's sync/version/stamping, a tiny training run
through the backend (weight-sync time, staleness and policy versions logged and stored), and
the backend is closed at the end of a run and when it fails.

No test here talks to a live server (only a closed port): a training run through a real vLLM
server started by the run is in tests/trainer/sampling/test_backend_vllm.py, and ``agentic-rl train
--rollout-backend openai --base-url URL`` against a live vLLM server in
tests/policy/test_openai_vllm.py.
"""

from __future__ import annotations

import math

import pytest

from agentic_rl.config import load_config
from agentic_rl.errors import ConfigError
from agentic_rl.trainer.sampling.backends import RolloutBackend, make_backend
from agentic_rl.types import StopReason, Trajectory


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["rollout.backend='openai'"], "rollout.base_url"),
        (["rollout.backend='sglang'"], "rollout.backend"),
        (["rollout.base_url='http://127.0.0.1:1/v1'"], "rollout.base_url"),
        (["rollout.backend='vllm'", "rollout.base_url='http://x/v1'"], "rollout.base_url"),
        (["rollout.backend=3"], "rollout.backend"),
    ],
)
def test_backend_config_errors_name_the_key(overrides, key):
    with pytest.raises(ConfigError) as exc_info:
        load_config(None, overrides)
    assert key in str(exc_info.value)


def test_openai_backend_with_a_url_loads():
    cfg = load_config(None, ["rollout.backend='openai'", "rollout.base_url='http://h:8000/v1'"])
    assert (cfg.rollout.backend, cfg.rollout.base_url) == ("openai", "http://h:8000/v1")
    assert load_config(None, []).rollout.backend == "local"


def test_cli_flags_become_rollout_keys(capsys):
    from agentic_rl.cli import main
    from agentic_rl.cli.main import backend_overrides, build_parser

    args = build_parser().parse_args(
        ["train", "--rollout-backend", "openai", "--base-url", "http://127.0.0.1:8000/v1"]
    )
    assert backend_overrides(args) == [
        'rollout.backend="openai"',
        'rollout.base_url="http://127.0.0.1:8000/v1"',
    ]
    # openai without a URL: one error line naming the key, before any weights load
    assert main(["train", "--rollout-backend", "openai"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "rollout.base_url" in err[0], err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--rollout-backend", "sglang"])


def test_unset_api_key_variable_is_a_config_error(tmp_path, monkeypatch):
    monkeypatch.delenv("AGENTIC_RL_TEST_NO_SUCH_KEY", raising=False)
    cfg = load_config(
        None,
        [
            "rollout.backend='openai'",
            "rollout.base_url='http://127.0.0.1:1/v1'",
            "rollout.api_key_env='AGENTIC_RL_TEST_NO_SUCH_KEY'",
        ],
    )
    with pytest.raises(ConfigError, match="rollout.api_key_env"):
        make_backend(cfg.rollout, cfg.model, tmp_path, tmp_path, None, 0)


def _traj(tid: str, version: int | None = None) -> Trajectory:
    return Trajectory(
        "x-v0",
        0,
        "g",
        tid,
        (),
        (),
        (1, 2),
        (0, 1),
        (0.0, -1.0),
        StopReason.TERMINATED,
        policy_version=version,
    )


class _Sampler:
    cleared = 0

    def clear_cache(self) -> None:
        self.cleared += 1


def test_local_backend_syncs_for_free_and_stamps_its_version(tmp_path):
    cfg = load_config(None, [])
    sampler = _Sampler()
    backend = make_backend(cfg.rollout, cfg.model, tmp_path, tmp_path, sampler, 0)
    assert type(backend) is RolloutBackend and backend.policy is sampler
    assert backend.sync(object(), 3) == 0.0 and backend.version == 3
    out = backend.finish_round([_traj("a"), _traj("b", version=1)])
    assert [t.policy_version for t in out] == [3, 1]  # a version already recorded is kept
    assert sampler.cleared == 1
    backend.close()


def _tiny(tiny_model_dir, tmp_path, steps: int) -> list[str]:
    from tests.recipe_settings import tiny_rl_overrides

    return tiny_rl_overrides(tiny_model_dir, tmp_path, steps, "rollout.backend='local'")


def test_training_through_the_local_backend_logs_sync_and_versions(
    tiny_model_dir, tmp_path, monkeypatch
):
    from agentic_rl.trainer import run as run_module
    from agentic_rl.trainer.recipe import train
    from agentic_rl.trainer.records.run_dir import MetricsLog
    from agentic_rl.trajectories import TrajectoryStore

    built: list[RolloutBackend] = []

    class Recording(RolloutBackend):
        syncs: list[int]
        closed = 0

        def sync(self, model, version):
            self.syncs.append(version)
            return super().sync(model, version)

        def close(self):
            self.closed += 1

    def make(*args, **kwargs):
        backend = Recording(make_backend(*args, **kwargs).policy)
        backend.syncs = []
        built.append(backend)
        return backend

    monkeypatch.setattr(run_module, "make_backend", make)
    run_dir = train(load_config(None, _tiny(tiny_model_dir, tmp_path, steps=2)))
    (backend,) = built
    assert backend.syncs == [0, 1, 2]  # before RL, then after each RL step
    assert backend.closed == 1
    rl = [r for r in MetricsLog(run_dir / "metrics.jsonl").rows() if r.get("phase") == "rl"]
    for r in rl:
        assert r["perf/weight_sync_s"] == 0.0
        assert r["rollout/staleness_mean"] == 0.0 and r["rollout/staleness_max"] == 0.0
        assert math.isfinite(r["perf/update_time_s"])
    versions = {
        (rec["rl_step"], rec["policy_version"])
        for rec in TrajectoryStore(run_dir / "trajectories").read(phase="rl")
    }
    assert versions == {(1, 0), (2, 1)}  # step s sampled with the weights after s − 1 steps


def test_the_backend_is_closed_when_the_run_fails(tiny_model_dir, tmp_path, monkeypatch):
    from agentic_rl.trainer import recipe
    from agentic_rl.trainer import run as run_module

    closed: list[bool] = []

    class Closing(RolloutBackend):
        def close(self):
            closed.append(True)

    monkeypatch.setattr(run_module, "make_backend", lambda *a, **k: Closing(a[4]))

    def boom(*args, **kwargs):
        raise RuntimeError("rollout failed")

    monkeypatch.setattr(recipe, "rl_step", boom)
    with pytest.raises(RuntimeError, match="rollout failed"):
        recipe.train(load_config(None, _tiny(tiny_model_dir, tmp_path, steps=1)))
    assert closed == [True]


def test_unreachable_openai_server_is_a_config_error(tmp_path):
    pytest.importorskip("openai", reason="the optional extra 'openai' is not installed")
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = load_config(
        None, ["rollout.backend='openai'", f"rollout.base_url='http://127.0.0.1:{port}/v1'"]
    )
    with pytest.raises(ConfigError, match="rollout.base_url: cannot list the models"):
        make_backend(cfg.rollout, cfg.model, tmp_path, tmp_path, None, 0)
