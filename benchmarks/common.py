"""What the benchmarks that run real searches share: a local Ray that finds the project."""

from __future__ import annotations

import logging
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def local_ray(num_cpus: int = 2, **kwargs):
    """Start a local Ray whose trial processes can import ``benchmarks`` and ``tests``."""
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT),
                                                             os.environ.get("PYTHONPATH")]))
    import ray

    # address="local": a new Ray of our own, never a cluster another process started.
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
             logging_level=logging.ERROR, **kwargs)
    return ray
