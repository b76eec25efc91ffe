"""Planning on a known tabular model: value iteration, used by the game oracles.

Gymnasium's toy-text envs expose their model as ``P[s][a] = [(prob, next_state, reward,
terminated), ...]``. Value iteration (Bellman 1957; Sutton & Barto, *Reinforcement Learning: An
Introduction*, 2nd ed., §4.4) computes the optimal action values::

    Q(s, a) = Σ_{(p, s', r, d)} p · (r + γ · (1 − d) · max_a' Q(s', a'))

iterated to a fixed point (sup-norm change below ``tol``). With γ < 1 and a reward only at the
goal (FrozenLake) the greedy policy takes a shortest path; with −1 per step (Taxi,
CliffWalking) it takes a shortest path that avoids the large penalties.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

#: the tabular model: P[state][action] = [(probability, next_state, reward, terminated), ...]
TabularModel = Mapping[int, Mapping[int, Sequence[tuple[float, int, float, bool]]]]


def value_iteration(
    model: TabularModel,
    num_states: int,
    num_actions: int,
    *,
    gamma: float = 0.99,
    tol: float = 1e-9,
    max_iterations: int = 10_000,
) -> np.ndarray:
    """Optimal action values of a finite MDP by value iteration.

    Args:
        model: ``P[s][a]`` transition lists as in Gymnasium toy-text envs.
        num_states, num_actions: sizes S and A.
        gamma: discount γ in [0, 1).
        tol: stop when the largest change of Q in one sweep is below this.
        max_iterations: hard cap on sweeps.

    Returns:
        Q, float64 array of shape (S, A).

    Raises:
        ValueError: ``gamma`` outside [0, 1) or a transition to a state outside [0, S).
    """
    if not 0.0 <= gamma < 1.0:
        raise ValueError(f"gamma must be in [0, 1), got {gamma}")
    # dense expected-reward R[s, a] and discounted continuation matrix T[s, a, s'] = Σ p·γ·(1 − d)
    reward = np.zeros((num_states, num_actions))
    cont = np.zeros((num_states, num_actions, num_states))
    for s in range(num_states):
        for a in range(num_actions):
            for prob, nxt, r, done in model[s][a]:
                nxt = int(nxt)
                if not 0 <= nxt < num_states:
                    raise ValueError(
                        f"transition from state {s} to {nxt} outside [0, {num_states})"
                    )
                reward[s, a] += prob * r
                if not done:
                    cont[s, a, nxt] += prob * gamma
    q = np.zeros((num_states, num_actions))
    for _ in range(max_iterations):
        new_q = reward + cont @ q.max(axis=1)
        delta = float(np.abs(new_q - q).max())
        q = new_q
        if delta < tol:
            break
    return q


def greedy_action(q: np.ndarray, state: int) -> int:
    """argmax_a Q(state, a), ties broken by the lowest action index."""
    return int(np.argmax(q[int(state)]))
