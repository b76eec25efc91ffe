"""``search-qa-v0``: multi-turn research over a generated local corpus (:mod:`.world`) with
search and open tools (:mod:`.env`)."""
