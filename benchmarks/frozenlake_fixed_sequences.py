"""The best fixed move sequence on frozenlake-v0's held-out maps: the map-blind baseline.

A policy that ignores the map can at best play one fixed sequence of moves on every map. This
script finds the sequence (up to the env's 16-move horizon) that wins on the most of the given
maps, by an exhaustive breadth-first search over sequences in which two prefixes that leave
every map in the same state (position, or fallen/won) are merged (no sequence is lost: the
future of a prefix depends only on those states). Moves follow Gymnasium's FrozenLake-v1, not
slippery; a map is generated per seed exactly as the env does (``generate_random_map(size=4,
p=0.8, seed=seed)``), so the maps are the ones ``agentic-rl train --env frozenlake-v0``
evaluates on (seeds ``eval.seed_start …``).

Usage::

    python benchmarks/frozenlake_fixed_sequences.py [--seed-start 1000000] [--maps 40]

Prints the best sequence, its wins out of the maps, and the wins of the oracle (every map is
solvable, so the oracle wins all of them) for comparison with a trained policy's held-out wins.
"""

from __future__ import annotations

import argparse

from gymnasium.envs.toy_text.frozen_lake import generate_random_map

#: the env's action names in Gymnasium's order (0 left, 1 down, 2 right, 3 up)
ACTIONS = ("left", "down", "right", "up")
MOVES = ((0, -1), (1, 0), (0, 1), (-1, 0))
FELL, WON = -1, -2


def step(desc: list[str], state: int, action: int) -> int:
    """The next state of a non-slippery FrozenLake move: a cell index r·n + c, or FELL / WON.

    A move into the border leaves the position unchanged (Gymnasium's rule). FELL and WON are
    absorbing.
    """
    if state < 0:
        return state
    n = len(desc)
    r, c = divmod(state, n)
    dr, dc = MOVES[action]
    r, c = min(max(r + dr, 0), n - 1), min(max(c + dc, 0), n - 1)
    cell = desc[r][c]
    return FELL if cell == "H" else WON if cell == "G" else r * n + c


def best_fixed_sequence(maps: list[list[str]], horizon: int = 16) -> tuple[int, tuple[int, ...]]:
    """(wins, actions) of the fixed move sequence of length <= ``horizon`` winning most maps.

    Breadth-first over sequences, one frontier per length, prefixes merged when they leave
    every map in the same state. Raises ValueError for an empty map list.
    """
    if not maps:
        raise ValueError("no maps")
    start = tuple(0 for _ in maps)  # S is the top-left cell of generated maps
    frontier = {start: ()}
    best = (0, ())
    for _ in range(horizon):
        nxt: dict[tuple[int, ...], tuple[int, ...]] = {}
        for states, seq in frontier.items():
            for a in range(len(ACTIONS)):
                new = tuple(step(m, s, a) for m, s in zip(maps, states))
                if new not in nxt:
                    nxt[new] = (*seq, a)
                    wins = sum(s == WON for s in new)
                    if wins > best[0]:
                        best = (wins, (*seq, a))
        # a vector where every map has ended cannot win more: drop it
        frontier = {k: v for k, v in nxt.items() if any(s >= 0 for s in k)}
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed-start", type=int, default=1_000_000, help="first held-out seed")
    ap.add_argument("--maps", type=int, default=40, help="number of held-out maps")
    ap.add_argument("--horizon", type=int, default=16, help="most moves (the env's max_steps)")
    args = ap.parse_args()
    maps = [
        generate_random_map(size=4, p=0.8, seed=s)
        for s in range(args.seed_start, args.seed_start + args.maps)
    ]
    wins, seq = best_fixed_sequence(maps, args.horizon)
    names = " ".join(ACTIONS[a] for a in seq)
    print(f"best fixed sequence: {wins}/{len(maps)} maps ({100 * wins / len(maps):.1f} %): {names}")
    print(f"oracle (shortest path per map): {len(maps)}/{len(maps)}")


if __name__ == "__main__":
    main()
