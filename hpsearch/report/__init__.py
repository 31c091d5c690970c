"""What the user sees (pure): the cost/accuracy report and its writers, the progress
lines of a run, and GPU use per trial."""
