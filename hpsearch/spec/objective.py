"""The objective: which metric the search optimises and which way is better.

Pure module: the ``objective`` section of ``space.yaml``, the direction a metric's name
makes plain, and the one place the direction becomes arithmetic (:func:`mode_sign`,
:func:`better`).
"""

from __future__ import annotations

from dataclasses import dataclass

from hpsearch.spec.parsers import choice, key, optional, text

#: Metric-name fragments (matched case-insensitively) that say which way is better.
MIN_METRIC_HINTS = ("loss", "error", "mse", "mae", "perplexity")
MAX_METRIC_HINTS = ("acc", "f1", "auc", "precision", "recall")


@dataclass(frozen=True)
class Objective:
    """What the search optimises."""

    metric: str = key(text(), "Metric the trainable logs each epoch (e.g. `val_acc`).")
    mode: str | None = key(
        optional(choice("max", "min")),
        "`max` or `min`; may be left out when the metric name says it (`loss`, `error`, "
        "`mse`, `mae`, `perplexity`: min; `acc`, `f1`, `auc`, `precision`, `recall`: max).",
        None,
        shown="from the metric name",
    )


def mode_from_metric(metric: str) -> str | None:
    """The objective direction a metric name makes plain, or None if it does not.

    ``min`` if the name contains one of :data:`MIN_METRIC_HINTS` (``val_loss``,
    ``valError``), ``max`` if it contains one of :data:`MAX_METRIC_HINTS`
    (``top1_acc``), case-insensitively; None when it contains none (``score``) or hints
    of both directions (``acc_loss``).
    """
    name = metric.lower()
    low = any(hint in name for hint in MIN_METRIC_HINTS)
    high = any(hint in name for hint in MAX_METRIC_HINTS)
    if low == high:
        return None
    return "min" if low else "max"


def mode_sign(mode: str) -> float:
    """``+1`` for ``max``, ``-1`` for ``min``: ``sign x value`` is higher-is-better.

    The one place the objective's direction becomes arithmetic; every comparison of
    objective values goes through it (or :func:`better`).

    Raises:
        ValueError: ``mode`` is neither ``max`` nor ``min``.
    """
    if mode == "max":
        return 1.0
    if mode == "min":
        return -1.0
    raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")


def better(a: float, b: float, mode: str) -> bool:
    """Whether objective value ``a`` is strictly better than ``b`` in direction ``mode``."""
    return mode_sign(mode) * a > mode_sign(mode) * b
