"""Which new configuration the next unit of money buys: the candidate with the best
expected improvement over the incumbent.

Pure module. The value is asked of one fitted model (:mod:`hpsearch.model.freeze_thaw`):
the expected gain, in final standings, of the configuration's end over the incumbent's,
from the model's plausible finals. Not per second: a new configuration's own epoch time
is not known before it runs, and dividing by one predicted from its neighbours' (expected
improvement per second, Snoek et al. 2012) lost loss hits and money on the development
tasks while it moved accuracy's figures by a hair (measured: ``python -m
benchmarks.eips``; docs/curve_sampler.md, "Per second: measured and not kept"); dividing
every candidate by the same median epoch time would change no choice. Thompson sampling
(one tree's forecast per proposal), a second forest of the rows that see nothing of their
curve, closed trials counted behind every finisher at the last epoch, and random
proposals until the forest is calibrated were measured too (``python -m
benchmarks.proposals``; docs/curve_sampler.md, "Other ways to value a new configuration"):
none was cheaper on both objectives, and Thompson sampling, which hit more often, paid
6-25% more money to the hit.

The same value ranks resumes (:meth:`Planner.choose_resume`): of the paused trials the
pruning policy would let resume, the one whose forecast end (its hyperparameters and its
standing when it paused) has the best expected improvement, and while configurations
are new, only if it is worth at least what the best new candidate is (one scale: the
expected gain of a trial's end over the incumbent's). Not per second either: ranking
resumes per second of their epochs starved slow, expensive winners and lost 6-10 of 65
hits (docs/curve_sampler.md, "Resumes: the model ranks what the policy allows").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from hpsearch.model.encoding import (Dimension, encode, local_candidates,
                                     random_candidates)
from hpsearch.model.freeze_thaw import CurveModel, Fitted, Prior, expected_improvement
from hpsearch.model.standing import TrialCurve

#: Random candidates a proposal rates (uniform over the encoded space).
N_RANDOM = 512
#: Configurations around which local candidates are drawn (the trials the model rates
#: best), and candidates around each, at this step (encoded units).
N_LOCAL_CENTRES = 8
N_LOCAL_EACH = 16
LOCAL_STEP = 0.08
#: A candidate this close (encoded distance per dimension) to a trial that has not
#: reported yet is rated down: that trial will tell what it would. 0.2 spread four
#: parallel proposals better with full information but cost money to the hit on both
#: objectives in the runs (docs/curve_sampler.md, "Where the first hit could start").
PENDING_RADIUS = 0.05


@dataclass(frozen=True)
class Proposal:
    """A new configuration the planner would start.

    Attributes:
        params: Its hyperparameters.
        improvement: Its expected improvement (standings).
    """

    params: dict[str, Any]
    improvement: float


@dataclass(frozen=True)
class ResumeChoice:
    """What a free worker should do, as the model sees it.

    Attributes:
        trial: The paused trial to resume, or None: start a new configuration instead.
        improvement: The chosen trial's (or new configuration's) expected improvement.
    """

    trial: int | None
    improvement: float


class Planner:
    """Proposes new configurations and picks resumes on the same scale (see the module
    docstring).

    Args:
        dims: The space.
        max_epochs: Epochs of a full trial.
        prior: Earlier studies of the space.
        seed: Seeds the model and the candidates.
        candidates: Where candidates come from instead of random draws: a function of
            the proposal's seed (the benchmark's pool of configurations not yet tried).
    """

    def __init__(self, dims: Sequence[Dimension], max_epochs: int,
                 prior: Prior | None = None, seed: int = 0,
                 candidates: Callable[[int], Sequence[Mapping[str, Any]]] | None = None):
        self.dims = list(dims)
        self.max_epochs = max_epochs
        self.model = CurveModel(max_epochs, prior, seed)
        self.seed = seed
        self.candidates = candidates
        #: The study's trials as last read (the adapter's cache: a trial that did not
        #: change is not read again).
        self.read_cache: dict[int, Any] = {}

    def encode(self, params: Mapping[str, Any]) -> tuple[float, ...]:
        return encode(self.dims, params)

    # -- new configurations -------------------------------------------------------------

    def propose(self, trials: Sequence[TrialCurve], seed: int) -> Proposal | None:
        """The candidate with the best expected improvement (None: nothing to learn from
        yet, in the study or the prior; the caller samples at random)."""
        fitted = self.model.fit(trials)
        if fitted is None:
            return None
        pool = self._candidates(fitted, seed)
        if not pool:
            return None
        gains = self.rate(fitted, pool)
        best = int(np.argmax(gains))
        return Proposal(dict(pool[best]), float(gains[best]))

    def _candidates(self, fitted: Fitted, seed: int) -> list[dict[str, Any]]:
        if self.candidates is not None:
            return [dict(c) for c in self.candidates(seed)]
        rng = np.random.default_rng([self.seed, seed])
        out = random_candidates(self.dims, N_RANDOM, rng)
        seen = [t for t in fitted.trials if t.scores]
        if seen:
            means = fitted.final([(t.x, t.last_epoch, t.number) for t in seen]).mean(axis=1)
            centres = [seen[i] for i in np.argsort(-means)[:N_LOCAL_CENTRES]]
            out += local_candidates(self.dims, [self._decode(t.x) for t in centres],
                                    N_LOCAL_EACH, LOCAL_STEP, rng)
        return out

    def _decode(self, x: Sequence[float]) -> dict[str, Any]:
        return {d.name: (None if u < 0 else d.decode(u)) for d, u in zip(self.dims, x)}

    def rate(self, fitted: Fitted, pool: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """Each candidate's :meth:`value`, rated down next to a trial that has not
        reported yet."""
        xs = np.array([self.encode(c) for c in pool], dtype=float)
        gains = self.value(fitted, xs)
        pending = np.array([t.x for t in fitted.trials if t.open and not t.scores],
                           dtype=float).reshape(-1, len(self.dims))
        if len(pending):
            d = np.sqrt(((xs[:, None, :] - pending[None, :, :]) ** 2).mean(axis=2)).min(axis=1)
            gains = gains * (1.0 - np.exp(-0.5 * (d / PENDING_RADIUS) ** 2))
        return gains

    def value(self, fitted: Fitted, xs: np.ndarray) -> np.ndarray:
        """Expected improvement over the reference of each encoded candidate of ``xs``
        (non-negative: the rating down multiplies it)."""
        samples = fitted.final([(x, 0, None) for x in xs])
        return expected_improvement(samples, fitted.reference())

    # -- start or resume ----------------------------------------------------------------

    def choose_resume(self, trials: Sequence[TrialCurve], paused: Sequence[int],
                      fresh: bool, seed: int) -> ResumeChoice | None:
        """Of the ``paused`` trials (those the policy would let resume now), the one whose
        end has the best expected improvement; while new configurations remain
        (``fresh``), None in its place when a new candidate (the candidates the proposal
        seeded with ``seed`` would rate) is worth at least as much. None (no opinion:
        the policy's own order decides) before the first fit, or when no paused trial
        can improve at all. Uses the last forest (no refit: the study keeps the
        proposals' fits, so a resumed run chooses as the uninterrupted one did)."""
        fitted = self.model.latest(trials)
        by_number = {t.number: t for t in trials}
        known = [n for n in paused if n in by_number]
        if fitted is None or not known:
            return None
        gains = expected_improvement(
            fitted.final([(by_number[n].x, by_number[n].last_epoch, n) for n in known]),
            fitted.reference())
        best = int(np.argmax(gains))
        if gains[best] <= 0:
            return None
        if fresh:
            pool = self._candidates(fitted, seed)
            new = float(np.max(self.rate(fitted, pool))) if pool else 0.0
            if new >= gains[best]:
                return ResumeChoice(None, new)
        return ResumeChoice(known[best], float(gains[best]))
