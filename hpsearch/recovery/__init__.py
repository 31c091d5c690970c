"""Surviving faults (pure): checkpoints you can trust, preemption notices and seeded
simulated preemptions, the out-of-memory ladder, and the run dir's lock, disk and
permission checks."""
