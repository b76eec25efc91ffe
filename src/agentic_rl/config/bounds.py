"""The ranges config values must lie in, and the rules of config text (names, paths).

Every number of the config has a range (:class:`Bounds`, declared beside its field with the
helpers of :mod:`agentic_rl.config.rules`); every count, size and duration also has an upper
bound. The bounds are far above any run this trainer can do on one machine or a cluster; they
exist so that a typo (``group_size = 80000000``) or a hostile value (``2**63 - 1``) is one
``error:`` line at load instead of an allocation that grows the trainer until the OOM killer
ends it, a ``MemoryError`` or a timer that overflows (Python's timers take at most
``threading.TIMEOUT_MAX`` seconds). Coefficients without a natural limit (learning rates, loss
and reward weights) have a lower bound only; being finite is checked for every float key.

=================================================  =====================================
keys                                               upper bound
=================================================  =====================================
``algorithm.steps``, ``checkpoint_every``,         :data:`MAX_STEPS` (10 million)
``eval.every``, ``optim.lr_warmup_steps``
``algorithm.group_size``                           :data:`MAX_GROUP_SIZE` (1,024)
``algorithm.tasks_per_step``,                      :data:`MAX_ROLLOUTS_PER_STEP` (65,536);
``sampling.rollout_tasks``,                        also tasks × ``group_size`` per round
``sampling.guidance_groups``
``sampling.max_sample_rounds``                     :data:`MAX_ROUNDS` (1,000)
``algorithm.max_off_policy_steps``                 :data:`MAX_ROUNDS` (1,000)
``eval.size``, ``warmup.num_demos``                :data:`MAX_EPISODES` (1 million)
``warmup.epochs``, ``optim.ppo_epochs``            :data:`MAX_EPOCHS` (1,000)
``warmup.batch_size``, ``optim.micro_batch_size``, :data:`MAX_BATCH` (65,536)
``optim.minibatches``, ``model.max_batch``
``rollout.max_new_tokens``,                        :data:`MAX_TOKENS` (2**24, 16.8 million)
``rollout.max_total_tokens``,
``rollout.context_max_tokens``,
``optim.micro_batch_tokens``
``rollout.max_turns``                              :data:`MAX_TURNS` (100,000)
``model.num_threads``                              :data:`MAX_THREADS` (4,096)
``model.lora_rank``                                :data:`MAX_LORA_RANK` (65,536)
``model.lora_alpha``                               :data:`MAX_LORA_ALPHA` (2**20)
``scale.num_env_workers``,                         :data:`MAX_WORKERS` (4,096)
``scale.num_generation_workers``
``scale.*_worker_cpus``                            :data:`MAX_WORKER_CPUS` (1,024)
``scale.*_worker_timeout_s``,                      :data:`MAX_TIMEOUT_S` (7 days)
``reward.timeout_s``
``algorithm.time_budget_s``                        :data:`MAX_TIME_BUDGET_S` (366 days)
``rollout.temperature``                            in [:data:`MIN_TEMPERATURE`,
                                                   :data:`MAX_TEMPERATURE`] = [0.01, 100]
=================================================  =====================================

Text: no string key may hold a control character (newline, tab, NUL, …) or a line or
paragraph separator (:func:`check_text`); ``name`` is one plain directory name of at most
:data:`MAX_NAME_BYTES` bytes (:func:`check_name`); ``output_dir`` a non-empty path of at most
:data:`MAX_PATH_BYTES` bytes (:func:`check_path`).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_BATCH",
    "MAX_EPISODES",
    "MAX_EPOCHS",
    "MAX_GROUP_SIZE",
    "MAX_LORA_ALPHA",
    "MAX_LORA_RANK",
    "MAX_NAME_BYTES",
    "MAX_PATH_BYTES",
    "MAX_ROLLOUTS_PER_STEP",
    "MAX_ROUNDS",
    "MAX_STEPS",
    "MAX_THREADS",
    "MAX_TIMEOUT_S",
    "MAX_TIME_BUDGET_S",
    "MAX_TOKENS",
    "MAX_TURNS",
    "MAX_WORKERS",
    "MAX_WORKER_CPUS",
    "MAX_TEMPERATURE",
    "MIN_TEMPERATURE",
    "Bounds",
    "check_name",
    "check_path",
    "check_text",
]

#: RL steps, checkpoint and evaluation intervals, learning-rate warm-up steps
MAX_STEPS = 10_000_000
#: G rollouts of one task (published agentic RL uses 4-64)
MAX_GROUP_SIZE = 1_024
#: rollouts of one sampling round (tasks × G); large published runs sample about 16k per step
MAX_ROLLOUTS_PER_STEP = 65_536
#: rounds of dynamic sampling per step; policy versions of async training
MAX_ROUNDS = 1_000
#: held-out tasks of an evaluation, demonstrations of the warm-up
MAX_EPISODES = 1_000_000
#: passes over the demonstrations or over one batch of rollouts
MAX_EPOCHS = 1_000
#: sequences per batch or micro-batch, minibatches per epoch, episodes decoded together
MAX_BATCH = 65_536
#: tokens of a turn, an episode, a context or a micro-batch (16.8 million; models read <= 10M)
MAX_TOKENS = 2**24
#: policy turns of one episode
MAX_TURNS = 100_000
#: torch CPU threads
MAX_THREADS = 4_096
#: LoRA rank (no model layer is wider) and alpha
MAX_LORA_RANK = 65_536
MAX_LORA_ALPHA = 2**20
#: Ray workers of one run, CPUs each reserves
MAX_WORKERS = 4_096
MAX_WORKER_CPUS = 1_024.0
#: limits of one remote call, in seconds (7 days)
MAX_TIMEOUT_S = 7 * 86_400.0
#: the RL wall-clock budget, in seconds (366 days)
MAX_TIME_BUDGET_S = 366 * 86_400.0
#: sampling temperature of RL rollouts: below 0.01 sampling is greedy in effect and the
#: recorded logprobs go to 0 or -inf (logits / T overflow float32 for T near 1e-38)
MIN_TEMPERATURE = 0.01
MAX_TEMPERATURE = 100.0
#: bytes of ``name`` in UTF-8 (a directory name takes 255; room for the ``-N`` suffix)
MAX_NAME_BYTES = 200
#: bytes of ``output_dir`` in UTF-8 (Linux's PATH_MAX)
MAX_PATH_BYTES = 4_096

# Unicode categories no config text may hold: control characters, surrogates, line and
# paragraph separators (each would break a log line, a TOML round trip or a file name)
_BAD_CATEGORIES = ("Cc", "Cs", "Zl", "Zp")


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


@dataclass(frozen=True)
class Bounds:
    """A numeric range: ``low`` < or <= value < or <= ``high`` (None = unbounded on that side).

    Attributes:
        low, high: the bounds; low_open, high_open: whether each bound itself is excluded.
    """

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def check(self, key: str, value: Any) -> None:
        """Check ``value`` of config key ``key``.

        Raises:
            ValueError: ``key 'KEY' must be > 0, got -1``: the message names the bound that is
                broken (both bounds are listed in the field's docs and in this module's table).
        """
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            op = ">" if self.low_open else ">="
            raise ValueError(f"key '{key}' must be {op} {_num(self.low)}, got {value!r}")
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            op = "<" if self.high_open else "<="
            raise ValueError(f"key '{key}' must be {op} {_num(self.high)}, got {value!r}")


def check_text(key: str, value: str) -> None:
    """Reject control characters (newline, tab, NUL, …), surrogates and line/paragraph
    separators in a config string.

    Raises:
        ValueError: naming the key and the first such character.
    """
    for ch in value:
        if unicodedata.category(ch) in _BAD_CATEGORIES:
            raise ValueError(
                f"key '{key}' must not contain control characters or line breaks, "
                f"got {ch!r} in {value!r}"
            )


def check_name(key: str, value: str) -> None:
    """``name``: one plain directory name (not empty, ``.`` or ``..``; no ``/`` or ``\\``; no
    control or format characters; at most :data:`MAX_NAME_BYTES` bytes in UTF-8).

    Raises:
        ValueError: naming the key and the value.
    """
    check_text(key, value)
    bad = (
        not value
        or value in (".", "..")
        or "/" in value
        or "\\" in value
        or any(unicodedata.category(ch) == "Cf" for ch in value)  # bidi overrides, zero-widths
    )
    if bad:
        raise ValueError(f"key '{key}' must be a plain directory name, got {value!r}")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise ValueError(f"key '{key}' must be at most {MAX_NAME_BYTES} bytes in UTF-8")


def check_path(key: str, value: str) -> None:
    """A directory path key (``output_dir``): not empty (``.`` is the current directory), no
    control characters, at most :data:`MAX_PATH_BYTES` bytes in UTF-8.

    Raises:
        ValueError: naming the key.
    """
    check_text(key, value)
    if not value.strip():
        raise ValueError(f"key '{key}' must be a directory path (use '.' for the current one)")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise ValueError(f"key '{key}' must be at most {MAX_PATH_BYTES} bytes in UTF-8")
