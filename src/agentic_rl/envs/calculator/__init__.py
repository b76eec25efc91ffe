"""``calculator-v0``: seeded arithmetic tasks (:mod:`.tasks`) answered with the calculator tool (:mod:`.env`)."""
