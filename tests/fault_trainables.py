"""Trainables for the fault tests and the fault matrix: the real digits model, slowed
down (so a driver can be killed mid-run) or filling the run dir's disk once.

Trial processes import these, so every switch comes from the sampled params (one-choice
categoricals in the space), never from globals.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path
from typing import Any

from hpsearch.examples import digits

_MODEL_KEYS = ("lr", "hidden", "dropout", "optimizer", "layers")


def _model_kwargs(params: dict[str, Any]) -> dict[str, Any]:
    return {k: params[k] for k in _MODEL_KEYS if k in params}


#: The longest a trial waits on its hold file (a test that never removes it still ends).
HOLD_MAX_S = 300.0


class SlowMLP(digits.DigitsMLP):
    """The digits MLP that sleeps ``sleep_s`` after each validation epoch, and then for
    as long as the file ``hold_file`` exists (at most :data:`HOLD_MAX_S`): a test holds
    its trials between two epochs while it checks something that takes an unknown time
    on a busy machine, so the trials are still mid-run when it goes on."""

    def __init__(self, sleep_s: float, hold_file: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.sleep_s = sleep_s
        self.hold_file = Path(hold_file) if hold_file else None

    def on_validation_epoch_end(self) -> None:
        time.sleep(self.sleep_s)
        deadline = time.monotonic() + HOLD_MAX_S
        while (self.hold_file is not None and self.hold_file.exists()
               and time.monotonic() < deadline):
            time.sleep(0.1)


class FillingMLP(SlowMLP):
    """Fills the disk of ``fill_dir`` with a ballast file when epoch ``fill_epoch``
    (0-based) starts, once (the marker lives in ``marker_dir``, off that disk): the
    checkpoint at the end of that epoch, and every other write there, then fails with
    ENOSPC until the ballast is deleted."""

    def __init__(self, fill_dir: str, fill_epoch: int, marker_dir: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.fill_dir, self.fill_epoch, self.marker_dir = fill_dir, fill_epoch, marker_dir

    def on_train_epoch_start(self) -> None:
        marker = Path(self.marker_dir) / "filled"
        if self.current_epoch != self.fill_epoch or marker.exists():
            return
        marker.write_text(str(self.current_epoch))
        block = b"\0" * (64 * 1024)
        with open(Path(self.fill_dir) / "ballast", "ab") as f:
            try:
                while True:
                    f.write(block)
                    f.flush()
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
        # Single bytes too, so not even a small write fits.
        with open(Path(self.fill_dir) / "ballast", "ab", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 512)
            except OSError:
                pass


def slow(params: dict[str, Any]):
    """The digits MLP, ``params['sleep_s']`` seconds slower per epoch, held between
    epochs while the file ``params['hold_file']`` exists (see :class:`SlowMLP`)."""
    model = SlowMLP(float(params.get("sleep_s", 1.0)), params.get("hold_file"),
                    **_model_kwargs(params))
    return model, digits.DigitsData(batch_size=int(params.get("batch_size", 64)))


def fill_disk_once(params: dict[str, Any]):
    """The slow digits MLP; the first trial to start epoch ``params['fill_epoch']`` fills
    the disk of ``params['fill_dir']`` (the others train as usual)."""
    kwargs = _model_kwargs(params)
    sleep_s = float(params.get("sleep_s", 0.0))
    if params.get("fill_dir"):
        model = FillingMLP(params["fill_dir"], int(params["fill_epoch"]),
                           params["marker_dir"], sleep_s=sleep_s, **kwargs)
    else:
        model = SlowMLP(sleep_s, **kwargs)
    return model, digits.DigitsData(batch_size=int(params.get("batch_size", 64)))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


class CurveMLP(SlowMLP):
    """The digits MLP that also logs a scripted objective, ``score = quality x (1 -
    0.5^epoch)``: the same curve in every run, whatever the machine, so that two runs
    can be compared decision by decision."""

    def __init__(self, quality: float, **kwargs: Any):
        super().__init__(**kwargs)
        self.quality = quality

    def on_validation_epoch_end(self) -> None:
        self.log("score", self.quality * (1.0 - 0.5 ** (self.current_epoch + 1)))
        super().on_validation_epoch_end()


def scripted_curve(params: dict[str, Any]):
    """The slowed digits MLP whose objective ``score`` follows ``params['quality']``."""
    model = CurveMLP(float(params["quality"]), sleep_s=float(params.get("sleep_s", 0.0)),
                     **_model_kwargs(params))
    return model, digits.DigitsData()


class LingeringMLP(SlowMLP):
    """The digits MLP whose stop (Tune's SystemExit at a report) takes ``linger_s``
    seconds to unwind, as a slow checkpoint write or teardown would, in a process whose
    wait for a stopped trial's thread (Ray's ``TUNE_FUNCTION_THREAD_TIMEOUT_S``, read by
    the next trial's reset) is ``thread_wait_s``: the next trial handed to this process
    then finds it still busy."""

    def __init__(self, linger_s: float, thread_wait_s: int, **kwargs: Any):
        super().__init__(sleep_s=0.0, **kwargs)
        self.linger_s = linger_s
        os.environ["TUNE_FUNCTION_THREAD_TIMEOUT_S"] = str(thread_wait_s)  # Ray: an int

    def configure_callbacks(self):
        linger_s = self.linger_s

        class Linger(digits.pl.Callback):
            def on_exception(self, trainer, pl_module, exception) -> None:
                if isinstance(exception, SystemExit):
                    time.sleep(linger_s)

        return [Linger()]


def lingering(params: dict[str, Any]):
    """The digits MLP whose stop unwinds slowly (see :class:`LingeringMLP`)."""
    model = LingeringMLP(float(params["linger_s"]), int(params["thread_wait_s"]),
                         **_model_kwargs(params))
    return model, digits.DigitsData(batch_size=int(params.get("batch_size", 64)))
