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
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hpsearch.simulate import Curve

EPOCHS = 52
#: Surrogate input order (``x_cont``), from the data's README.
X_CONT = ("epoch", "batch_size", "learning_rate", "momentum", "weight_decay", "num_layers",
          "max_units", "max_dropout")
#: Tasks of the issue: well-modelled surrogate tasks and the real replay.
SURROGATE_TASKS = {"fashion-mnist": "189908", "covertype": "7593", "higgs": "167200",
                   "helena": "168329"}
REAL_TASK = "blood-transfusion"


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
        curves: One :class:`Curve` per configuration (accuracy in %).
        configs: The hyperparameters of each configuration.
    """

    task: str
    curves: list[Curve]
    configs: list[dict]

    def finals(self) -> np.ndarray:
        return np.array([c.values[-1] for c in self.curves])

    def best(self) -> int:
        return int(np.argmax(self.finals()))


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

    def curves(self, task_id: str, configs: list[dict]) -> list[Curve]:
        """Validation accuracy (%) and cumulative seconds at epochs 1..52 of each config."""
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
        acc = out[:, 1].reshape(n, EPOCHS)
        return [Curve(tuple(map(float, acc[i])), tuple(map(float, time[i]))) for i in range(n)]


def surrogate_pool(data: Path, task: str, n: int, seed: int) -> Pool:
    """``n`` configurations of a surrogate task (a name above or an OpenML task id)."""
    task_id = SURROGATE_TASKS.get(task, task)
    surrogate = Surrogate(data / "lcbench_surrogate")
    rng = np.random.default_rng([seed, int(task_id)])
    configs = surrogate.sample(n, rng)
    return Pool(task, surrogate.curves(task_id, configs), configs)


def real_pool(data: Path, n: int, seed: int) -> Pool:
    """``n`` of the 2000 real blood-transfusion configurations, replayed exactly."""
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
        acc = rows["Train/val_accuracy"].to_numpy(dtype=float)
        time = np.maximum.accumulate(np.maximum(rows["time"].to_numpy(dtype=float), 1e-3))
        curves.append(Curve(tuple(acc), tuple(time)))
    return Pool(REAL_TASK, curves, configs.loc[trials].to_dict("records"))


def synthetic_pool(n: int, seed: int) -> Pool:
    """Seeded parametric curves: saturating, noisy, some slow starters, varied speed."""
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
        curves.append(Curve(tuple(map(float, np.clip(acc, 0, 100))), tuple(map(float, time))))
        configs.append({"ceiling": ceiling, "rate": rate, "epoch_s": epoch_s})
    return Pool("synthetic", curves, configs)


def load_pool(task: str, n: int, seed: int, data: Path | None) -> Pool:
    """The pool of ``task`` (surrogate name or id, ``blood-transfusion``, ``synthetic``)."""
    if task == "synthetic":
        return synthetic_pool(n, seed)
    if data is None or not Path(data).is_dir():
        raise FileNotFoundError(
            f"task {task!r} needs the benchmark data: pass --data DIR or set "
            f"HPSEARCH_BENCHDATA (the folder holding lcbench_surrogate/)")
    if task == REAL_TASK:
        return real_pool(Path(data), n, seed)
    return surrogate_pool(Path(data), task, n, seed)
