"""The fault matrix: the driver and its run dir under faults, on the digits example.

Every scenario runs the real command line (``python -m hpsearch run``, then ``resume``)
in subprocesses, with real Ray, real SQLite and real Lightning, on four fixed
configurations (enqueued in the study) of the digits MLP slowed to about a second per
epoch (``tests.fault_trainables``). After each fault the run is resumed and checked
against an uninterrupted run of the same four configurations: every trial COMPLETE,
none left RUNNING, one value per epoch, the same values; the money after resume at
least what the console showed before the fault, and the work lost booked as wasted.

Faults: driver SIGKILL at six moments, SIGINT, SIGINT twice, SIGTERM, a torn line in
the middle of the ledger, a corrupt newest checkpoint, a read-only run dir, a full disk
(a small tmpfs, root only), a second driver on the run dir, a second run dir on a
shared study.

    python -m benchmarks.faults [--only NAME ...] [--epochs 6]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from benchmarks.common import ROOT

NAME = "faults"
N_TRIALS = 4
SPENT = re.compile(r"spent ([0-9.]+) USD")
CONTINUING = re.compile(r"finished, ([0-9.]+) USD spent")  # resume's first line
PARAMS = [{"lr": 0.01, "hidden": 32}, {"lr": 0.02, "hidden": 16},
          {"lr": 0.005, "hidden": 48}, {"lr": 0.03, "hidden": 24}]


def space(epochs: int, trainable: str = "tests.fault_trainables:slow", storage=None,
          **consts) -> dict:
    params = {"lr": {"type": "float", "low": 1.0e-3, "high": 0.05, "log": True},
              "hidden": {"type": "int", "low": 16, "high": 64, "log": True}}
    for key, value in consts.items():
        params[key] = {"type": "categorical", "choices": [value]}
    out = {"name": NAME, "trainable": trainable,
           "objective": {"metric": "val_acc", "mode": "max"}, "max_epochs": epochs,
           "space": params,
           "search": {"sampler": "random", "n_trials": N_TRIALS, "concurrency": 2,
                      "seed": 0}}
    if storage:
        out["storage"] = storage
    return out


class Driver:
    """``python -m hpsearch ARGS`` in a subprocess, its output read as it comes."""

    def __init__(self, folder: Path, *args: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hpsearch", *args], cwd=folder,
            # A Ray of its own: ray.init() would join any cluster `ray start` left here.
            env=dict(os.environ, PYTHONPATH=str(ROOT), RAY_ADDRESS="local"),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, ready: Callable[[list[str]], bool], timeout_s: float = 300) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready(list(self.lines)):
                return True
            if self.proc.poll() is not None:
                self._reader.join(5)
                return ready(list(self.lines))
            time.sleep(0.05)
        return False

    def shown(self) -> float:
        """The last money figure the console showed."""
        found = SPENT.findall("\n".join(self.lines))
        return float(found[-1]) if found else 0.0

    def finish(self, timeout_s: float = 400) -> int:
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)
        return self.proc.returncode


def enqueue(db: Path, consts: dict) -> None:
    import optuna

    db.parent.mkdir(parents=True, exist_ok=True)
    study = optuna.create_study(storage=f"sqlite:///{db}", study_name=NAME,
                                direction="maximize")
    for p in PARAMS:
        study.enqueue_trial({**p, **consts})


def study_state(db: Path) -> dict:
    import optuna

    trials = optuna.load_study(study_name=NAME, storage=f"sqlite:///{db}").get_trials()
    return {"trials": trials,
            "values": {t.number: t.value for t in trials},
            "states": [t.state.name for t in trials]}


@dataclass
class Row:
    fault: str
    codes: str = ""
    complete: str = ""
    running: int = 0
    failed: int = 0
    per_epoch: bool = False
    exact: bool = False
    money: str = ""
    spent: float = 0.0
    wasted_s: float = 0.0
    lost: str = ""
    notes: list[str] = field(default_factory=list)


class Matrix:
    def __init__(self, root: Path, epochs: int):
        self.root = root
        self.epochs = epochs
        self.reference: dict[int, float] = {}
        self.kept: float | None = None  # money the last resume started from

    def folder(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(parents=True)
        (path / "space.yaml").write_text(json.dumps(space(self.epochs, sleep_s=1.0)))
        enqueue(path / "run" / "optuna.db", {"sleep_s": 1.0})
        return path

    def run_reference(self) -> None:
        folder = self.folder("reference")
        driver = Driver(folder, "run", "space.yaml", "--run-dir", "run", "--quiet")
        assert driver.finish() == 0, "\n".join(driver.lines[-30:])
        self.reference = study_state(folder / "run" / "optuna.db")["values"]

    def check(self, row: Row, folder: Path, shown: float | None, codes: list[int],
              run_dir: str = "run") -> Row:
        """Resume (if asked) and fill the row from the study and the ledger."""
        from hpsearch.money.ledger import Ledger

        row.codes = ", ".join(map(str, codes))
        state = study_state(folder / run_dir / "optuna.db")
        trials = state["trials"]
        row.complete = f"{state['states'].count('COMPLETE')}/{N_TRIALS}"
        row.running = state["states"].count("RUNNING")
        row.failed = state["states"].count("FAIL")
        row.per_epoch = all(sorted(t.intermediate_values) == list(range(1, self.epochs + 1))
                            for t in trials) and len(trials) == N_TRIALS
        row.exact = state["values"] == self.reference
        ledger = Ledger(folder / run_dir / "ledger.jsonl")
        spent = ledger.spent()
        if shown is not None and self.kept is not None:
            row.money = (f"{shown:.6f} <= {self.kept:.6f}" if self.kept >= shown
                         else f"LOST: {shown:.6f} > {self.kept:.6f}")
        row.spent = spent
        row.wasted_s = sum(i.wasted_s() for i in ledger.intervals)
        resumed = sum(1 for t in trials if t.user_attrs.get("resumed_from_epochs"))
        row.lost = (f"{row.wasted_s:.1f} s of work since checkpoints; {resumed} trial(s) "
                    f"resumed from checkpoints" if row.wasted_s or resumed else "nothing")
        return row

    def resume(self, folder: Path, run_dir: str = "run") -> int:
        driver = Driver(folder, "resume", run_dir, "--progress-interval", "600")
        code = driver.finish()
        if code != 0:
            print("\n".join(driver.lines[-20:]), file=sys.stderr)
        found = CONTINUING.search("\n".join(driver.lines[:3]))
        # No "Continuing" line: nothing had been billed (no trial had started).
        self.kept = float(found.group(1)) if found else 0.0
        return code

    # -- scenarios -----------------------------------------------------------------------

    def stop(self, fault: str, moment: Callable[[list[str], Path], bool], how: str,
             after: Callable[[Path], list[int]] | None = None) -> Row:
        self.kept = None
        folder = self.folder(fault.replace(" ", "-").replace(",", ""))
        driver = Driver(folder, "run", "space.yaml", "--run-dir", "run",
                        "--progress-interval", "1")
        row = Row(fault)
        if not driver.wait_for(lambda lines: moment(lines, folder / "run")):
            row.notes.append("moment never reached")
        shown = driver.shown()
        if how == "kill":
            driver.proc.send_signal(signal.SIGKILL)
        elif how == "term":
            driver.proc.send_signal(signal.SIGTERM)
        elif how in ("int", "int2"):
            driver.proc.send_signal(signal.SIGINT)
            if how == "int2":
                time.sleep(1.0)
                driver.proc.send_signal(signal.SIGINT)
        codes = [driver.finish()]
        tail = "\n".join(driver.lines[-3:])
        if how != "kill" and "python -m hpsearch resume" not in tail:
            row.notes.append("no resume hint")
        if "Traceback" in "\n".join(driver.lines):
            row.notes.append("traceback printed")
        if after is not None:
            codes += after(folder)
        codes.append(self.resume(folder))
        return self.check(row, folder, shown, codes)


def checkpoints(run: Path) -> int:
    """Valid-looking checkpoints: one manifest each (written last, see
    :mod:`hpsearch.recovery.checkpoint`)."""
    return len(list((run / "checkpoints").glob("trial-*/epoch-*.json")))


def running(lines: list[str], n: int = 2) -> bool:
    return any(f"| {n} running |" in line for line in lines[-1:])


MOMENTS = {
    "SIGKILL before any trial": (lambda lines, run: any(l.startswith("Search '") for l in lines)),
    "SIGKILL as trials start": (lambda lines, run: any(" running |" in l and "| 0 running" not in l
                                                       for l in lines) and checkpoints(run) == 0),
    "SIGKILL mid-epoch, checkpoints kept": (lambda lines, run: running(lines)
                                            and checkpoints(run) >= 3),
    "SIGKILL just after a trial ended": (lambda lines, run: any("complete after" in l
                                                                for l in lines)),
    "SIGKILL on the last trial": (lambda lines, run: sum("complete after" in l
                                                         for l in lines) >= N_TRIALS - 1),
    "SIGKILL writing the summary": (lambda lines, run: any(l.startswith("Top trials")
                                                           for l in lines)),
}


def mid_run(lines, run):
    return running(lines) and checkpoints(run) >= 3


def tear_ledger(folder: Path) -> list[int]:
    """A torn line in the middle of the ledger: the run is refused, repair, resume."""
    path = folder / "run" / "ledger.jsonl"
    lines = path.read_text().splitlines()
    middle = len(lines) // 2
    lines[middle] = lines[middle][: len(lines[middle]) // 2]
    path.write_text("\n".join(lines) + "\n")
    refused = Driver(folder, "resume", "run")
    code = refused.finish()
    ok = any("python -m hpsearch repair run" in l for l in refused.lines)
    repaired = Driver(folder, "repair", "run")
    return [code if ok else -1000 - code, repaired.finish()]


def corrupt_checkpoint(folder: Path) -> list[int]:
    """The newest checkpoint of a running trial gets a flipped byte."""
    ckpt = sorted((folder / "run" / "checkpoints").glob("trial-*/epoch-*/trial.ckpt"),
                  key=lambda p: p.stat().st_mtime)[-1]
    data = bytearray(ckpt.read_bytes())
    data[len(data) // 2] ^= 0xFF
    ckpt.write_bytes(bytes(data))
    return []


def read_only(matrix: Matrix) -> Row:
    folder = matrix.root / "read-only"
    (folder / "ro").mkdir(parents=True)
    (folder / "space.yaml").write_text(json.dumps(space(matrix.epochs, sleep_s=1.0)))
    row = Row("read-only run dir")
    if os.geteuid() != 0:
        row.notes.append("needs root (a read-only mount)")
        return row
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs",
                    str(folder / "ro")], check=True)
    try:
        driver = Driver(folder, "run", "space.yaml", "--run-dir", "ro/run")
        row.codes = str(driver.finish())
        row.lost = ("nothing written" if not list((folder / "ro").iterdir())
                    else "WROTE FILES")
        row.notes.append(driver.lines[-1] if driver.lines else "")
        row.complete = "-"
    finally:
        subprocess.run(["umount", str(folder / "ro")], check=False)
    return row


def full_disk(matrix: Matrix) -> Row:
    folder = matrix.root / "full-disk"
    disk, marker = folder / "disk", folder / "marker"
    disk.mkdir(parents=True)
    marker.mkdir()
    row = Row("full disk (tmpfs, filled mid-run)")
    if os.geteuid() != 0:
        row.notes.append("needs root (mount -t tmpfs)")
        return row
    consts = {"sleep_s": 1.0, "fill_dir": str(disk), "fill_epoch": 2,
              "marker_dir": str(marker)}
    (folder / "space.yaml").write_text(json.dumps(
        space(matrix.epochs, "tests.fault_trainables:fill_disk_once", **consts)))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(disk)], check=True)
    try:
        enqueue(disk / "run" / "optuna.db", consts)
        driver = Driver(folder, "run", "space.yaml", "--run-dir", "disk/run",
                        "--progress-interval", "1")
        codes = [driver.finish()]
        shown = driver.shown()
        row.notes.append(driver.lines[-1] if driver.lines else "")
        state = study_state(disk / "run" / "optuna.db")
        row.notes.append(f"after the fault: {state['states'].count('FAIL')} FAIL, "
                         f"{state['states'].count('RUNNING')} RUNNING")
        (disk / "ballast").unlink()
        codes.append(matrix.resume(folder, "disk/run"))
        return matrix.check(row, folder, shown, codes, "disk/run")
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def second_driver(matrix: Matrix) -> Row:
    folder = matrix.folder("second-driver")
    first = Driver(folder, "run", "space.yaml", "--run-dir", "run", "--progress-interval", "1")
    row = Row("second driver on the run dir")
    first.wait_for(lambda lines: mid_run(lines, folder / "run"))
    second = Driver(folder, "run", "space.yaml", "--run-dir", "run")
    code = second.finish()
    if f"pid {first.proc.pid} on" not in "\n".join(second.lines):
        row.notes.append("the first's PID not named")
    row.notes.append(second.lines[-1] if second.lines else "")
    codes = [code, first.finish()]
    return matrix.check(row, folder, None, codes)


def shared_study(matrix: Matrix) -> Row:
    folder = matrix.root / "shared-study"
    folder.mkdir(parents=True)
    url = f"sqlite:///{folder / 'shared.db'}"
    (folder / "space.yaml").write_text(json.dumps(space(matrix.epochs, storage=url,
                                                        sleep_s=1.0)))
    enqueue(folder / "shared.db", {"sleep_s": 1.0})
    row = Row("second run dir on a shared study")
    first = Driver(folder, "run", "space.yaml", "--run-dir", "run", "--quiet")
    codes = [first.finish()]
    second = Driver(folder, "run", "space.yaml", "--run-dir", "other", "--set",
                    "search.n_trials=8")
    codes.append(second.finish())
    row.notes.append(second.lines[-1] if second.lines else "")
    if (folder / "other").exists():
        row.notes.append("the second run dir was written")
    (folder / "run" / "optuna.db").symlink_to(folder / "shared.db")  # for check()
    return matrix.check(row, folder, None, codes)


def render(rows: list[Row]) -> list[str]:
    header = ["fault", "exit codes (run, ..., resume)", "complete", "RUNNING left", "FAIL",
              "one value per epoch", "values = uninterrupted",
              "money: last shown <= resumed from", "total spent", "lost"]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        out.append("| " + " | ".join([
            r.fault, r.codes, r.complete, str(r.running), str(r.failed),
            "yes" if r.per_epoch else "-" if r.complete in ("", "-") else "NO",
            "yes" if r.exact else "-" if r.complete in ("", "-") else "NO",
            r.money or "-", f"{r.spent:.6f}" if r.spent else "-", r.lost or "-"]) + " |")
    notes = [f"- {r.fault}: {'; '.join(n for n in r.notes if n)}" for r in rows if r.notes]
    return out + ([""] + notes if notes else [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="substrings of the faults to run")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--keep", metavar="DIR", help="keep the run dirs in DIR")
    args = parser.parse_args(argv)
    root = Path(args.keep or tempfile.mkdtemp(prefix="hps-faults-"))
    matrix = Matrix(root, args.epochs)
    scenarios: list[tuple[str, Callable[[], Row]]] = []
    for fault, moment in MOMENTS.items():
        scenarios.append((fault, lambda f=fault, m=moment: matrix.stop(f, m, "kill")))
    scenarios += [
        ("SIGINT (Ctrl-C)", lambda: matrix.stop("SIGINT (Ctrl-C)", mid_run, "int")),
        ("SIGINT twice", lambda: matrix.stop("SIGINT twice", mid_run, "int2")),
        ("SIGTERM", lambda: matrix.stop("SIGTERM", mid_run, "term")),
        ("torn ledger line", lambda: matrix.stop("torn ledger line (SIGKILL, tear, repair)",
                                                 mid_run, "kill", tear_ledger)),
        ("corrupt checkpoint", lambda: matrix.stop(
            "corrupt newest checkpoint (SIGKILL, flip a byte)", mid_run, "kill",
            corrupt_checkpoint)),
        ("read-only", lambda: read_only(matrix)),
        ("full disk", lambda: full_disk(matrix)),
        ("second driver", lambda: second_driver(matrix)),
        ("shared study", lambda: shared_study(matrix)),
    ]
    if args.only:
        scenarios = [s for s in scenarios if any(o.lower() in s[0].lower() for o in args.only)]
    print(f"reference: an uninterrupted run ({N_TRIALS} trials, {args.epochs} epochs) in "
          f"{root}", file=sys.stderr, flush=True)
    matrix.run_reference()
    rows = []
    for name, scenario in scenarios:
        started = time.monotonic()
        rows.append(scenario())
        print(f"{name}: done in {time.monotonic() - started:.0f} s", file=sys.stderr,
              flush=True)
    for line in render(rows):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
