"""One optimizer step: the update (supervised or policy-gradient), credit assignment, the critic,
scoring of stored token streams, the mismatch correction, batching, numerical guards, the KL
reference and the optimizer."""
