"""The model of curves: a trial's final standing from its hyperparameters and what its
curve has shown so far (freeze-thaw, in standings).

Pure module. One forest (:mod:`hpsearch.model.forest`) answers one question: given a
configuration ``x`` and, optionally, its standing after some epoch ``o`` (and how that
standing moved since the epoch before), where will it stand after epoch ``t``? Asked with
no epoch seen (``o = 0``) and ``t`` the last epoch, it rates a new configuration; asked
with a paused trial's epoch and standing, it forecasts that trial's end. Both answers are
plausible final standings (calibrated on the run's own rows), so the expected
improvement over the incumbent of a configuration never tried and of a trial paused half
way are on one scale.

Rows. Every trial, finished or not, gives rows at the epochs of a geometric grid it
reached (and its last one): for each target epoch ``t``, one row per earlier grid epoch
``o`` it was seen at, and one with nothing seen. A partial curve is therefore evidence
about its own early epochs and about where configurations like it stand early; only
finished curves say where anyone ends, which is why earlier studies of the same space
(the prior) count: their rows join this study's, each prior trial weighing
``PRIOR_WEIGHT / number of prior trials`` against one of this study's trials, so where
this study has evidence its own rows decide, and where it has none the prior's do.
Standings (:mod:`hpsearch.model.standing`) are ranks within each study, so a prior from
another task (other units, another accuracy range) means the same thing: how a
configuration ranked among those tried.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from hpsearch.model.forest import Forest
from hpsearch.model.standing import TrialCurve, standings

#: Ratio between the epochs of the grid rows are made at (1, 2, 3, 4, 5, 8, 11, 15, ...):
#: early epochs, where standings move most, closely; late ones sparsely.
GRID_RATIO = 1.4
#: The prior's trials weigh, together, as this many of this study's trials: enough to
#: lead the first proposals, few enough that this study's first dozen finished trials
#: outweigh it where they disagree.
PRIOR_WEIGHT = 20.0
#: Prior trials used at most (a random subset beyond that), and how many of them each
#: tree of the forest sees: the fit's cost grows with a tree's rows, and 600 trials
#: (each seen by about 7 of the 40 trees) cover a 7-dimensional space's structure.
#: With a leave-one-task-out prior, halving or doubling MAX_PRIOR_TRIALS loses a hit
#: of 13 (seed 0); PRIOR_PER_TREE 50 trades hits between the objectives over seeds 0-9
#: (accuracy 130/130, loss 122/130, against 128 and 126), 200 keeps every hit and gains
#: two on loss (``python -m benchmarks.sensitivity --sampler curve --prior loto``;
#: docs/curve_sampler.md, "Sensitivity of its constants").
MAX_PRIOR_TRIALS = 600
PRIOR_PER_TREE = 100


def grid(max_epochs: int) -> list[int]:
    """The epochs rows are made at: a geometric sequence from 1, and ``max_epochs``."""
    out, value = {1, max_epochs}, 1.0
    while value < max_epochs:
        out.add(int(round(value)))
        value *= GRID_RATIO
    return sorted(e for e in out if 1 <= e <= max_epochs)


def _before(points: Sequence[int], epoch: int) -> int | None:
    """The largest grid epoch below ``epoch``."""
    below = [p for p in points if p < epoch]
    return below[-1] if below else None


def features(x: Sequence[float], o: int, z_o: float, z_prev: float | None, t: int,
             max_epochs: int) -> list[float]:
    """One row's features: ``x``, the epoch seen (0: none) and its standing there, the
    standing's move since the grid epoch before, and the target epoch (epochs as shares
    of ``max_epochs``)."""
    if o <= 0:
        return [*x, 0.0, 0.0, 0.0, t / max_epochs]
    move = 0.0 if z_prev is None else z_o - z_prev
    return [*x, o / max_epochs, z_o, move, t / max_epochs]


def trial_rows(x: Sequence[float], z: dict[int, float], points: Sequence[int],
               max_epochs: int, final_only: bool = False) -> tuple[list, list]:
    """The rows of one trial with standings ``z`` (epoch -> standing): features and
    targets. ``final_only``: only its last epoch as a target (a prior trial's rows)."""
    if not z:
        return [], []
    last = max(z)
    seen = [p for p in points if p in z and p < last] + [last]
    targets = [last] if final_only else seen
    X, y = [], []
    for t in targets:
        X.append(features(x, 0, 0.0, None, t, max_epochs))
        y.append(z[t])
        for o in seen:
            if o >= t:
                break
            prev = _before(points, o)
            X.append(features(x, o, z[o], z.get(prev) if prev else None, t, max_epochs))
            y.append(z[t])
    return X, y


@dataclass
class Prior:
    """Earlier studies of the same space, as the model reads them.

    Attributes:
        studies: Each study's trials (numbers unique within a study).
    """

    studies: Sequence[Sequence[TrialCurve]] = ()
    _rows: tuple | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return sum(len(s) for s in self.studies)

    def rows(self, max_epochs: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Features, targets and groups of at most MAX_PRIOR_TRIALS prior trials (each
        study's standings within itself; only finished-so-far targets)."""
        if self._rows is not None and self._rows[0] == (max_epochs, seed):
            return self._rows[1]
        points = grid(max_epochs)
        chosen = [(i, t) for i, study in enumerate(self.studies) for t in study if t.scores]
        if len(chosen) > MAX_PRIOR_TRIALS:
            keep = np.random.default_rng(seed).choice(len(chosen), MAX_PRIOR_TRIALS,
                                                      replace=False)
            chosen = [chosen[k] for k in sorted(keep)]
        z_of = {i: standings(study) for i, study in enumerate(self.studies)}
        X, y, g = [], [], []
        for i, t in chosen:
            rows, targets = trial_rows(t.x, z_of[i][t.number], points, max_epochs,
                                       final_only=True)
            X += rows
            y += targets
            g += [f"prior{i}:{t.number}"] * len(rows)
        out = (np.array(X, dtype=float), np.array(y, dtype=float), np.array(g))
        self._rows = ((max_epochs, seed), out)
        return out


@dataclass
class Fitted:
    """The model fitted on one state of a study (see the module docstring).

    Attributes:
        forest: The fitted forest.
        max_epochs: Epochs of a full trial.
        trials: The study's trials it was asked about (their standings are recomputed on
            every :meth:`Planner` call; the forest is refitted only as evidence grows).
        z: Each trial's standing at each epoch it reported.
        incumbent: The best standing at ``max_epochs`` of a finished trial, or None.
    """

    forest: Forest
    max_epochs: int
    trials: Sequence[TrialCurve]
    z: dict[int, dict[int, float]]
    incumbent: float | None

    def final(self, queries: Sequence[tuple[Sequence[float], int, int | None]]) -> np.ndarray:
        """Plausible final standings (rows x samples) of each query ``(x, epoch seen,
        trial)``: ``epoch seen`` 0 for a configuration not tried; else the trial's
        standing there (and the move since the grid epoch before) conditions it."""
        points = grid(self.max_epochs)
        rows = []
        for x, epoch, trial in queries:
            z = self.z.get(trial, {}) if trial is not None else {}
            if epoch <= 0 or epoch not in z:
                rows.append(features(x, 0, 0.0, None, self.max_epochs, self.max_epochs))
            else:
                prev = _before(points, epoch)
                rows.append(features(x, epoch, z[epoch], z.get(prev) if prev else None,
                                     self.max_epochs, self.max_epochs))
        return self.forest.plausible(np.array(rows, dtype=float))

    def reference(self) -> float:
        """The standing to improve on: the incumbent's, or before any trial finished, the
        best forecast final of the trials seen so far (their mean plausible value)."""
        if self.incumbent is not None:
            return self.incumbent
        seen = [(t.x, t.last_epoch, t.number) for t in self.trials if t.scores]
        if not seen:
            return 0.0
        return float(self.final(seen).mean(axis=1).max())


def expected_improvement(samples: np.ndarray, reference: float) -> np.ndarray:
    """Mean gain over ``reference`` of each row's plausible values (0 where none
    exceeds it)."""
    return np.maximum(0.0, samples - reference).mean(axis=1)


#: The forest is refitted once the study's reported epochs, or its finished trials (plus
#: one: the first finish always), have grown by this share since the last fit (in
#: between, queries use the last forest with the trials' standings of now): a decision
#: costs a fit only when there is much more to learn from.
REFIT_GROWTH = 0.2
#: This study's trials needed (twice this many) before its own rows calibrate the
#: forest's spread instead of the prior's.
MIN_OWN_CALIBRATION = 4


@dataclass(frozen=True)
class FitState:
    """What the forest was fitted on: each trial's last epoch then and whether it was
    still open, and the fit's ordinal (which seeds it). A study keeps it (the sampler
    writes it on the trial it sampled), so a continued run rebuilds the same forest from
    the study's curves cut back to these epochs, and proposes what the uninterrupted run
    would have.
    """

    seen: tuple[tuple[int, int, bool], ...]  # (trial, last epoch, open)
    ordinal: int

    @property
    def reported(self) -> int:
        return sum(last for _, last, _ in self.seen)

    def finished(self, max_epochs: int) -> int:
        return sum(1 for _, last, _ in self.seen if last >= max_epochs)

    def encode(self) -> str:
        """A compact text: ``ordinal;trial:last[o],...`` (``o``: open)."""
        return f"{self.ordinal};" + ",".join(f"{n}:{last}{'o' if o else ''}"
                                            for n, last, o in self.seen)

    @classmethod
    def decode(cls, text: str) -> "FitState":
        """The state :meth:`encode` wrote; ValueError if it is not one."""
        head, _, body = str(text).partition(";")
        seen = []
        for item in filter(None, body.split(",")):
            number, _, last = item.partition(":")
            is_open = last.endswith("o")
            seen.append((int(number), int(last.rstrip("o")), is_open))
        return cls(tuple(seen), int(head))

    def cut(self, trials: Sequence[TrialCurve]) -> list[TrialCurve]:
        """``trials`` as they were when the forest was fitted."""
        then = {n: (last, o) for n, last, o in self.seen}
        out = []
        for t in trials:
            if t.number in then:
                last, is_open = then[t.number]
                out.append(TrialCurve(t.number, t.x, {e: v for e, v in t.scores.items()
                                                      if e <= last}, is_open))
        return out


class CurveModel:
    """Fits the forest on a study's trials and a prior, refitting as evidence grows.

    Args:
        max_epochs: Epochs of a full trial.
        prior: Earlier studies of the same space (may be empty).
        seed: Seeds the forest and the prior's subset.
    """

    def __init__(self, max_epochs: int, prior: Prior | None = None, seed: int = 0):
        if max_epochs < 1:
            raise ValueError(f"max_epochs: must be >= 1 (got {max_epochs})")
        self.max_epochs = max_epochs
        self.prior = prior or Prior()
        self.seed = seed
        self._forest: Forest | None = None
        #: What the current forest was fitted on (None before the first fit).
        self.state: FitState | None = None
        #: Fits made in this process (the benchmark reports a decision's cost from it).
        self.fits = 0

    def fit(self, trials: Sequence[TrialCurve]) -> Fitted | None:
        """The model for the study's ``trials`` now, refitted if the evidence grew enough
        since the last fit (None: no evidence at all, in the study or the prior)."""
        if self._needs_fit(trials):
            ordinal = 1 if self.state is None else self.state.ordinal + 1
            self._refit(trials, ordinal)
        return self.latest(trials)

    def latest(self, trials: Sequence[TrialCurve]) -> Fitted | None:
        """The model with the last forest (no refit) and the standings of ``trials`` now;
        None before any fit."""
        if self._forest is None:
            return None
        z = standings(trials)
        finished = [t for t in trials if t.scores and max(t.scores) >= self.max_epochs]
        incumbent = max((z[t.number][max(t.scores)] for t in finished), default=None)
        return Fitted(self._forest, self.max_epochs, trials, z, incumbent)

    def restore(self, state: FitState, trials: Sequence[TrialCurve]) -> None:
        """Rebuild the forest a study's earlier session fitted (``state``), from its
        ``trials`` cut back to what they were then."""
        self._refit(state.cut(trials), state.ordinal)

    def _needs_fit(self, trials: Sequence[TrialCurve]) -> bool:
        if self._forest is None or self.state is None:
            return True
        reported = sum(t.last_epoch for t in trials)
        finished = sum(1 for t in trials if t.last_epoch >= self.max_epochs)
        return (finished >= (1 + REFIT_GROWTH) * self.state.finished(self.max_epochs) + 1
                or reported >= (1 + REFIT_GROWTH) * max(1, self.state.reported))

    def _refit(self, trials: Sequence[TrialCurve], ordinal: int) -> None:
        forest = self._fit_forest(trials, standings(trials), ordinal)
        if forest is not None:
            self._forest = forest
            self.state = FitState(tuple((t.number, t.last_epoch, t.open)
                                        for t in trials if t.scores), ordinal)

    def _fit_forest(self, trials: Sequence[TrialCurve], z, ordinal: int) -> Forest | None:
        points = grid(self.max_epochs)
        X, y, groups, furthest = [], [], [], []
        for t in trials:
            rows, targets = trial_rows(t.x, z.get(t.number, {}), points, self.max_epochs)
            X += rows
            y += targets
            groups += [f"own:{t.number}"] * len(rows)
            reach = max((row[-1] for row in rows), default=0.0)
            furthest += [row[-1] >= reach for row in rows]
        px, py, pg = self.prior.rows(self.max_epochs, self.seed)
        if not X and not len(px):
            return None
        parts = [np.array(X, dtype=float)] if X else []
        if len(px):
            parts.append(px)
        X_all = np.vstack(parts)
        y_all = np.concatenate([np.array(y, dtype=float), py]) if len(px) else np.array(y)
        g_all = np.concatenate([np.array(groups, dtype=object), pg.astype(object)])
        own = np.zeros(len(y_all), dtype=bool)
        own[:len(X)] = True
        self.fits += 1
        # Calibrate on the rows that ask what the model is asked (the furthest a trial
        # got: its end, or where it was stopped) of this study once it has enough of
        # them, else on all this study's rows, else on every row. On synthetic curves
        # (tests/test_model.py) the 80% intervals held 83-84% of true finals so, 82-86%
        # calibrated on all this study's rows.
        ahead = np.zeros(len(y_all), dtype=bool)
        ahead[:len(X)] = furthest
        calibrate = None
        for mask in (ahead, own):
            if len(set(g_all[mask])) >= 2 * MIN_OWN_CALIBRATION:
                calibrate = mask
                break
        # Each tree sees PRIOR_PER_TREE prior trials, together weighing PRIOR_WEIGHT.
        weights = np.ones(len(y_all))
        n_prior = len(set(g_all[~own]))
        if n_prior:
            weights[~own] = PRIOR_WEIGHT / min(n_prior, PRIOR_PER_TREE)
        return Forest.fit(X_all, y_all, g_all, seed=self.seed * 7919 + ordinal,
                          calibrate=calibrate, weights=weights, sparse=~own,
                          sparse_per_tree=PRIOR_PER_TREE)
