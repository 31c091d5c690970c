"""A bagged forest of randomised trees whose spread is calibrated on what it did not see.

Pure module (scikit-learn's ``ExtraTreeRegressor``, imported when fitted). Rows come in
groups (the rows of one trial): each tree is fitted on a bootstrap sample of whole
groups, so the trees that did not see a group predict it as they would predict a new
trial. Those out-of-bag predictions give each row a standardised residual (its error
over the spread of the trees that predicted it); their quantiles turn a new prediction's
mean and spread into plausible values whose intervals hold as often as they held on
this run's own rows (a conformal calibration: nothing assumes the errors are normal).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Trees in a forest. Their spread is the model's uncertainty before calibration. A row's
#: out-of-bag prediction uses the ~37% of trees that did not see its group, so its error
#: overstates a full forest's: with 12 trees the calibrated 80% intervals held 92% of
#: true finals on synthetic curves (tests/test_model.py's setting), 24: 88%, 32: 84%,
#: 40: 82%, 48: 81%. 40 keeps that within 75-85% at about 1.7x the cost of 24.
N_TREES = 40
#: Fewest rows in a leaf. One: the bootstrap and the random thresholds already average
#: each prediction over many trees, and larger leaves smoothed the best region away (on
#: a 2-dimensional quadratic after 30 proposals the best found was 0.018 below the
#: optimum with leaves of 3, 0.002 with 2, 0.0002 with 1; random search 0.011); the
#: out-of-bag calibration absorbs the noise a one-row leaf keeps (80% intervals held
#: 79-81% of true finals on synthetic curves with 1, 81-82% with 2).
MIN_LEAF = 1
#: Fewest out-of-bag groups before the residuals calibrate the spread; with fewer, the
#: plausible values are the spread's normal quantiles.
MIN_CALIBRATION = 8
#: Plausible values per prediction (the quantiles of the calibrated residuals).
N_SAMPLES = 32


@dataclass
class Forest:
    """A fitted forest (see the module docstring).

    Attributes:
        trees: The fitted trees.
        residuals: Sorted standardised out-of-bag residuals (may be empty).
        floor: Added to every spread a residual is measured in (and a prediction's): the
            typical out-of-bag spread, so that a row the trees happen to agree on does
            not turn a small error into an outlier that widens every interval.
    """

    trees: list
    residuals: np.ndarray
    floor: float = 0.0

    @classmethod
    def fit(cls, X: np.ndarray, y: np.ndarray, groups: np.ndarray, seed: int,
            n_trees: int | None = None, min_leaf: int | None = None,
            calibrate: np.ndarray | None = None,
            weights: np.ndarray | None = None,
            sparse: np.ndarray | None = None, sparse_per_tree: int = 0) -> "Forest":
        """Fit ``n_trees`` trees on bootstraps of the groups of ``X``'s rows.

        Args:
            X: Features, one row per example.
            y: Targets.
            groups: The group of each row (rows of one trial share one).
            seed: Seeds the bootstraps and the trees.
            n_trees: Trees to fit (default :data:`N_TREES`).
            min_leaf: Fewest rows in a leaf (default :data:`MIN_LEAF`).
            calibrate: Rows whose out-of-bag residuals calibrate the spread (a boolean
                mask; default every row).
            weights: Each row's weight (default 1), times its group's bootstrap count.
            sparse: Rows of groups that each tree sees only ``sparse_per_tree`` of, drawn
                without replacement (a prior's many trials: every tree sees some of them,
                the forest all of them, at a fraction of the fit's cost); their weights
                should count a tree's draw, not all of them.
            sparse_per_tree: See ``sparse``.
        """
        from sklearn.tree import ExtraTreeRegressor

        n_trees = N_TREES if n_trees is None else n_trees
        min_leaf = MIN_LEAF if min_leaf is None else min_leaf
        rng = np.random.default_rng(seed)
        names, index = np.unique(groups, return_inverse=True)
        is_sparse = np.zeros(len(names), dtype=bool)
        if sparse is not None:
            is_sparse[np.unique(index[sparse])] = True
        dense, thin = np.flatnonzero(~is_sparse), np.flatnonzero(is_sparse)
        trees, seen = [], np.zeros((n_trees, len(names)), dtype=bool)
        for k in range(n_trees):
            drawn = dense[rng.integers(0, len(dense), len(dense))] if len(dense) else dense
            if len(thin):
                drawn = np.concatenate([drawn, rng.choice(
                    thin, min(len(thin), sparse_per_tree), replace=False)])
            counts = np.bincount(drawn, minlength=len(names))
            weight = counts[index].astype(float)
            if weights is not None:
                weight = weight * weights
            rows = weight > 0
            tree = ExtraTreeRegressor(min_samples_leaf=min_leaf, max_features=1.0,
                                      random_state=int(rng.integers(2**31 - 1)))
            tree.fit(X[rows], y[rows], sample_weight=weight[rows])
            trees.append(tree)
            seen[k] = counts > 0
        forest = cls(trees, np.zeros(0))
        forest._calibrate(X, y, index, seen, calibrate)
        return forest

    def _calibrate(self, X, y, index, seen, calibrate) -> None:
        """Standardised residuals of the rows whose group some trees did not see, and the
        spreads' floor."""
        mask = np.ones(len(y), dtype=bool) if calibrate is None else calibrate.copy()
        predictions = self.tree_predictions(X[mask])
        unseen = ~seen[:, index[mask]]  # (trees, rows): trees that did not see the row
        n_unseen = unseen.sum(axis=0)
        usable = n_unseen >= 2
        if usable.sum() == 0 or len(np.unique(index[mask][usable])) < MIN_CALIBRATION:
            return
        p = np.where(unseen, predictions, 0.0)
        mean = p.sum(axis=0) / np.maximum(1, n_unseen)
        var = (np.where(unseen, predictions - mean, 0.0) ** 2).sum(axis=0) / np.maximum(
            1, n_unseen - 1)
        spread = np.sqrt(var)[usable]
        self.floor = float(np.median(spread)) + 1e-3
        self.residuals = np.sort((y[mask] - mean)[usable] / (spread + self.floor))

    def tree_predictions(self, X: np.ndarray) -> np.ndarray:
        """Each tree's prediction for each row of ``X``: shape (trees, rows)."""
        if len(X) == 0:
            return np.zeros((len(self.trees), 0))
        # The fitted trees' own arrays: ``predict`` would validate the same float32 rows
        # once per tree (most of a proposal's time).
        X32 = np.ascontiguousarray(X, dtype=np.float32)
        return np.stack([tree.tree_.predict(X32)[:, 0] for tree in self.trees])


    def plausible(self, X: np.ndarray, n: int | None = None) -> np.ndarray:
        """Plausible values of each row of ``X`` (shape (rows, n), ``n`` by default
        :data:`N_SAMPLES`): the trees' mean plus their spread (and the floor) times the
        calibrated residuals' quantiles; with too few residuals, the standard normal's."""
        n = N_SAMPLES if n is None else n
        trees = self.tree_predictions(X)
        levels = (np.arange(n) + 0.5) / n
        if len(self.residuals) >= MIN_CALIBRATION:
            q = np.quantile(self.residuals, levels)
        else:
            from scipy.special import ndtri

            q = ndtri(levels)
        scale = trees.std(axis=0) + self.floor + 1e-3
        return trees.mean(axis=0)[:, None] + scale[:, None] * q[None, :]
