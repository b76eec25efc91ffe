"""``ProductsEnvironment``: multiply two numbers, up to three tries, reward 1 for the right product.

The seed picks the two factors (``random.Random(seed)``), so the same seed gives the same task.
A wrong answer gets "too low"/"too high" feedback and reward 0; the third wrong answer, or a
reply with no integer on the last try, ends the episode with reward 0.
"""

import random
import re
import uuid

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import State

from products_env.models import ProductsAction, ProductsObservation

MAX_TRIES = 3


class ProductsEnvironment(Environment):
    """One multiplication question per episode (see the module docstring)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self._state = State(episode_id=str(uuid.uuid4()), step_count=0)
        self._answer = 0
        self._tries = 0
        self._question = ""

    def reset(self, seed=None, episode_id=None, **kwargs) -> ProductsObservation:
        """Start the task of ``seed`` (a random one when None)."""
        rng = random.Random(seed)
        a, b = rng.randint(2, 12), rng.randint(2, 12)
        self._answer, self._tries = a * b, MAX_TRIES
        self._question = f"What is {a} * {b}?"
        self._state = State(episode_id=episode_id or str(uuid.uuid4()), step_count=0)
        prompt = f"{self._question} End your reply with the number."
        return ProductsObservation(prompt=prompt, tries_left=self._tries, done=False, reward=0.0)

    def step(self, action: ProductsAction, timeout_s=None, **kwargs) -> ProductsObservation:
        """Grade the last integer of ``action.message``."""
        if action.message == "raise":
            raise ValueError("products_env was asked to raise")  # for the adapter's error test
        self._state.step_count += 1
        self._tries -= 1
        found = re.findall(r"-?\d+", action.message)
        guess = int(found[-1]) if found else None
        if guess == self._answer:
            return ProductsObservation(
                prompt="Correct.", tries_left=self._tries, done=True, reward=1.0
            )
        hint = (
            "no number found"
            if guess is None
            else ("too low" if guess < self._answer else "too high")
        )
        done = self._tries <= 0
        text = f"Wrong ({hint})." + ("" if done else f" {self._question} {self._tries} tries left.")
        return ProductsObservation(prompt=text, tries_left=self._tries, done=done, reward=0.0)

    @property
    def state(self) -> State:
        """The episode id and step count."""
        return self._state
