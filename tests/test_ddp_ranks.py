"""How rank 0 ends its DDP ranks (fast: :class:`~hpsearch.adapters.trial.ddp.Ranks`
leaving its block with stand-in rank processes; the real ranks are in test_e2e_ddp).

An error of rank 0 may be the echo of another rank's out-of-memory exit, so rank 0 looks
for that rank's mark before it ends the ranks. A stop is rank 0's own (Tune's SystemExit
at a report, Ctrl-C): it looks for nothing, and the trial's process is free at once for
the next trial Tune hands it.
"""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

import pytest

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


def test_an_error_looks_for_another_ranks_out_of_memory_mark_first(tmp_path, monkeypatch):
    looked, rank = leaving(tmp_path, monkeypatch, RuntimeError)
    assert looked == [ddp.RANK_OOM_WAIT_S]
    assert rank.killed
