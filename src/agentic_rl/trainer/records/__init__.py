"""What a run writes and reads back: the run directory, checkpoints and resume, experiment
tracking, the HTML report, the final model and summary, and the trainable model's set-up."""
