"""Inside a trial's process: the Lightning runner (report, checkpoint, exact resume,
notices, the OOM ladder, DDP rank 0), the other DDP ranks, both Lightning packages'
API, and plan's CPU probe."""
