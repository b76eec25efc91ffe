"""The default rubric of the game envs, read from the turns every game env's ``step`` writes.

Per-turn data (documented contract): ``Turn.reward`` is the game's own reward for the turn
(0.0 for an invalid action, which the game never sees; ``step``'s reward), and
``Turn.process_reward`` (from ``Observation.process_reward``) is −1.0 for an invalid action and
0.0 otherwise: the per-turn process signal that turn-level credit assignment reads
(``agentic_rl.algorithms.trajectory_steps``). Env-specific ``info`` keys:

``valid_action``
    bool, the reply parsed into a legal move the game accepted.
``won``
    bool, the game ended in success on this turn (only True on the final turn).
``game_return``
    float, the game's undiscounted return so far (Σ of the turns' rewards).

Components:

* outcome ``game_won`` — 1 if the episode ended in success, else 0;
* process ``valid_actions`` — fraction of turns whose action was valid (0 with no turns);
* process ``game_return`` — Σ Turn.reward, weight 0 (a logged metric: the games' own scales
  differ, e.g. Taxi −1 per step and +20 at the drop-off, so it does not enter the total);
* cost ``turns`` — 0.01 per turn; cost ``generated_tokens`` — 0.0005 per sampled token.
"""

from __future__ import annotations

from agentic_rl.rewards import RewardFunction, RewardGroup, RewardWeights, Rubric
from agentic_rl.rewards.costs import token_cost
from agentic_rl.types import Trajectory


def game_won(trajectory: Trajectory) -> float:
    """1.0 if the last turn ended the game in success, else 0.0."""
    return 1.0 if trajectory.turns and trajectory.turns[-1].info.get("won") else 0.0


def valid_actions(trajectory: Trajectory) -> float:
    """Fraction of the episode's turns whose action was valid; 0.0 with no turns."""
    if not trajectory.turns:
        return 0.0
    return sum(bool(t.info.get("valid_action")) for t in trajectory.turns) / len(trajectory.turns)


def game_return(trajectory: Trajectory) -> float:
    """The game's undiscounted return Σ_t r_t (``Turn.reward``, the game's own per-turn reward)."""
    return float(sum(t.reward for t in trajectory.turns))


def num_turns(trajectory: Trajectory) -> float:
    """Number of policy turns (a cost)."""
    return float(len(trajectory.turns))


def game_rubric(weights: RewardWeights = RewardWeights(), *, turn_cost: float = 0.01) -> Rubric:
    """The game envs' default rubric (components in the module docstring).

    Raises:
        ValueError: ``turn_cost`` is negative.
    """
    if turn_cost < 0:
        raise ValueError(f"turn_cost must be >= 0, got {turn_cost}")
    return Rubric(
        [
            RewardFunction("game_won", RewardGroup.OUTCOME, game_won),
            RewardFunction("valid_actions", RewardGroup.PROCESS, valid_actions),
            RewardFunction("game_return", RewardGroup.PROCESS, game_return, weight=0.0),
            RewardFunction("turns", RewardGroup.COST, num_turns, weight=turn_cost),
            token_cost(),
        ],
        weights,
    )
