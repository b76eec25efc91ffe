"""Value iteration against values worked out by hand."""

import numpy as np
import pytest

from agentic_rl.envs.games.planning import greedy_action, value_iteration


def test_value_iteration_on_a_three_state_chain():
    # states 0 -> 1 -> 2 (goal, reward 1 on entering, terminal); action 0 = stay, 1 = forward
    model = {
        0: {0: [(1.0, 0, 0.0, False)], 1: [(1.0, 1, 0.0, False)]},
        1: {0: [(1.0, 1, 0.0, False)], 1: [(1.0, 2, 1.0, True)]},
        2: {0: [(1.0, 2, 0.0, True)], 1: [(1.0, 2, 0.0, True)]},
    }
    q = value_iteration(model, 3, 2, gamma=0.5)
    # Q(1, fwd) = 1; Q(1, stay) = 0.5 * V(1) = 0.5; Q(0, fwd) = 0.5 * V(1) = 0.5; Q(0, stay) = 0.5 * V(0) = 0.25
    np.testing.assert_allclose(q, [[0.25, 0.5], [0.5, 1.0], [0.0, 0.0]], atol=1e-8)
    assert greedy_action(q, 0) == 1 and greedy_action(q, 1) == 1


def test_value_iteration_stochastic_transition():
    # one decision: action 0 wins 1 with p=0.3; action 1 wins 0.5 surely (both terminal)
    model = {
        0: {0: [(0.3, 1, 1.0, True), (0.7, 1, 0.0, True)], 1: [(1.0, 1, 0.5, True)]},
        1: {0: [(1.0, 1, 0.0, True)], 1: [(1.0, 1, 0.0, True)]},
    }
    q = value_iteration(model, 2, 2)
    np.testing.assert_allclose(q[0], [0.3, 0.5])
    assert greedy_action(q, 0) == 1


def test_value_iteration_rejects_bad_input():
    with pytest.raises(ValueError, match="gamma"):
        value_iteration({0: {0: [(1.0, 0, 0.0, True)]}}, 1, 1, gamma=1.0)
    with pytest.raises(ValueError, match="outside"):
        value_iteration({0: {0: [(1.0, 5, 0.0, False)]}}, 1, 1)
