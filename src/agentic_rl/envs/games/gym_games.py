"""Registered Gymnasium toy-text games (Gymnasium 1.4.0) as text POMDPs.

All share the adapter's contract (:mod:`agentic_rl.envs.games.gym_adapter`): action syntax
``<action>NAME</action>``, per-turn reward as ``step``'s reward (``Turn.reward``), the games' rubric
(outcome ``game_won``, process ``valid_actions``, cost ``turns`` and ``generated_tokens``).
Colour highlights of the ANSI renders carry state (the agent's cell, the taxi, the passenger),
so each game verbalises its state instead of only stripping the codes.

``frozenlake-v0`` / ``frozenlake-slippery-v0`` (``FrozenLake-v1``)
    Observation: the map with ``P`` on the agent's cell, and its row/column. Actions: left,
    down, right, up. Reward: 1 on reaching G, else 0; falling into a hole ends the game (lost).
    Each seed draws its own solvable ``size``×``size`` map (``generate_random_map``, p=0.8)
    unless ``map_name`` is given. Slippery: the intended move happens with probability 1/3.
    Horizon 16 turns. Oracle: value iteration (a shortest safe path; optimal, not always
    winning, when slippery). The oracle's exact win probability from the episode's start is
    ``oracle_expected_success`` (dynamic programming on the model): on slippery ice it is
    0.03–0.56 by map, mean 0.28 over seeds 0–199 (the oracle won 60 of those 200), and
    ``check_env`` tests the oracle's wins against it.
``taxi-v0`` (``Taxi-v4``)
    Observation: the 5×5 map and sentences giving the taxi's cell, where the passenger waits
    (or that they ride in the taxi) and the destination. Actions: south, north, east, west,
    pickup, dropoff. Reward: −1 per move, −10 for an illegal pickup/drop-off, +20 for the
    drop-off at the destination (which wins and ends the game). The seed draws the taxi,
    passenger and destination. Horizon 40 turns. Oracle: value iteration (shortest plan).
``cliffwalking-v0`` (``CliffWalking-v1``)
    Observation: the 4×12 grid (``x`` you, ``C`` cliff, ``T`` goal, ``o`` free) and your
    row/column. Actions: up, right, down, left. Reward: −1 per move, −100 for stepping into the
    cliff (back to the start). Reaching T wins. The start is fixed (every seed gives the same
    task). Horizon 40 turns. Oracle: value iteration (the 13-step path along the cliff).
``gym-v0`` (:func:`gym_text_env`)
    Any Gymnasium id with a discrete action space, by ``env.kwargs``: ``gym_id`` (default
    ``CliffWalking-v1``), ``gym_kwargs``, ``action_names``, ``max_steps`` (default 40), e.g.
    ``--set 'env.kwargs={gym_id="Taxi-v4"}'``. The games above and Blackjack-v1 (its tuple
    observation in words; no oracle: it has no model ``P``) keep their names and state text;
    the oracle is value iteration where the env has a model ``P``.
"""

from __future__ import annotations

from typing import Any

from agentic_rl.envs.games.gym_adapter import GymTextEnv
from agentic_rl.envs.games.planning import greedy_action, value_iteration
from agentic_rl.envs.games.text import strip_ansi

FROZENLAKE_ACTIONS = ("left", "down", "right", "up")
TAXI_ACTIONS = ("south", "north", "east", "west", "pickup", "dropoff")
CLIFF_ACTIONS = ("up", "right", "down", "left")
FROZENLAKE_GOAL = (
    "Walk from the start S to the goal G without stepping into a hole H. The map shows S start, "
    "F frozen ice, H hole, G goal and P you; row 0 is the top, column 0 the left."
)
TAXI_GOAL = (
    "Drive the taxi to the passenger, pick them up, drive to the destination and drop them off. Each move "
    "costs 1 point; a wrong pickup or drop-off costs 10; the drop-off at the destination earns 20 and wins. "
    "On the map R, G, Y, B are the stops and | is a wall; row 0 is the top, column 0 the left."
)
CLIFF_GOAL = (
    "Walk from the bottom-left start to the goal T at the bottom right. Each move costs 1 point; stepping "
    "into the cliff C costs 100 and sends you back to the start. The grid shows x you, C cliff, T goal, "
    "o free; row 0 is the top, column 0 the left."
)


def describe_frozenlake(env: Any, obs: Any) -> str:
    """The FrozenLake map with ``P`` on the agent's cell and the agent's row and column."""
    nrow, ncol = env.nrow, env.ncol
    row, col = divmod(int(obs), ncol)
    rows = []
    for r in range(nrow):
        cells = [c.decode() if isinstance(c, bytes) else str(c) for c in env.desc[r]]
        if r == row:
            cells[col] = "P"
        rows.append("".join(cells))
    return "\n".join(rows) + f"\nYou are at row {row}, column {col}."


_CELL_NAMES = {"S": "start", "F": "ice", "H": "hole", "G": "goal"}


def describe_frozenlake_neighbours(env: Any, obs: Any) -> str:
    """:func:`describe_frozenlake` plus one line naming the cell each move leads to.

    E.g. ``"Moves: left edge, down H (hole), right F (ice), up edge."``: the map and position
    stay, and the four cells next to the agent are read off it for the policy (a move into the
    edge leaves the agent where it is). The line names cells, never which move is good.
    """
    ncol = env.ncol
    row, col = divmod(int(obs), ncol)
    parts = []
    for name, (dr, dc) in zip(FROZENLAKE_ACTIONS, ((0, -1), (1, 0), (0, 1), (-1, 0))):
        r, c = row + dr, col + dc
        if not (0 <= r < env.nrow and 0 <= c < ncol):
            parts.append(f"{name} edge")
            continue
        cell = env.desc[r][c]
        cell = cell.decode() if isinstance(cell, bytes) else str(cell)
        parts.append(f"{name} {cell} ({_CELL_NAMES.get(cell, cell)})")
    return describe_frozenlake(env, obs) + "\nMoves: " + ", ".join(parts) + "."


class FrozenLakeTextEnv(GymTextEnv):
    """FrozenLake as text (module docstring).

    Args:
        is_slippery: the ice is slippery (stochastic moves).
        size: side of the random map drawn per seed.
        map_name: ``"4x4"`` or ``"8x8"`` for Gymnasium's fixed maps instead of a random one.
        max_steps: horizon in turns.
        describe_neighbours: add a line naming the cell each move leads to
            (:func:`describe_frozenlake_neighbours`); off: the map and position only.
        keep_history: False: each turn shows only the current state (a context reset, see
            :class:`~agentic_rl.envs.games.gym_adapter.GymTextEnv`); FrozenLake is fully observed.

    Raises:
        ValueError: ``size`` < 2 or ``max_steps`` < 1.
    """

    description = "FrozenLake: walk from S to G on a random map without falling into a hole"

    def __init__(
        self,
        is_slippery: bool = False,
        size: int = 4,
        map_name: str | None = None,
        max_steps: int = 16,
        describe_neighbours: bool = False,
        keep_history: bool = True,
    ):
        if size < 2:
            raise ValueError(f"size must be >= 2, got {size}")
        self.is_slippery, self.size, self.map_name = bool(is_slippery), int(size), map_name
        self.describe_neighbours = bool(describe_neighbours)
        goal = FROZENLAKE_GOAL + (
            " The ice is slippery: you may slide to a side instead of moving as chosen."
            if is_slippery
            else ""
        )
        super().__init__(
            "FrozenLake-v1",
            self._gym_kwargs_for(0),
            FROZENLAKE_ACTIONS,
            "FrozenLake",
            goal,
            describe_frozenlake_neighbours if describe_neighbours else describe_frozenlake,
            max_steps=max_steps,
            keep_history=keep_history,
        )

    @property
    def oracle_expected_success(self) -> float:
        """P(the oracle reaches G within the horizon from this episode's start), exact; 1.0 before a reset.

        The oracle's policy is fixed (greedy on the value-iteration Q), so its success
        probability follows from the model ``P`` by dynamic programming over the turns left,
        V_h(s) = Σ_{(p, s', r, done)} p · (1 if done and r > 0 else 0 if done else V_{h−1}(s')),
        V_0 = 0. ``check_env`` tests the oracle's wins against it (binomial bound). Not slippery:
        1.0 (the shortest path of a solvable map is within the 16 turns).
        """
        if not self.episode.started:
            return 1.0
        model = self._gym.unwrapped.P
        if self._q is None:
            self._q = value_iteration(model, len(model), len(self.action_names))
        policy = [greedy_action(self._q, s) for s in range(len(model))]
        value = [0.0] * len(model)
        for _ in range(self.max_steps - self.episode.turn):
            value = [
                sum(
                    p * (float(r > 0) if done else value[int(nxt)])
                    for p, nxt, r, done in model[s][policy[s]]
                )
                for s in range(len(model))
            ]
        return float(value[int(self._obs)])

    def _gym_kwargs_for(self, seed: int) -> dict[str, Any]:
        if self.map_name is not None:
            return {"map_name": self.map_name, "is_slippery": self.is_slippery}
        from gymnasium.envs.toy_text.frozen_lake import generate_random_map

        return {
            "desc": generate_random_map(size=self.size, p=0.8, seed=seed),
            "is_slippery": self.is_slippery,
        }


def describe_taxi(env: Any, obs: Any) -> str:
    """The Taxi map (colours stripped) and the taxi, passenger and destination in words."""
    taxi_row, taxi_col, passenger, destination = env.decode(int(obs))
    names = "RGYB"
    grid = strip_ansi(env.render()).strip("\n").splitlines()
    grid = [
        line for line in grid if not line.strip().startswith("(")
    ]  # drop Gymnasium's "(North)" line
    dest_row, dest_col = env.locs[destination]
    # Taxi never starts with the passenger at the destination: equal indices mean delivered
    where = (
        "The passenger is in the taxi."
        if passenger == 4
        else "The passenger has been delivered."
        if passenger == destination
        else f"The passenger waits at {names[passenger]} "
        f"(row {env.locs[passenger][0]}, column {env.locs[passenger][1]})."
    )
    return (
        "\n".join(grid)
        + f"\nThe taxi is at row {taxi_row}, column {taxi_col}. {where} "
        + f"The destination is {names[destination]} (row {dest_row}, column {dest_col})."
    )


class TaxiTextEnv(GymTextEnv):
    """Taxi-v4 as text (module docstring).

    Args:
        max_steps: horizon in turns.
    """

    description = "Taxi: pick up the passenger and drop them at the destination"

    def __init__(self, max_steps: int = 40):
        super().__init__(
            "Taxi-v4", {}, TAXI_ACTIONS, "Taxi", TAXI_GOAL, describe_taxi, max_steps=max_steps
        )


def describe_cliffwalking(env: Any, obs: Any) -> str:
    """The CliffWalking grid (``x`` you) and the agent's row and column."""
    row, col = divmod(int(obs), env.shape[1])
    grid = strip_ansi(env.render()).strip("\n")
    return f"{grid}\nYou are at row {row}, column {col}."


def _cliff_success(obs: Any, reward: float, terminated: bool) -> bool:
    return terminated  # the only terminal state is the goal T


class CliffWalkingTextEnv(GymTextEnv):
    """CliffWalking-v1 as text (module docstring).

    Args:
        max_steps: horizon in turns.
    """

    description = "CliffWalking: reach the goal along a cliff edge without falling"

    def __init__(self, max_steps: int = 40):
        super().__init__(
            "CliffWalking-v1",
            {},
            CLIFF_ACTIONS,
            "CliffWalking",
            CLIFF_GOAL,
            describe_cliffwalking,
            _cliff_success,
            max_steps=max_steps,
        )


def describe_blackjack(env: Any, obs: Any) -> str:
    """Blackjack's tuple observation (player sum, dealer's card, usable ace) in words."""
    total, dealer, usable_ace = (int(x) for x in obs)
    ace = "with an ace counted as 11" if usable_ace else "with no ace counted as 11"
    dealer_card = "an ace" if dealer == 1 else str(dealer)
    return f"Your hand totals {total} ({ace}). The dealer shows {dealer_card}."


#: Gymnasium id -> (action names, title, goal, describe, success) of the games we know how to verbalise
KNOWN_GAMES: dict[str, tuple[tuple[str, ...], str, str, Any, Any]] = {
    "FrozenLake-v1": (FROZENLAKE_ACTIONS, "FrozenLake", FROZENLAKE_GOAL, describe_frozenlake, None),
    "Taxi-v4": (TAXI_ACTIONS, "Taxi", TAXI_GOAL, describe_taxi, None),
    "CliffWalking-v1": (
        CLIFF_ACTIONS,
        "CliffWalking",
        CLIFF_GOAL,
        describe_cliffwalking,
        _cliff_success,
    ),
    "Blackjack-v1": (
        ("stick", "hit"),
        "Blackjack",
        "Get a hand closer to 21 than the dealer without going over: hit takes a card, stick ends "
        "your turn. Win +1, lose -1, draw 0.",
        describe_blackjack,
        None,
    ),
}


def gym_text_env(
    gym_id: str = "CliffWalking-v1",
    gym_kwargs: dict[str, Any] | None = None,
    action_names: list[str] | tuple[str, ...] | None = None,
    max_steps: int = 40,
) -> GymTextEnv:
    """``gym-v0``: any Gymnasium id with a discrete action space, by id (``env.kwargs.gym_id``).

    Games in :data:`KNOWN_GAMES` get their action names, instructions and state text; others
    play with actions named ``0..n-1`` and the stripped ANSI render (or the raw observation).

    Raises:
        ValueError: an unknown Gymnasium id, or see :class:`GymTextEnv`.
    """
    names, title, goal, describe, success = KNOWN_GAMES.get(gym_id, (None, gym_id, "", None, None))
    return GymTextEnv(
        gym_id,
        gym_kwargs,
        action_names if action_names is not None else names,
        title,
        goal,
        describe,
        success,
        max_steps=max_steps,
    )
