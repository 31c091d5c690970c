"""Pools of real learning curves for the policy benchmark.

Data (read-only; never copied into the project), from ``--data DIR`` (default
``$HPSEARCH_BENCHDATA``, else ``../shared/benchdata`` next to the project):

* ``lcbench_surrogate/``: the YAHPO Gym "lcbench" surrogate (an ONNX model fitted to
  LCBench, Zimmer et al. 2021: MLPs trained with Auto-PyTorch on 34 OpenML tasks, 52
  epochs; public ``slds-lmu/yahpo_data``). A pool is N configurations drawn uniformly
  (log-uniform where the space says log) and queried at epochs 1..52 for validation
  accuracy (%) and cumulative seconds (made non-decreasing: the surrogate's time dips in
  about 9% of configurations).
* ``lcbench_real_blood_transfusion/``: the real LCBench logs of OpenML task 167184
  (public ``ltiao/LCBenchLite``): a pool is N of its 2000 configurations, replayed
  exactly (epochs 1..51; the logs' epoch 0 is the untrained model).
* ``synthetic``: seeded parametric curves with slow starters and 3-11x spread in epoch
  time, built in; it needs no data and checks the machinery (CI), not a claim.

Two objectives (:data:`OBJECTIVES`): ``acc`` (validation accuracy in percent, maximised)
and ``loss`` (validation cross-entropy, minimised). A pool of either objective holds the
same configurations, with the same epoch times, for a task and seed.

Development tasks (:data:`DEV_TASKS`, OpenML task ids): every constant of the
``cost_aware`` policy was chosen on these 13 and no other: the 12 surrogate tasks
189908 Fashion-MNIST, 7593 covertype, 167200 higgs, 168329 helena, 126025 adult,
146212 shuttle, 167104 Australian, 167161 credit-g, 168335 MiniBooNE, 168908 christine,
189862 jasmine, 34539 Amazon_employee_access, and the real curves of 167184
blood-transfusion-service-center. The surrogate's other 21 tasks are kept aside for
measuring it (pass them by id with ``--tasks``).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hpsearch.simulate import Curve

EPOCHS = 52
#: Surrogate input order (``x_cont``), from the data's README.
X_CONT = ("epoch", "batch_size", "learning_rate", "momentum", "weight_decay", "num_layers",
          "max_units", "max_dropout")
#: The development tasks on the surrogate, by name (OpenML task ids).
SURROGATE_TASKS = {"fashion-mnist": "189908", "covertype": "7593", "higgs": "167200",
                   "helena": "168329", "adult": "126025", "shuttle": "146212",
                   "australian": "167104", "credit-g": "167161", "miniboone": "168335",
                   "christine": "168908", "jasmine": "189862", "amazon": "34539"}
REAL_TASK = "blood-transfusion"
#: Every development task: the surrogate's 12 and the real replay.
DEV_TASKS = (*SURROGATE_TASKS, REAL_TASK)


@dataclass(frozen=True)
class Objective:
    """What a benchmark run optimises and when it has found the best.

    Attributes:
        name: ``acc`` or ``loss``.
        metric: The curve's metric (``val_accuracy`` in percent, ``val_cross_entropy``).
        mode: ``max`` or ``min``.
        surrogate_column: The metric's output column of the surrogate.
        real_column: Its column in the real LCBench logs.
    """

    name: str
    metric: str
    mode: str
    surrogate_column: int
    real_column: str

    def hit_target(self, best: float) -> float:
        """The worst final value that still counts as a hit against the pool's ``best``:
        within 0.5 pp of the best accuracy, or within 2% (relative) of the best loss."""
        return best - ACC_TOLERANCE_PP if self.mode == "max" else best * (1 + LOSS_TOLERANCE)

    def hits(self, value: float, best: float) -> bool:
        """Whether a final ``value`` is a hit against the pool's ``best``."""
        target = self.hit_target(best)
        return value >= target if self.mode == "max" else value <= target

    def regret(self, value: float, best: float) -> float:
        """How far a final ``value`` is from the pool's ``best``: percentage points of
        accuracy, or percent of the best loss (relative)."""
        if self.mode == "max":
            return best - value
        return 100.0 * (value - best) / abs(best) if best else value - best


#: A hit is a final accuracy within this many percentage points of the pool's best...
ACC_TOLERANCE_PP = 0.5
#: ... or a final loss within this share of the pool's best (2% relative).
LOSS_TOLERANCE = 0.02
OBJECTIVES = {
    "acc": Objective("acc", "val_accuracy", "max", 1, "Train/val_accuracy"),
    "loss": Objective("loss", "val_cross_entropy", "min", 2, "Train/val_cross_entropy"),
}


def data_error(data: Path | None) -> str | None:
    """What a benchmark that needs the data prints (and exits 2 on) when ``data`` (its
    ``--data``) is missing or not a folder; None when it is one."""
    if data is None:
        return ("error: the benchmark data is needed: pass --data DIR or set "
                "HPSEARCH_BENCHDATA")
    if not Path(data).is_dir():
        return f"error: --data: not a folder (got {str(data)!r})"
    return None


def default_data_dir() -> Path | None:
    """``$HPSEARCH_BENCHDATA``, else ``../shared/benchdata`` beside the project, if present."""
    env = os.environ.get("HPSEARCH_BENCHDATA")
    if env:
        return Path(env)
    candidate = Path(__file__).resolve().parents[2] / "shared" / "benchdata"
    return candidate if candidate.is_dir() else None


@dataclass
class Pool:
    """N configurations of one task with their whole curves.

    Attributes:
        task: Task name.
        curves: One :class:`Curve` per configuration (in the objective's metric).
        configs: The hyperparameters of each configuration.
        objective: What the curves measure (default accuracy in %, maximised).
    """

    task: str
    curves: list[Curve]
    configs: list[dict]
    objective: Objective = field(default_factory=lambda: OBJECTIVES["acc"])

    def finals(self) -> np.ndarray:
        return np.array([c.values[-1] for c in self.curves])

    def best_final(self) -> float:
        """The best final value of the pool (what training everything finds)."""
        finals = self.finals()
        return float(finals.max() if self.objective.mode == "max" else finals.min())

    def best(self) -> int:
        finals = self.finals()
        return int(np.argmax(finals) if self.objective.mode == "max" else np.argmin(finals))


class Surrogate:
    """The YAHPO lcbench ONNX surrogate (one thread, CPU)."""

    def __init__(self, folder: Path):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(folder / "model.onnx"), options,
                                            providers=["CPUExecutionProvider"])
        self.encoding = json.loads((folder / "encoding.json").read_text())["OpenML_task_id"]
        space = json.loads((folder / "config_space.json").read_text())["hyperparameters"]
        self.space = {h["name"]: h for h in space if h["name"] not in ("OpenML_task_id",
                                                                     "epoch")}

    def sample(self, n: int, rng: np.random.Generator) -> list[dict]:
        """``n`` configurations drawn uniformly from the space (log where it says so)."""
        out: list[dict] = [{} for _ in range(n)]
        for name, h in self.space.items():
            low, high = float(h["lower"]), float(h["upper"])
            # Integers: draw on [low - 0.5, high + 0.5] and round, so the end values are
            # as likely as the others (as ConfigSpace does).
            pad = 0.5 if h["type"] == "uniform_int" else 0.0
            lo, hi = low - pad, high + pad
            if h.get("log"):
                draws = np.exp(rng.uniform(math.log(lo), math.log(hi), n))
            else:
                draws = rng.uniform(lo, hi, n)
            if h["type"] == "uniform_int":
                draws = np.clip(np.round(draws), low, high)
            for cfg, v in zip(out, draws):
                cfg[name] = float(v)
        return out

    def curves(self, task_id: str, configs: list[dict],
               objective: Objective | None = None) -> list[Curve]:
        """The objective's metric (default validation accuracy, %) and cumulative seconds
        at epochs 1..52 of each config."""
        if task_id not in self.encoding:
            raise ValueError(f"unknown OpenML task id {task_id!r}")
        n = len(configs)
        rows = np.empty((n * EPOCHS, len(X_CONT)), dtype=np.float32)
        for i, cfg in enumerate(configs):
            for e in range(EPOCHS):
                rows[i * EPOCHS + e] = [e + 1 if k == "epoch" else cfg[k] for k in X_CONT]
        cat = np.full((n * EPOCHS, 1), self.encoding[task_id], dtype=np.int32)
        out = self.session.run(None, {"x_cat": cat, "x_cont": rows})[0]
        time = np.maximum.accumulate(np.maximum(out[:, 0].reshape(n, EPOCHS), 1e-3), axis=1)
        column = (objective or OBJECTIVES["acc"]).surrogate_column
        values = out[:, column].reshape(n, EPOCHS)
        return [Curve(tuple(map(float, values[i])), tuple(map(float, time[i])))
                for i in range(n)]


def declared_space(data: Path) -> dict[str, tuple[float, float, bool]]:
    """The LCBench space (the surrogate's ``config_space.json``, the real curves' too):
    each numeric hyperparameter's (low, high, log scale)."""
    space = json.loads((Path(data) / "lcbench_surrogate" / "config_space.json").read_text())
    return {h["name"]: (float(h["lower"]), float(h["upper"]), bool(h.get("log")))
            for h in space["hyperparameters"]
            if h["type"] in ("uniform_int", "uniform_float") and h["name"] != "epoch"}


def task_space(task: str, data: Path | None) -> dict[str, tuple[float, float, bool]] | None:
    """The space ``task``'s pool declares, for a sampler to propose in: the LCBench space
    (:func:`declared_space`); None for a synthetic pool (it declares none) or without
    the data."""
    return declared_space(data) if data and task != "synthetic" else None


def surrogate_pool(data: Path, task: str, n: int, seed: int,
                   objective: Objective | None = None) -> Pool:
    """``n`` configurations of a surrogate task (a name above or an OpenML task id)."""
    objective = objective or OBJECTIVES["acc"]
    task_id = SURROGATE_TASKS.get(task, task)
    surrogate = Surrogate(data / "lcbench_surrogate")
    rng = np.random.default_rng([seed, int(task_id)])
    configs = surrogate.sample(n, rng)
    return Pool(task, surrogate.curves(task_id, configs, objective), configs, objective)


def real_pool(data: Path, n: int, seed: int, objective: Objective | None = None) -> Pool:
    """``n`` of the 2000 real blood-transfusion configurations, replayed exactly."""
    objective = objective or OBJECTIVES["acc"]
    import pandas as pd

    folder = data / "lcbench_real_blood_transfusion"
    metrics = pd.read_parquet(folder / "metrics.parquet.gzip")
    configs = pd.read_parquet(folder / "config.parquet.gzip")
    trials = np.sort(np.random.default_rng([seed, 167184]).choice(
        configs.index.to_numpy(), size=n, replace=False))
    curves = []
    for trial in trials:
        # Epoch 0 is the untrained model (learning rate 0, no time): the curve starts at 1.
        rows = metrics.loc[trial].sort_index().iloc[1:]
        values = rows[objective.real_column].to_numpy(dtype=float)
        time = np.maximum.accumulate(np.maximum(rows["time"].to_numpy(dtype=float), 1e-3))
        curves.append(Curve(tuple(values), tuple(time)))
    return Pool(REAL_TASK, curves, configs.loc[trials].to_dict("records"), objective)


def synthetic_pool(n: int, seed: int, objective: Objective | None = None) -> Pool:
    """Seeded parametric curves: saturating, noisy, some slow starters, varied speed.

    For ``loss`` each curve is mapped to a cross-entropy-like value,
    ``-log(accuracy / 100)`` (the same ranking, reversed, in other units)."""
    objective = objective or OBJECTIVES["acc"]
    rng = np.random.default_rng([seed, 7])
    epochs = np.arange(1, EPOCHS + 1)
    curves, configs = [], []
    for _ in range(n):
        ceiling = 60 + 35 * rng.beta(2, 2)
        rate = rng.lognormal(-1.5, 0.9)  # small rates: slow starters
        start = 10 + 30 * rng.random()
        noise = rng.normal(0, 0.4, EPOCHS)
        acc = start + (ceiling - start) * (1 - np.exp(-rate * epochs)) + noise
        epoch_s = rng.lognormal(0, 0.7)
        time = np.cumsum(np.full(EPOCHS, epoch_s)) + epoch_s  # first epoch twice as slow
        acc = np.clip(acc, 0, 100)
        values = acc if objective.mode == "max" else -np.log(np.maximum(acc, 1e-3) / 100)
        curves.append(Curve(tuple(map(float, values)), tuple(map(float, time))))
        configs.append({"ceiling": ceiling, "rate": rate, "epoch_s": epoch_s})
    return Pool("synthetic", curves, configs, objective)


def load_pool(task: str, n: int, seed: int, data: Path | None,
              objective: Objective | str = "acc") -> Pool:
    """The pool of ``task`` (surrogate name or id, ``blood-transfusion``, ``synthetic``)
    for ``objective`` (``acc``, ``loss`` or an :class:`Objective`)."""
    if isinstance(objective, str):
        objective = OBJECTIVES[objective]
    if task == "synthetic":
        return synthetic_pool(n, seed, objective)
    if data is None or not Path(data).is_dir():
        raise FileNotFoundError(
            f"task {task!r} needs the benchmark data: pass --data DIR or set "
            f"HPSEARCH_BENCHDATA (the folder holding lcbench_surrogate/)")
    if task == REAL_TASK:
        return real_pool(Path(data), n, seed, objective)
    return surrogate_pool(Path(data), task, n, seed, objective)
