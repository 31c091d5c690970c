"""Ray: the Tune backend of the search core, the local Ray of a run (loopback, token,
watchdog), the simulated-preemption injector, and Ray's ASHA as a core policy."""
