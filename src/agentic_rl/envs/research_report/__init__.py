"""``research-report-v0``: search the generated corpus of ``search-qa-v0``, read, and write a short
report citing document ids (:mod:`.env`), graded by a verifier of citations and coverage
(:mod:`.grading`) on report requests with known required facts (:mod:`.tasks`)."""
