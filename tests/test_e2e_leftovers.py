"""A run leaves nothing process-wide behind: two runs in one interpreter, and the
environment, stdout and stderr, signal handlers, logging, warnings capture and Optuna's
verbosity are as they were (real Ray, real Lightning)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import warnings

import pytest

import hpsearch

from .conftest import REPO

pytestmark = pytest.mark.slow

LOGGERS = ("", "hpsearch", "hpsearch.trial", "ray", "ray.tune", "ray.train",
           "ray._private.worker", "optuna", "pytorch_lightning", "lightning.pytorch")

SPACE = {
    "name": "leftovers",
    "trainable": "hpsearch.examples.digits:build",
    "objective": {"metric": "val_acc"},
    "max_epochs": 1,
    "space": {"lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True},
              "hidden": 16},
    "search": {"n_trials": 2, "concurrency": 1, "seed": 0},
}


def snapshot() -> dict:
    """Every process-wide setting a run might touch."""
    import optuna

    return {
        "environ": dict(os.environ),
        "streams": (sys.stdout, sys.stderr),
        "signals": {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)},
        "loggers": {name: (logging.getLogger(name).level, logging.getLogger(name).propagate,
                           logging.getLogger(name).disabled,
                           tuple(map(id, logging.getLogger(name).handlers)))
                    for name in LOGGERS},
        "captured": getattr(logging, "_warnings_showwarning", None) is not None,
        "showwarning": warnings.showwarning,
        "optuna": optuna.logging.get_verbosity(),
        "cwd": os.getcwd(),
    }


def two_runs(work: str) -> None:
    """The check itself, in an interpreter of its own (no Ray another test started)."""
    # Libraries change things when first imported: import them before looking.
    import optuna  # noqa: F401
    import pytorch_lightning  # noqa: F401
    import ray  # noqa: F401
    from ray import tune  # noqa: F401

    import hpsearch.driver  # noqa: F401

    os.chdir(work)
    assert not ray.is_initialized()
    before = snapshot()
    first = hpsearch.run(SPACE, run_dir=os.path.join(work, "first"), emit=None)
    after_first = snapshot()
    second = hpsearch.run(SPACE, run_dir=os.path.join(work, "second"), emit=None)
    after_second = snapshot()
    assert first.best_trial is not None and second.best_trial is not None
    assert not ray.is_initialized()  # it started its own Ray and stopped it
    for key in before:
        assert after_first[key] == before[key], key
        assert after_second[key] == before[key], key
    print("@@two-runs-ok@@")


def test_two_runs_in_one_interpreter_leave_every_setting_as_it_was(tmp_path):
    # A fresh interpreter: the pytest process may hold a Ray another test started.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run(
        [sys.executable, "-c",
         "import sys; from tests.test_e2e_leftovers import two_runs; two_runs(sys.argv[1])",
         str(tmp_path)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "@@two-runs-ok@@" in proc.stdout, (
        proc.stdout[-3000:] + proc.stderr[-6000:])
