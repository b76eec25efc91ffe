"""``swe-repo-v0``: bugs injected into real Python repositories, fixed with a shell in the sandbox."""
