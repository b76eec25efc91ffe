"""``coq-proof-v0``: theorem proving with Coq as the verifier (see :mod:`.env`)."""
