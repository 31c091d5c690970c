"""How rank 0 ends its DDP ranks (fast: :class:`~hpsearch.adapters.trial.ddp.Ranks`
leaving its block with stand-in rank processes; the real ranks are in test_e2e_ddp).

An error of rank 0 may be the echo of another rank's out-of-memory exit, so rank 0 looks
for that rank's mark before it ends the ranks. A stop is rank 0's own (Tune's SystemExit
at a report, Ctrl-C): it looks for nothing, and the trial's process is free at once for
the next trial Tune hands it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from hpsearch.adapters import procstat
from hpsearch.adapters.trial import ddp
from hpsearch.adapters.trial.ddp import Ranks


class WaitingRank:
    """A rank that waits in a collective for rank 0 until it is killed."""

    def __init__(self):
        self.returncode = None
        self.killed = False

    def poll(self):
        return self.returncode

    def wait(self, timeout=None):
        if self.returncode is None:
            raise subprocess.TimeoutExpired("rank", timeout)
        return self.returncode

    def kill(self):
        self.killed, self.returncode = True, -9


def leaving(tmp_path, monkeypatch, exc_type):
    """Leave a two-rank block (entered as ``__enter__`` would have left it, without
    starting processes) with ``exc_type`` raised in it: (looked for a mark, rank)."""
    looked: list[float] = []
    monkeypatch.setattr(Ranks, "_rank_ran_out",
                        lambda self, wait_s=ddp.RANK_OOM_WAIT_S: looked.append(wait_s))
    job = tmp_path / "hps-ddp-job"
    job.mkdir()
    ranks = Ranks(SimpleNamespace(devices=2, log_dir=None), {}, 3, 0, None, None)
    ranks._tmp, ranks._job = str(job), str(job / "job.pkl")
    rank = WaitingRank()
    ranks.procs = [rank]
    assert not ranks.__exit__(exc_type, exc_type(0), None)  # the error goes on
    assert not job.exists()  # the job folder goes in every case
    return looked, rank


@pytest.mark.parametrize("stop", [SystemExit, KeyboardInterrupt])
def test_a_stop_ends_the_ranks_without_looking_for_an_out_of_memory_mark(
        tmp_path, monkeypatch, stop):
    looked, rank = leaving(tmp_path, monkeypatch, stop)
    assert looked == []
    assert rank.killed


def test_rank_0s_own_out_of_memory_error_looks_for_no_mark(tmp_path, monkeypatch):
    # torch's class, without importing torch here (the fast tests do not).
    class OutOfMemoryError(RuntimeError):
        pass

    monkeypatch.setitem(sys.modules, "torch",
                        SimpleNamespace(OutOfMemoryError=OutOfMemoryError))
    looked, rank = leaving(tmp_path, monkeypatch, OutOfMemoryError)
    assert looked == []
    assert rank.killed


def test_an_error_looks_for_another_ranks_out_of_memory_mark_first(tmp_path, monkeypatch):
    looked, rank = leaving(tmp_path, monkeypatch, RuntimeError)
    assert looked == [ddp.RANK_OOM_WAIT_S]
    assert rank.killed


def job_folder(root, name, owner=None):
    folder = root / f"{ddp.JOB_PREFIX}{name}"
    folder.mkdir()
    (folder / "job.pkl").write_bytes(b"job")
    if owner is not None:
        (folder / ddp.OWNER).write_text(owner)
    return folder


def test_job_folders_of_killed_trials_are_swept_and_live_ones_kept(tmp_path):
    me = os.getpid()
    live = job_folder(tmp_path, "live", f"{me} {procstat.start_time(me)}")
    # The same PID with another start time: that rank 0 died and its PID was reused.
    reused = job_folder(tmp_path, "reused", f"{me} 0")
    with open("/proc/sys/kernel/pid_max", encoding="ascii") as fh:
        gone = job_folder(tmp_path, "gone", f"{int(fh.read()) + 1} 12345")  # never a PID
    being_made = job_folder(tmp_path, "new")  # no owner yet
    unreadable = job_folder(tmp_path, "odd", "not an owner")
    other = tmp_path / "someone-else"
    other.mkdir()

    removed = ddp.sweep_orphans(str(tmp_path))

    assert sorted(removed) == sorted([str(reused), str(gone)])
    assert not reused.exists() and not gone.exists()
    assert live.exists() and being_made.exists() and unreadable.exists() and other.exists()


def test_a_ddp_job_folder_names_its_rank_0(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    class DoneRank(WaitingRank):
        returncode = 0

        def __init__(self, *args, **kwargs):
            self.killed = False

    monkeypatch.setattr(subprocess, "Popen", DoneRank)  # rank 1, done as it starts
    ranks = Ranks(SimpleNamespace(devices=2, log_dir=None), {}, 5, 0, None, None)
    ranks.__enter__()
    try:
        (folder,) = tmp_path.glob(f"{ddp.JOB_PREFIX}*")
        pid, started = (folder / ddp.OWNER).read_text().split()
        assert (int(pid), started) == (os.getpid(), procstat.start_time(os.getpid()))
        assert ddp.sweep_orphans(str(tmp_path)) == []  # its owner runs: kept
    finally:
        ranks.__exit__(None, None, None)
    assert list(tmp_path.glob(f"{ddp.JOB_PREFIX}*")) == []


def test_a_follower_points_its_save_into_the_job_folder_and_makes_no_folder(
        tmp_path, monkeypatch):
    import tempfile

    from hpsearch.adapters.trial.callbacks import Follower

    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    job = tmp_path / f"{ddp.JOB_PREFIX}x"
    job.mkdir()
    saved = []
    trainer = SimpleNamespace(
        strategy=SimpleNamespace(broadcast=lambda obj, src: (True, False)),
        save_checkpoint=lambda path, weights_only: saved.append(path), should_stop=False)

    Follower(str(job)).on_train_epoch_end(trainer, None)

    assert [os.path.dirname(p) for p in saved] == [str(job)]
    assert list(temp.iterdir()) == []  # each rank once left an hps-rank-* folder here
