"""Multi-process (DDP) trials: rank 0 starts the other ranks as child processes.

The trial's Tune worker is rank 0 (:mod:`hpsearch.adapters.trial.runner`: it reports and
checkpoints); :class:`Ranks` starts ranks 1..N-1 (:mod:`hpsearch.adapters.trial.ddp_rank`)
on the GPUs Ray gave the trial, with the rendezvous on 127.0.0.1.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from hpsearch.adapters import procstat
from hpsearch.recovery.oom import OomLadder

log = logging.getLogger("hpsearch.trial")


#: Exit code of a DDP rank process that ran out of GPU memory.
EXIT_RANK_OOM = 3

#: Seconds rank 0, after its own error, waits for a rank's out-of-memory mark before it
#: ends the ranks (a rank that did not run out of memory and waits in a collective for
#: rank 0 costs this wait once, on a trial that fails anyway; a stop, or rank 0's own
#: out-of-memory error, waits for none).
RANK_OOM_WAIT_S = 30.0


#: The job folders of DDP trials, one per attempt, in the node's temporary folder (the
#: run dir may not be on this node): ``<prefix><random>/``, holding :data:`OWNER` and the
#: pickled job the ranks read.
JOB_PREFIX = "hps-ddp-"

#: The file of a job folder that names its rank 0: ``<pid> <start time>``.
OWNER = "owner"


def sweep_orphans(root: str | None = None) -> list[str]:
    """Remove the job folders under ``root`` (the temporary folder) whose rank 0 is gone:
    a trial killed outright (SIGKILL, a lost node's process) never ran the ``finally``
    that removes its folder. A folder is an orphan when the process its :data:`OWNER`
    names is not running, or is another process that took the same PID since (its start
    time differs); a folder without an owner file yet (one being made) is left alone, as
    is everything where ``/proc`` is missing. Returns the folders removed."""
    import glob
    import shutil
    import tempfile

    if not os.path.isdir("/proc/self"):
        return []
    removed = []
    for folder in glob.glob(os.path.join(root or tempfile.gettempdir(), JOB_PREFIX + "*")):
        try:
            with open(os.path.join(folder, OWNER), encoding="ascii") as fh:
                pid, started = fh.read().split()
            # A zombie rank 0 has ended too: its folder is no longer in use.
            alive = procstat.same_process(int(pid), started)
        except (OSError, ValueError):
            continue
        if not alive:
            shutil.rmtree(folder, ignore_errors=True)  # another user's stays
            if not os.path.exists(folder):
                removed.append(folder)
    return removed


def _out_of_memory(exc: BaseException | None) -> bool:
    """Whether ``exc`` is torch's out-of-memory error (False where torch is not loaded:
    then nothing of torch raised it)."""
    import sys

    torch = sys.modules.get("torch")
    oom = getattr(torch, "OutOfMemoryError", None)
    return oom is not None and isinstance(exc, oom)


def oom_mark(job_path: str, rank: int) -> str:
    """The file a rank other than 0 creates when it runs out of GPU memory, before it
    exits: next to the job file of its trial (a folder of that trial's own)."""
    return os.path.join(os.path.dirname(job_path), f"rank{rank}.oom")


def _rendezvous_port() -> int:
    """A free port for rank 0's TCPStore, below Linux's ephemeral range (32768+) and above
    Ray's worker ports (10002-19999): a port freed by ``bind(0)`` can be taken by any
    outgoing connection before the store listens on it; these cannot."""
    import random
    import socket

    for _ in range(100):
        port = random.randint(20000, 32000)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Ranks:
    """The DDP ranks 1..N-1 of a trial, as child processes of this one (rank 0).

    Entering sets the torch.distributed rendezvous (``MASTER_ADDR``/``MASTER_PORT`` on
    127.0.0.1, ``WORLD_SIZE``, ``LOCAL_RANK=0``: Lightning then launches nothing itself)
    in this process's environment and starts ``python -m hpsearch.adapters.trial.ddp_rank`` for
    each other rank, with the same trial, params, seed, OOM rungs and checkpoint to
    resume from; they inherit ``CUDA_VISIBLE_DEVICES`` (the GPUs Ray gave the trial) and
    die with this process's training thread (``PR_SET_PDEATHSIG``). Leaving restores the
    environment, ends the process group and stops the ranks still running. A no-op for
    a one-process trial.
    """

    ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NODE_RANK", "LOCAL_RANK")

    def __init__(self, spec: Any, params: dict[str, Any], trial_number: int,
                 seed: int, ladder: OomLadder, ckpt_path: str | None):
        self.spec, self.params, self.trial_number, self.seed = spec, params, trial_number, seed
        self.ladder, self.ckpt_path = ladder, ckpt_path
        self.procs: list[Any] = []
        self._env: dict[str, str | None] = {}
        self._tmp: str | None = None
        self._job = ""  # the job file the ranks read, in _tmp
        self._rank_oom = False

    def __enter__(self) -> "Ranks":
        if self.spec.devices <= 1:
            return self
        import subprocess
        import sys
        import tempfile

        import cloudpickle

        port = _rendezvous_port()
        values = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                  "WORLD_SIZE": str(self.spec.devices), "NODE_RANK": "0"}
        for folder in sweep_orphans():
            log.info("removed %s: its trial was killed before it could", folder)
        self._tmp = tempfile.mkdtemp(prefix=JOB_PREFIX)
        with open(os.path.join(self._tmp, OWNER), "w", encoding="ascii") as fh:
            fh.write(f"{os.getpid()} {procstat.start_time(os.getpid())}")
        job = self._job = os.path.join(self._tmp, "job.pkl")
        with open(job, "wb") as fh:
            # cloudpickle: a build function given as an object (a notebook's) goes by value.
            cloudpickle.dump({"spec": self.spec, "params": self.params,
                              "trial_number": self.trial_number, "seed": self.seed,
                              "ladder": self.ladder, "ckpt_path": self.ckpt_path}, fh)
        env = dict(os.environ, **values, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        for rank in range(1, self.spec.devices):
            out = subprocess.DEVNULL
            if self.spec.log_dir is not None:
                try:
                    out = open(os.path.join(self.spec.log_dir,
                                            f"trial-{self.trial_number:04d}.rank{rank}.log"),
                               "ab")
                except OSError:
                    out = subprocess.DEVNULL
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "hpsearch.adapters.trial.ddp_rank", job, str(rank)],
                env=dict(env, LOCAL_RANK=str(rank)), cwd=os.getcwd(), stdout=out,
                stderr=subprocess.STDOUT))
            if out is not subprocess.DEVNULL:
                out.close()
        self._env = {k: os.environ.get(k) for k in self.ENV}
        os.environ.update(values, LOCAL_RANK="0")
        log.info("trial %d: DDP on %d processes, rendezvous 127.0.0.1:%d", self.trial_number,
                 self.spec.devices, port)
        return self

    def out_of_memory(self) -> bool:
        """Whether a rank other than 0 ran out of GPU memory (known once the ``with``
        block has ended with rank 0's error: see :meth:`_rank_ran_out`)."""
        return self._rank_oom

    def _rank_ran_out(self, wait_s: float = RANK_OOM_WAIT_S) -> bool:
        """Whether a rank ran out of GPU memory, told by its mark or its exit code.

        A rank that runs out of memory first leaves a mark (:func:`oom_mark`, next to
        the job file), then prints its traceback and exits with :data:`EXIT_RANK_OOM`.
        Rank 0 sees that rank's connections close about when the mark is made; its exit
        comes later (the traceback, torch's teardown: seconds on a loaded machine), so
        the mark, not the exit, is what is waited for: up to ``wait_s`` in all, less
        once every rank has exited. Called before the ranks are killed and their folder
        removed.
        """
        marks = [oom_mark(self._job, rank)
                 for rank in range(1, self.spec.devices)]
        deadline = time.monotonic() + wait_s
        while True:
            if any(os.path.exists(mark) for mark in marks):
                return True
            codes = [proc.poll() for proc in self.procs]
            if EXIT_RANK_OOM in codes:
                return True
            if None not in codes or time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.spec.devices <= 1:
            return
        import shutil
        import sys

        # No process group without torch.distributed loaded: nothing to import for that.
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        for key, value in self._env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        try:
            # A stop (Tune's SystemExit at a report, Ctrl-C) and rank 0's own
            # out-of-memory error are rank 0's, never the echo of a peer's
            # out-of-memory exit: no wait for a mark. The waiting ranks are ended below.
            if (exc_type is not None and issubclass(exc_type, Exception)
                    and not _out_of_memory(exc) and self._tmp is not None):
                self._rank_oom = self._rank_ran_out()
            for proc in self.procs:
                try:
                    # Ranks end with rank 0's fit; a failure elsewhere leaves them waiting.
                    proc.wait(timeout=30 if exc_type is None else 1)
                except Exception:
                    proc.kill()
                    proc.wait()
            if exc_type is None:
                failed = [(i + 1, p.returncode) for i, p in enumerate(self.procs)
                          if p.returncode]
                if failed:
                    raise RuntimeError(f"trial {self.trial_number}: DDP rank(s) failed: "
                                       + ", ".join(f"rank {r} exit {c}" for r, c in failed))
        finally:
            # The job folder goes with the ranks, also when one of them failed (the
            # error above): it held the trial's pickled job and nothing else.
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)
