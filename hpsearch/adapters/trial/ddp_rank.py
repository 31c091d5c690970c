"""A DDP rank other than 0 of a multi-process trial: ``python -m hpsearch.adapters.trial.ddp_rank
JOB.pkl RANK``.

Started by :class:`hpsearch.adapters.trial.ddp.Ranks` with the torch.distributed
rendezvous in its environment. It builds the same trainable at the same params and
seed, applies the same OOM rungs, resumes from the same checkpoint, and trains its share
of each epoch. It reports nothing and writes no checkpoint: at each epoch's end it takes
rank 0's decision (checkpoint now? stop?) by a broadcast and joins the save's barrier.
It exits 0 after the fit, :data:`~hpsearch.adapters.trial.ddp.EXIT_RANK_OOM` when it runs
out of GPU memory (having first created its
:func:`~hpsearch.adapters.trial.ddp.oom_mark`), 1 on any other error (the traceback goes
to its log), and is killed
with the thread of rank 0 that started it.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import traceback


def _die_with_parent() -> None:
    """SIGKILL this process when the thread that started it ends (Linux)."""
    parent = os.getppid()
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before prctl took effect
        os._exit(1)


def main(argv: list[str]) -> int:
    _die_with_parent()
    job_path, rank = argv[0], int(argv[1])
    with open(job_path, "rb") as fh:
        job = pickle.load(fh)  # written by rank 0 (cloudpickle, readable by pickle)
    import torch

    from hpsearch.adapters.trial import runner
    from hpsearch.adapters.trial.callbacks import Follower, RngState, make
    from hpsearch.adapters.trial.ddp import EXIT_RANK_OOM, oom_mark

    spec = job["spec"]
    torch.set_num_threads(runner.rank_threads(spec))
    try:
        built, _, _ = runner.prepare(spec, job["params"], job["trial_number"],
                                     job["seed"], job["ladder"])
        callbacks = [make(built.api, RngState), make(built.api, Follower, os.path.dirname(job_path))]
        trainer = runner.make_trainer(spec, callbacks, job["ladder"], built.api)
        if job["ckpt_path"] is None:
            trainer.fit(built.module, **built.fit_kwargs())
        else:
            # Rank 0 checked this checkpoint (data only, Lightning's keys) before.
            trainer.fit(built.module, **built.fit_kwargs(), ckpt_path=job["ckpt_path"],
                        weights_only=True)
    except torch.OutOfMemoryError:
        # The mark first: rank 0 learns of it at once, not only from the exit code,
        # which comes after the traceback and torch's teardown.
        with open(oom_mark(job_path, rank), "w"):
            pass
        traceback.print_exc()
        return EXIT_RANK_OOM
    except Exception:
        print(f"rank {rank} failed:", file=sys.stderr)
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
