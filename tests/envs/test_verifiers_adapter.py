"""The verifiers/<taskset>-v0 adapter on the real verifiers 0.4.0, in its own virtualenv
(``make install-verifiers``; skipped without it).

The taskset is tests/envs/verifiers_tasksets/vf_products, written in verifiers' own API
(verifiers ships no taskset that runs offline). The adapter in this process never imports
verifiers: its bridge runs in .venv-verifiers and scores each reply with the task's own
``@reward`` functions. The tests check the mapping, loud errors, the refusal of a multi-turn
taskset, both checkers, and a 2-step RL run with the tiny random model."""

from __future__ import annotations

import math
import os
import sys
import threading
import time
import warnings
from pathlib import Path

import gymnasium
import pytest
from gymnasium.envs.registration import EnvSpec
from gymnasium.utils.env_checker import check_env as gym_check_env

from agentic_rl.envs.adapters.verifiers import (
    PYTHON_ENV_VAR,
    VerifiersError,
    close_bridges,
    find_verifiers_python,
    resolve_verifiers_id,
)
from agentic_rl.errors import EnvUnavailableError

try:
    VF_PYTHON = find_verifiers_python()
except EnvUnavailableError as exc:  # pragma: no cover - depends on make install-verifiers
    pytest.skip(str(exc), allow_module_level=True)
if not any(VF_PYTHON.parent.parent.glob("lib/python*/site-packages/verifiers/v1")):
    pytest.skip(
        f"{VF_PYTHON} has no verifiers 0.4 (make install-verifiers)", allow_module_level=True
    )

from agentic_rl.cli.main import main  # noqa: E402
from agentic_rl.envs import make  # noqa: E402
from agentic_rl.envs.oracle_success import play_oracle  # noqa: E402
from agentic_rl.envs.registry import gymnasium_id  # noqa: E402
from agentic_rl.errors import UnknownEnvError  # noqa: E402
from agentic_rl.trainer.records.run_dir import MetricsLog  # noqa: E402
from agentic_rl.types import Action  # noqa: E402
from tests.recipe_settings import TWO_STEP_SMOKE  # noqa: E402

ENV_ID = "verifiers/vf_products-v0"
TASKSETS_DIR = Path(__file__).parent / "verifiers_tasksets"


@pytest.fixture(autouse=True)
def tasksets_importable(monkeypatch):
    """The bridge's Python finds the test tasksets through PYTHONPATH (they are not installed)."""
    paths = [str(TASKSETS_DIR), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))


@pytest.fixture(autouse=True, scope="module")
def stop_bridges():
    yield
    close_bridges()


def test_reset_and_step_score_with_the_tasks_own_rewards():
    env = make(ENV_ID)
    assert "verifiers" not in sys.modules  # the adapter never imports verifiers here
    assert env.bridge.process.args[0] == str(VF_PYTHON) and env.bridge.process.poll() is None
    obs, info = env.reset(seed=5)
    assert [(m.role, m.content) for m in obs.messages] == [
        ("system", "You are a careful calculator."),
        ("user", "What is 11 * 6? End your reply with the number."),
    ]
    assert info == {"verifiers_task": "products-5"} and env.oracle_reply() == "66"
    obs, reward, terminated, truncated, info = env.step(Action("11 * 6 = 66"))
    assert (obs.messages, reward, terminated, truncated) == ((), 1.0, True, False)
    assert info["verifiers_rewards"] == {"correct": 1.0, "has_number": 1.0}
    assert info["verifiers_weights"] == {"correct": 1.0, "has_number": 0.0}
    assert info["verifiers_metrics"] == {"reply_chars": 11.0}
    env.reset(seed=5)
    _, reward, _, _, info = env.step(Action("about 60"))
    assert reward == 0.0 and info["verifiers_rewards"] == {"correct": 0.0, "has_number": 1.0}


def test_same_seed_same_task_and_seeds_wrap_around_the_taskset():
    env = make(ENV_ID)
    first = [env.reset(seed=s) for s in (0, 1, 0, 64)]
    assert first[0] == first[2] == first[3] and first[0] != first[1]  # 64 tasks


def test_rubric_names_each_verifiers_reward():
    env = make(ENV_ID)
    total, components = env.rubric().score(play_oracle(env, seed=9, max_turns=2))
    assert components["verifiers_reward"] == 1.0
    assert components["vf_correct"] == 1.0 and components["vf_has_number"] == 1.0
    assert components["outcome"] == 1.0 and math.isfinite(total)


def test_errors_are_loud():
    env = make(ENV_ID)
    env.reset(seed=1)
    with pytest.raises(VerifiersError, match="asked to raise"):
        env.step(Action("raise"))  # vf_products' reward raises on this reply
    with pytest.raises(VerifiersError, match="unknown op"):
        env.bridge.request({"op": "nope"})
    with pytest.raises(EnvUnavailableError, match="taskset 'no_such_taskset' not found"):
        make("verifiers/no_such_taskset-v0")
    with pytest.raises(EnvUnavailableError, match="DialogEnv .*only single-turn"):
        make("verifiers/vf_dialog-v0")  # a taskset with its own multi-turn Env.run
    with pytest.raises(UnknownEnvError, match="verifiers/<taskset>-v0"):
        make("verifiers/vf_products-v1")


def test_python_lookup(monkeypatch):
    monkeypatch.setenv(PYTHON_ENV_VAR, "/nonexistent/python")
    with pytest.raises(EnvUnavailableError, match="verifiers python not found"):
        find_verifiers_python()
    monkeypatch.setenv(PYTHON_ENV_VAR, str(VF_PYTHON))
    assert find_verifiers_python() == VF_PYTHON
    assert "warmup.enabled" not in resolve_verifiers_id(ENV_ID).recipe_overrides  # an oracle


def test_gymnasium_check_env_passes():
    # the family lists no members (any importable taskset is one): gymnasium.make takes the spec
    # that register_family_in_gymnasium would register
    spec = EnvSpec(gymnasium_id(ENV_ID), "agentic_rl.envs.registry:make", kwargs={"env_id": ENV_ID})
    env = gymnasium.make(spec)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gym_check_env(env.unwrapped)
    assert [str(w.message) for w in caught] == []


def test_check_env_command_passes_with_the_answer_oracle(capsys):
    assert main(["check-env", ENV_ID, "--seeds", "3"]) == 0
    assert "oracle success 100%" in capsys.readouterr().out


def test_train_two_rl_steps_on_verifiers(tiny_model_dir, tmp_path):
    argv = ["train", "--env", ENV_ID]
    for item in [f"model.path='{tiny_model_dir}'", f"output_dir='{tmp_path}'", *TWO_STEP_SMOKE]:
        argv += ["--set", item]
    assert main(argv) == 0
    run_dir = next(p for p in Path(tmp_path).iterdir() if p.is_dir())
    rows = MetricsLog(run_dir / "metrics.jsonl").rows()
    warmup = [r for r in rows if r["phase"] == "warmup"]
    assert warmup and all(math.isfinite(r["train/loss"]) for r in warmup)  # answer demos
    rl = [r for r in rows if r["phase"] == "rl"]
    assert [r["rl_step"] for r in rl] == [1, 2]
    for r in rl:
        assert r["rollout/failed"] == 0.0 and "rollout/reward/vf_correct" in r


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_scorer_that_hangs_fails_its_episode_and_the_taskset_goes_on():
    """Issue 39 item 20: vf_hang's scorer blocks for an hour on the reply "hang". Before, the
    request had no deadline: env.step, and every env of the taskset (one shared bridge and
    lock), blocked for good. Now the step fails after its timeout, the bridge is killed, and
    an env of the same taskset waiting on the lock gets a fresh bridge."""
    env = make("verifiers/vf_hang-v0", timeout_s=2.0)
    other = make("verifiers/vf_hang-v0")  # the same bridge, the default timeout
    env.reset(seed=1)
    stuck_pid = env.bridge.process.pid
    failures: list[Exception] = []

    def hang() -> None:
        try:
            env.step(Action("hang"))
        except VerifiersError as exc:
            failures.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=hang)
    thread.start()
    time.sleep(0.5)  # the hanging request holds the bridge
    _, info = other.reset(seed=2)  # waits for it, then starts a fresh bridge
    thread.join(timeout=60)
    assert not thread.is_alive() and time.monotonic() - started < 60
    (failure,) = failures
    assert "no answer before the deadline" in str(failure) and "'score'" in str(failure)
    assert info == {"verifiers_task": "echo-2"} and _gone(stuck_pid)
    assert other.bridge.process.pid != stuck_pid and other.bridge.restarts == 1
    assert other.step(Action("2"))[1] == 1.0


def test_a_taskset_writing_to_stdout_cannot_answer_for_the_bridge():
    """Issue 39 item 20: vf_stray's scorer writes answer-shaped lines ("reward 1.0", for the
    next ids) to descriptor 1 with os.write, from a subprocess and with print. Before, the
    first was read as the answer: a wrong reply scored 1.0 and later answers came a request
    late. The protocol now has pipes of its own; descriptor 1 is the bridge's log."""
    env = make("verifiers/vf_stray-v0")
    env.reset(seed=1)
    assert env.step(Action("2"))[1] == 0.0  # wrong, and scored so
    _, info = env.reset(seed=3)
    assert info == {"verifiers_task": "say-3"}  # in step
    assert env.step(Action("3"))[1] == 1.0
    assert '"reward": 1.0' in env.bridge.stderr_tail() and env.bridge.restarts == 0
