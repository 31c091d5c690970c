"""hpsearch: cost-aware hyperparameter search on Ray Tune, Optuna and PyTorch Lightning.

``hpsearch.run("space.yaml")`` is the Python form of ``python -m hpsearch run``. Heavy
libraries (Ray, torch, Lightning, Optuna) load only when a run starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["run", "RunResult", "__version__"]

if TYPE_CHECKING:
    from hpsearch.driver import RunResult, run


def __getattr__(name: str) -> Any:
    if name in ("run", "RunResult"):
        from hpsearch import driver

        return getattr(driver, name)
    raise AttributeError(f"module 'hpsearch' has no attribute {name!r}")
