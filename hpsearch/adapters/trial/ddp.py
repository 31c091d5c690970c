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

from hpsearch.recovery.oom import OomLadder

log = logging.getLogger("hpsearch.trial")


#: Exit code of a DDP rank process that ran out of GPU memory.
EXIT_RANK_OOM = 3


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
        self._tmp = tempfile.mkdtemp(prefix="hps-ddp-")
        job = os.path.join(self._tmp, "job.pkl")
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

    def out_of_memory(self, wait_s: float = 30.0) -> bool:
        """Whether a rank ended because it ran out of GPU memory.

        Waits up to ``wait_s`` in all for the ranks to exit: a rank that ran out of
        memory closes its connections (rank 0's error) before its process has printed
        its traceback and torn torch down, which takes seconds on a loaded machine.
        """
        deadline = time.monotonic() + wait_s
        for proc in self.procs:
            try:
                if proc.wait(timeout=max(0.1, deadline - time.monotonic())) == EXIT_RANK_OOM:
                    return True
            except Exception:  # still running
                continue
        return False

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.spec.devices <= 1:
            return
        import shutil

        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        for key, value in self._env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        for proc in self.procs:
            try:
                # Ranks end with rank 0's fit; a failure elsewhere leaves them waiting.
                proc.wait(timeout=30 if exc_type is None else 1)
            except Exception:
                proc.kill()
                proc.wait()
        if exc_type is None:
            failed = [(i + 1, p.returncode) for i, p in enumerate(self.procs) if p.returncode]
            if failed:
                raise RuntimeError(f"trial {self.trial_number}: DDP rank(s) failed: "
                                   + ", ".join(f"rank {r} exit {c}" for r, c in failed))
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
