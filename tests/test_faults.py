"""Faults refused before anything runs: a second driver, a read-only run dir, a damaged
ledger, a study that belongs to another run dir; and the pure pieces behind them
(hpsearch.recovery.faults). No Ray or Lightning: every refusal here happens before Ray starts.
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import hpsearch
from hpsearch import keys
from hpsearch.errors import EXIT_CONFIG, ConfigError
from hpsearch.recovery.faults import (
    EXIT_DISK_FULL,
    DiskFull,
    RunDirBusy,
    RunLock,
    check_writable,
    disk_full_cause,
)
from hpsearch.money.ledger import Ledger
from hpsearch.money.ledger_entries import DONE
from hpsearch.money.ledger_file import LedgerCorrupt

from .conftest import REPO

SPACE = {
    "name": "faults-unit",
    "trainable": "hpsearch.examples.digits:build",
    "objective": {"metric": "val_acc", "mode": "max"},
    "max_epochs": 2,
    "space": {"lr": {"type": "float", "low": 1.0e-3, "high": 0.05, "log": True}},
    "search": {"sampler": "random", "n_trials": 1, "seed": 0},
}


def never_built(params):
    """The trainable of :data:`REFUSED`: it fails loudly if a trial were ever built."""
    raise AssertionError("the run should have been refused before any trial started")


#: SPACE for runs refused before any trial starts, in process: a trainable whose module
#: imports neither torch nor Lightning (importing the digits example costs about 3 s).
REFUSED = {**SPACE, "trainable": "tests.test_faults:never_built"}


def tree(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file below ``folder`` with its size and modification time."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def hold_lock(run_dir: Path) -> subprocess.Popen:
    """Another process holding the run dir's lock, as a running driver does."""
    code = ("import sys, time; from hpsearch.recovery.faults import RunLock; "
            "RunLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(run_dir)],
                            env=dict(os.environ, PYTHONPATH=str(REPO)),
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


# ---------------------------------------------------------------------------------------
# The lock


@pytest.mark.slow
def test_a_second_driver_is_refused_naming_the_first_and_writes_nothing(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "ledger.jsonl").write_text("")
    holder = hold_lock(run_dir)
    try:
        before = tree(run_dir)
        with pytest.raises(RunDirBusy) as info:
            hpsearch.run(SPACE, run_dir=run_dir, emit=None)
        assert info.value.exit_code == EXIT_CONFIG
        text = str(info.value)
        assert text.startswith("--run-dir: another hpsearch driver (pid "
                               f"{holder.pid} on ")
        assert "\n" not in text
        assert tree(run_dir) == before
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_the_lock_dies_with_its_process_even_when_killed(tmp_path):
    holder = hold_lock(tmp_path)
    with pytest.raises(RunDirBusy):
        RunLock(tmp_path).acquire()
    holder.kill()  # SIGKILL: no chance to clean up
    holder.wait()
    with RunLock(tmp_path) as lock:
        assert lock.held
        record = json.loads((tmp_path / ".lock").read_text())
        assert record["pid"] == os.getpid() and record["host"]
    assert not lock.held


@pytest.mark.slow
def test_the_cli_refuses_a_second_driver_with_exit_2(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(json.dumps(SPACE))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    holder = hold_lock(run_dir)
    try:
        proc = subprocess.run([sys.executable, "-m", "hpsearch", "run", str(space),
                               "--run-dir", str(run_dir)], cwd=tmp_path, text=True,
                              capture_output=True, env=dict(os.environ,
                                                            PYTHONPATH=str(REPO)))
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and f"pid {holder.pid} on" in proc.stderr
    assert "Traceback" not in proc.stderr


# ---------------------------------------------------------------------------------------
# Read-only


@pytest.fixture
def read_only_dir(tmp_path):
    """A folder that cannot be written: a read-only tmpfs as root, else mode 0555."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() == 0:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)],
                       check=True)
        try:
            yield folder
        finally:
            subprocess.run(["umount", str(folder)], check=True)
    else:
        folder.chmod(0o555)
        try:
            yield folder
        finally:
            folder.chmod(0o755)


@pytest.mark.slow
def test_a_run_dir_below_a_read_only_folder_is_refused_up_front(read_only_dir):
    with pytest.raises(ConfigError) as info:
        hpsearch.run(SPACE, run_dir=read_only_dir / "runs" / "x", emit=None)
    assert str(info.value).startswith("--run-dir: is read-only")
    assert info.value.exit_code == EXIT_CONFIG
    assert list(read_only_dir.iterdir()) == []


@pytest.mark.slow
def test_the_cli_refuses_a_read_only_run_dir_with_one_line(read_only_dir, tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(json.dumps(SPACE))
    proc = subprocess.run([sys.executable, "-m", "hpsearch", "run", str(space),
                           "--run-dir", str(read_only_dir)], cwd=tmp_path, text=True,
                          capture_output=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "is read-only" in proc.stderr


def test_check_writable_accepts_a_new_run_dir_below_a_writable_folder(tmp_path):
    check_writable(tmp_path / "a" / "b")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------
# A damaged ledger


def _damaged_run_dir(tmp_path: Path) -> Path:
    from hpsearch.money.pricing import Price

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    price = Price(per_hour=3.6, currency="USD", instance="local:local-cpu", spot=False,
                  instance_per_hour=3.6, share=1.0)
    ledger = Ledger(run_dir / "ledger.jsonl")
    ledger.ensure_id()
    ledger.open(0, 100.0, price)
    ledger.close(0, 150.0, DONE)
    ledger.open(1, 160.0, price)
    ledger.close(1, 200.0, DONE)
    lines = (run_dir / "ledger.jsonl").read_text().splitlines()
    lines[2] = lines[2][:17]  # trial 0's close, torn in the middle of the file
    (run_dir / "ledger.jsonl").write_text("\n".join(lines) + "\n")
    return run_dir


def test_a_torn_middle_line_refuses_the_run_and_says_how_to_repair(tmp_path):
    run_dir = _damaged_run_dir(tmp_path)
    before = tree(run_dir)
    with pytest.raises(LedgerCorrupt) as info:
        hpsearch.run(REFUSED, run_dir=run_dir, emit=None)
    assert info.value.exit_code == EXIT_CONFIG
    assert f"ledger.jsonl:3: corrupt ledger line" in str(info.value)
    assert f"python -m hpsearch repair {run_dir}" in str(info.value)
    after = tree(run_dir)
    after.pop(".lock")
    assert after == before


@pytest.mark.slow
def test_repair_command_keeps_a_backup_and_reports_what_it_dropped(tmp_path):
    run_dir = _damaged_run_dir(tmp_path)
    damaged = (run_dir / "ledger.jsonl").read_bytes()
    proc = subprocess.run([sys.executable, "-m", "hpsearch", "repair", str(run_dir)],
                          text=True, capture_output=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == 0, proc.stderr
    assert "ledger.jsonl:3: dropped (not JSON)" in proc.stdout
    assert "trial(s) 0" in proc.stdout  # left open: its close was lost
    backups = list(run_dir.glob("ledger.jsonl.corrupt-*"))
    assert len(backups) == 1 and backups[0].read_bytes() == damaged
    repaired = Ledger(run_dir / "ledger.jsonl")
    assert repaired.open_trials() == [0]
    assert repaired.spent(trial=1) == pytest.approx(0.04)
    again = subprocess.run([sys.executable, "-m", "hpsearch", "repair", str(run_dir)],
                           text=True, capture_output=True,
                           env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert again.returncode == 0 and "nothing changed" in again.stdout


@pytest.mark.slow
def test_repair_of_a_folder_without_a_ledger_is_a_one_line_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "hpsearch", "repair", str(tmp_path)],
                          text=True, capture_output=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == 2 and proc.stderr.startswith("hpsearch: error: RUN_DIR: ")


# ---------------------------------------------------------------------------------------
# A study on shared storage belongs to one run dir


def _billed_study(url: str, name: str, ledger_id: str | None) -> None:
    import optuna

    study = optuna.create_study(storage=url, study_name=name, direction="maximize")
    from hpsearch.spec import config as config_mod

    study.set_user_attr(keys.ATTR_CONFIG, config_mod.load(REFUSED).to_dict())
    if ledger_id is not None:
        study.set_user_attr(keys.ATTR_LEDGER_ID, ledger_id)
        study.set_user_attr(keys.ATTR_RUN_DIR, "/somewhere/else")
    trial = study.ask()
    trial.set_user_attr(keys.ATTR_COST, 0.5)
    study.tell(trial, 0.9)


@pytest.mark.parametrize("ledger_id", ["0" * 32, None], ids=["owned", "from_before_ids"])
def test_a_second_run_dir_on_a_shared_study_is_refused(tmp_path, new_sqlite, ledger_id):
    url = new_sqlite("shared.db")
    _billed_study(url, SPACE["name"], ledger_id)
    with pytest.raises(ConfigError) as info:
        hpsearch.run({**REFUSED, "storage": url}, run_dir=tmp_path / "second", emit=None)
    text = str(info.value)
    assert text.startswith(f"storage: study '{SPACE['name']}' cannot be run from ")
    assert ("belongs to run dir /somewhere/else" if ledger_id
            else "trials 0 were billed in another run dir's ledger") in text
    assert not (tmp_path / "second").exists()


# ---------------------------------------------------------------------------------------
# Pure pieces


def test_disk_full_is_found_anywhere_in_the_chain():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "/data/x.ckpt")
        except OSError as exc:
            raise RuntimeError("The Ray Tune run failed") from exc
    except RuntimeError as outer:
        assert disk_full_cause(outer).path == "/data/x.ckpt"
    try:
        sqlite3.connect(":memory:").execute("select 1 from nowhere")
    except sqlite3.OperationalError as exc:
        assert disk_full_cause(exc) is None  # another database error
    assert disk_full_cause(sqlite3.OperationalError("database or disk is full")).path is None
    assert disk_full_cause(None, "OSError: [Errno 28] No space left on device") is not None
    assert disk_full_cause(OSError(errno.EIO, "Input/output error")) is None


def test_disk_full_message_names_the_path_and_the_way_out(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    error = DiskFull(tmp_path / "runs" / "x" / "optuna.db", tmp_path / "runs" / "x")
    assert str(error).startswith("disk full at runs/x/optuna.db: free space and run "
                                 "python -m hpsearch resume runs/x")
    assert error.exit_code == EXIT_DISK_FULL != EXIT_CONFIG


# ---------------------------------------------------------------------------------------
# A driver killed while Optuna was suggesting a trial's params


def test_a_trial_left_with_half_its_params_resumes_with_all_of_them(new_sqlite):
    import optuna

    from hpsearch.spec import config as config_mod
    from hpsearch.adapters.optuna.study import StudyRecorder
    from hpsearch.trials import TrialState as LState

    raw = {**SPACE, "space": {
        "lr": {"type": "float", "low": 1.0e-3, "high": 0.05, "log": True},
        "hidden": {"type": "int", "low": 16, "high": 64},
        "opt": {"type": "categorical", "choices": ["adam", "sgd"]}}}
    url = new_sqlite()
    study = optuna.create_study(storage=url, study_name=raw["name"], direction="maximize")
    study.enqueue_trial({"lr": 0.01, "hidden": 32, "opt": "sgd"})
    trial = study.ask()  # popped, RUNNING ...
    trial.suggest_float("lr", 1.0e-3, 0.05, log=True)  # ... and killed after one param
    recorder = StudyRecorder(config_mod.load(raw), url)
    try:
        (history,) = recorder.histories()
        assert history.number == 0 and history.state is LState.RUNNING
        params, _ = recorder.resume(0)
        assert params == {"lr": 0.01, "hidden": 32, "opt": "sgd"}
    finally:
        recorder.close()
