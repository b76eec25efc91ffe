"""``memory-recall-v0``: facts revealed in one session, asked in a later one after a context reset;
memory tools are the only way across (:mod:`.env`, tasks in :mod:`.tasks`)."""
