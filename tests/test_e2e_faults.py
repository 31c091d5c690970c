"""The driver under faults, end to end: real subprocess drivers, real Ray, real SQLite,
real Lightning on CPU (the digits MLP, slowed down so that it can be killed mid-run).

* SIGKILL, SIGTERM and Ctrl-C held down mid-run: the run resumes to the right trials,
  and the money after resume is at least what the console showed before, with the
  work lost since the last checkpoints booked as wasted. A second driver started on the
  same run dir meanwhile is refused, naming the first's PID. Ctrl-C held down (a second
  one while Tune stops gracefully, more while Ray shuts down and after the command
  returned) still ends with 130, at once.
* A disk that fills up mid-run (a small tmpfs): the run stops cleanly (exit 75), no
  trial FAILs, and once space is freed ``resume`` finishes every trial with the same
  values as an uninterrupted run.
* A study on shared storage: a second run dir is refused; the run dir moved, or copied
  with its SQLite study, continues with its money.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

import hpsearch
from hpsearch.errors import ConfigError
from hpsearch.recovery.faults import EXIT_DISK_FULL, EXIT_TERMINATED
from hpsearch.money.ledger import Ledger

from .conftest import REPO

pytestmark = pytest.mark.slow

#: Each driver starts a Ray of its own ("local"): without it, ray.init() joins any Ray
#: cluster `ray start` left on this machine, and trials would run someone else's code.
ENV = dict(os.environ, PYTHONPATH=str(REPO), RAY_ADDRESS="local")
SPENT = re.compile(r"spent ([0-9.]+) USD")  # the status lines
CONTINUING = re.compile(r"finished, ([0-9.]+) USD spent")  # the first line of a resume


def space(name: str, trainable: str = "tests.fault_trainables:slow", epochs: int = 4,
          n_trials: int = 3, **consts) -> dict:
    """A digits search whose extra params are one-choice categoricals."""
    params = {"lr": {"type": "float", "low": 3.0e-3, "high": 0.05, "log": True},
              "hidden": {"type": "int", "low": 16, "high": 48, "log": True}}
    for key, value in consts.items():
        params[key] = {"type": "categorical", "choices": [value]}
    return {"name": name, "trainable": trainable,
            "objective": {"metric": "val_acc", "mode": "max"}, "max_epochs": epochs,
            "space": params,
            "search": {"sampler": "random", "n_trials": n_trials, "concurrency": 2,
                       "seed": 0}}


def start(folder: Path, spec: dict, run_dir: str = "run") -> subprocess.Popen:
    path = folder / "space.yaml"
    path.write_text(json.dumps(spec))
    return subprocess.Popen(
        [sys.executable, "-m", "hpsearch", "run", str(path), "--run-dir", run_dir,
         "--progress-interval", "1"],
        cwd=folder, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)  # signals go to the driver only, as from `kill PID`


def read_until(driver: subprocess.Popen, ready, timeout_s: float = 240) -> list[str]:
    """Lines the driver printed, up to the first for which ``ready(lines)`` holds."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = driver.stdout.readline()
        if not line:
            pytest.fail("the driver ended early:\n" + "".join(lines[-40:]))
        lines.append(line)
        if ready(lines):
            return lines
    pytest.fail("the driver never got there:\n" + "".join(lines[-40:]))


def trials_of(db: Path, name: str):
    return optuna.load_study(study_name=name, storage=f"sqlite:///{db}").get_trials()


def resume(folder: Path, run_dir: str = "run") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpsearch", "resume", run_dir,
                           "--progress-interval", "30"],
                          cwd=folder, env=ENV, capture_output=True, text=True, timeout=400)


def mid_run(lines: list[str]) -> bool:
    """Both trials running, each past an epoch, and money shown."""
    text = "".join(lines)
    shown = SPENT.findall(text)
    return "| 2 running |" in lines[-1] and bool(shown) and float(shown[-1]) > 0


#: Epochs of the stopped runs: long enough (1.5 s each, slowed) to be stopped mid-trial.
EPOCHS = 6


@pytest.mark.parametrize("how", ["sigkill", "sigterm", "sigint_held"])
def test_a_stopped_driver_resumes_without_losing_money(in_tmp, how):
    name = f"stop-{how}"
    hold = in_tmp / "hold"  # while it exists, the trials wait between two epochs
    driver = start(in_tmp, space(name, epochs=EPOCHS, sleep_s=1.5, hold_file=str(hold)))
    checkpoints = in_tmp / "run" / "checkpoints"

    def ready(lines):  # both first trials have a checkpoint, neither is done
        return (mid_run(lines) and "complete after" not in "".join(lines)
                and all(list(checkpoints.glob(f"trial-000{n}/epoch-*")) for n in (0, 1)))

    lines = read_until(driver, ready)
    if how == "sigkill":
        # Meanwhile a second driver on the same run dir is refused, naming the first.
        # The trials are held meanwhile: on a busy machine that driver takes longer
        # than the epochs the first trials have left, and they must still be mid-run
        # when the first driver is stopped.
        hold.touch()
        try:
            second = subprocess.run([sys.executable, "-m", "hpsearch", "run", "space.yaml",
                                     "--run-dir", "run"], cwd=in_tmp, env=ENV,
                                    capture_output=True, text=True, timeout=120)
        finally:
            hold.unlink()
        assert second.returncode == 2
        assert second.stderr.count("\n") == 1, second.stderr
        assert f"another hpsearch driver (pid {driver.pid} on " in second.stderr
        assert not (in_tmp / "run" / "tune" / "session-2").exists()
    time.sleep(1.5)  # a little more money than the line just shown ...
    lines += read_until(driver, lambda more: bool(SPENT.search(more[-1])))
    shown = float(SPENT.findall("".join(lines))[-1])  # ... the figure shown, stopped at once
    if how == "sigkill":
        driver.send_signal(signal.SIGKILL)
    elif how == "sigterm":
        driver.send_signal(signal.SIGTERM)
    else:
        # Ctrl-C held down: the second interrupts Tune's graceful stop, the others
        # arrive while Ray shuts down (cut in half, it leaves the process waiting on a
        # dead GCS until Ray kills it with exit 1) and after the command returned.
        stopped = time.monotonic()
        while driver.poll() is None and time.monotonic() - stopped < 150:
            driver.send_signal(signal.SIGINT)
            time.sleep(0.15)
    rest, _ = driver.communicate(timeout=120)
    expected = {"sigkill": -signal.SIGKILL, "sigterm": EXIT_TERMINATED,
                "sigint_held": 130}[how]
    assert driver.returncode == expected, rest[-3000:]
    if how == "sigint_held":
        assert time.monotonic() - stopped < 50, rest[-3000:]  # not Ray's 60 s wait for GCS
        assert "GCS" not in rest, rest[-3000:]
    ledger = Ledger(in_tmp / "run" / "ledger.jsonl")
    if how != "sigkill":
        assert "Traceback" not in rest, rest[-3000:]
        assert rest.strip().splitlines()[-1].endswith("python -m hpsearch resume run)"), rest[-3000:]
        assert ledger.open_trials() == []  # closed before the driver exited
        assert ledger.wasted() > 0
    running = [t.number for t in trials_of(in_tmp / "run" / "optuna.db", name)
               if t.state == TrialState.RUNNING]
    assert len(running) == 2
    if how == "sigterm":
        # The interrupted session wrote its report from the study as it stopped ...
        report = json.loads((in_tmp / "run" / "report.json").read_text())
        assert sorted(t["number"] for t in report["trials"]
                      if t["state"] == "RUNNING") == sorted(running), report["trials"]
    else:
        # ... unless Ctrl-C, held down, interrupted that too (or SIGKILL left no time):
        # all four files or none, no temporary file left behind.
        reports = sorted(p.name for p in (in_tmp / "run").iterdir() if "report" in p.name)
        assert reports in ([], ["report.csv", "report.html", "report.json", "report.md"]), \
            reports

    resumed = resume(in_tmp)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    first = resumed.stdout.splitlines()[0]
    assert "resuming 2 unfinished trial(s)" in first
    assert float(CONTINUING.search(first).group(1)) >= shown
    after = Ledger(in_tmp / "run" / "ledger.jsonl")
    assert after.spent() >= shown
    # The work since the last checkpoints was lost, and is booked as wasted: after SIGKILL
    # up to the last moment the ledger knew the trials running (a trial that checkpointed
    # after that moment lost nothing the ledger can know of), else up to the stop.
    assert after.wasted() > 0
    if how != "sigkill":
        for number in running:
            assert after.wasted(trial=number) > 0
    trials = trials_of(in_tmp / "run" / "optuna.db", name)
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3
    assert all(sorted(t.intermediate_values) == list(range(1, EPOCHS + 1)) for t in trials)
    for t in trials:
        assert bool(t.user_attrs.get("resumed_from_epochs")) == (t.number in running)


def _enqueue(db: Path, name: str, params: list[dict]) -> None:
    db.parent.mkdir(parents=True, exist_ok=True)
    study = optuna.create_study(storage=f"sqlite:///{db}", study_name=name,
                                direction="maximize")
    for p in params:
        study.enqueue_trial(p)


def test_a_full_disk_stops_cleanly_and_resume_finishes_every_trial_exactly(in_tmp):
    name = "disk-full"
    disk, marker = in_tmp / "disk", in_tmp / "marker"
    disk.mkdir()
    marker.mkdir()
    consts = {"sleep_s": 0.3, "fill_dir": str(disk), "fill_epoch": 2,
              "marker_dir": str(marker)}
    spec = space(name, "tests.fault_trainables:fill_disk_once", **consts)
    params = [{"lr": 0.01, "hidden": 32, **consts}, {"lr": 0.02, "hidden": 16, **consts},
              {"lr": 0.005, "hidden": 48, **consts}]
    # The uninterrupted run: the marker is there, nothing fills the disk.
    (marker / "filled").write_text("reference")
    _enqueue(in_tmp / "ref" / "optuna.db", name, params)
    ref = start(in_tmp, spec, "ref")
    out, _ = ref.communicate(timeout=400)
    assert ref.returncode == 0, out[-3000:]
    reference = {t.number: (t.value, dict(t.intermediate_values))
                 for t in trials_of(in_tmp / "ref" / "optuna.db", name)}
    (marker / "filled").unlink()

    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(disk)], check=True)
    try:
        _enqueue(disk / "run" / "optuna.db", name, params)
        driver = start(in_tmp, spec, "disk/run")
        out, _ = driver.communicate(timeout=400)
        assert driver.returncode == EXIT_DISK_FULL, out[-3000:]
        last = out.strip().splitlines()[-1]
        assert last.startswith("hpsearch: error: disk full at disk/run"), out[-3000:]
        assert last.endswith("python -m hpsearch resume disk/run (unfinished trials "
                             "resume from their checkpoints)")
        assert "Traceback" not in out and "exceeding max length" not in out
        assert (marker / "filled").exists()
        states = [t.state for t in trials_of(disk / "run" / "optuna.db", name)]
        assert TrialState.FAIL not in states and TrialState.RUNNING in states
        Ledger(disk / "run" / "ledger.jsonl")  # still readable

        (disk / "ballast").unlink()  # space again
        resumed = resume(in_tmp, "disk/run")
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
        trials = trials_of(disk / "run" / "optuna.db", name)
        assert [t.state for t in trials] == [TrialState.COMPLETE] * 3
        assert {t.number: (t.value, dict(t.intermediate_values))
                for t in trials} == reference
        assert Ledger(disk / "run" / "ledger.jsonl").open_trials() == []
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_shared_study_belongs_to_one_run_dir_and_moves_with_it(ray_cluster, in_tmp):
    url = f"sqlite:///{in_tmp / 'shared.db'}"
    spec = {**space("shared", epochs=2, n_trials=1, sleep_s=0.0), "storage": url,
            "budget": {"max_cost": 1.0}}
    first = hpsearch.run(spec, run_dir=in_tmp / "a", emit=None)
    assert first.spent > 0
    with pytest.raises(ConfigError) as info:
        hpsearch.run({**spec, "search": {**spec["search"], "n_trials": 2}},
                     run_dir=in_tmp / "b", emit=None)
    assert str(info.value).startswith(
        "storage: study 'shared' cannot be run from b: it belongs to run dir a, whose "
        "ledger.jsonl holds its money; continue it there (--run-dir a)")
    assert not (in_tmp / "b").exists()
    # Moved: the ledger goes with the run dir, the study knows it.
    shutil.move(in_tmp / "a", in_tmp / "moved")
    lines: list[str] = []
    moved = hpsearch.run({**spec, "search": {**spec["search"], "n_trials": 2}},
                         run_dir=in_tmp / "moved", emit=lines.append)
    assert f"1 trial(s) finished, {first.spent:.6f} USD spent" in lines[0]
    assert moved.spent > first.spent
    # Copied with its own SQLite study: an independent run that keeps its money.
    own = {k: v for k, v in spec.items() if k != "storage"}
    original = hpsearch.run({**own, "name": "own"}, run_dir=in_tmp / "c", emit=None)
    shutil.copytree(in_tmp / "c", in_tmp / "d")
    (in_tmp / "d" / ".lock").unlink()
    lines = []
    copy = hpsearch.run({**own, "name": "own", "search": {**own["search"], "n_trials": 2}},
                        run_dir=in_tmp / "d", emit=lines.append)
    assert f"{original.spent:.6f} USD spent" in lines[0]
    assert copy.spent > original.spent
