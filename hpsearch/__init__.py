"""hpsearch: cost-aware hyperparameter search on Ray Tune, Optuna and PyTorch Lightning.

``hpsearch.run("space.yaml")`` is the Python form of ``python -m hpsearch run``;
``hpsearch.load_results("runs/<name>")`` reads a run's trials, money included, as a
pandas DataFrame. Heavy libraries (Ray, torch, Lightning, Optuna) load only when used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hpsearch.version import __version__
__all__ = ["run", "RunResult", "load_results", "__version__"]

if TYPE_CHECKING:
    from hpsearch.adapters.optuna.results import load_results
    from hpsearch.driver import RunResult, run


def __getattr__(name: str) -> Any:
    if name in ("run", "RunResult"):
        from hpsearch import driver

        return getattr(driver, name)
    if name == "load_results":
        from hpsearch.adapters.optuna import results

        return results.load_results
    raise AttributeError(f"module 'hpsearch' has no attribute {name!r}")
