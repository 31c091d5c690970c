"""Trainables that need a real NVIDIA GPU, for the GPU check (``benchmarks/gpu_check.sh``).

:func:`oom_once` is the digits MLP of :mod:`hpsearch.examples.digits` made to run out of
GPU memory for real at its first batch size and to fit after one ``halve_batch`` of the
OOM ladder: each training step also allocates (and writes) a ballast tensor on the GPU,
a fixed number of bytes per sample of the batch. The bytes per sample are sized when the
model is built, from the GPU's free memory at that moment
(``torch.cuda.mem_get_info``), so that on any GPU, alone on it (a fraction of a GPU
that no other process uses counts), a batch of ``ballast_batch`` samples needs more than
all the free memory and a batch half as large needs :data:`HALF_SHARE` of it. The
failure is torch's own ``torch.cuda.OutOfMemoryError`` from the caching allocator, not a
simulated one. Before it propagates to the trial runner, the model logs one WARNING line
(prefix :data:`OOM_RECORD`) with its sizing and the error's first line, which lands in
the trial's log (``<run dir>/logs/trial-NNNN.log``) for the check to read.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import torch

from hpsearch.examples import digits

#: The share of the free GPU memory that a batch of half the first batch size needs.
#: Above 1/2, so that the first batch size needs more than all of it (2 x 0.6 = 1.2);
#: the other 40% leave the model, its optimizer, the activations of a batch and the
#: caching allocator's rounding far more room than an MLP on 8x8 images takes.
HALF_SHARE = 0.6

#: What the OOM line in the trial's log starts with.
OOM_RECORD = "gpu_oom:"

GIB = 2**30

log = logging.getLogger(__name__)

_RECORD = re.compile(re.escape(OOM_RECORD) + r" a batch of (?P<batch>\d+) needs "
                     r"(?P<need_gib>[\d.]+) GiB of ballast, (?P<free_gib>[\d.]+) GiB were "
                     r"free when it was sized \((?P<per_sample>\d+) bytes per sample, sized "
                     r"for a batch of (?P<sized_for>\d+)\): (?P<error>.*)")


def oom_record(batch: int, per_sample: int, free_bytes: int, sized_for: int,
               error: str) -> str:
    """The line logged when the ballast of a batch of ``batch`` did not fit (``error``:
    the first line of torch's message); :func:`parse_oom_record` reads it back."""
    return (f"{OOM_RECORD} a batch of {batch} needs {batch * per_sample / GIB:.2f} GiB of "
            f"ballast, {free_bytes / GIB:.2f} GiB were free when it was sized "
            f"({per_sample} bytes per sample, sized for a batch of {sized_for}): {error}")


def parse_oom_record(text: str) -> dict[str, Any] | None:
    """The first :func:`oom_record` line in ``text`` (a trial log) as ``{"batch",
    "need_gib", "free_gib", "per_sample", "sized_for", "error"}``, or None."""
    found = _RECORD.search(text)
    if found is None:
        return None
    return {"batch": int(found["batch"]), "need_gib": float(found["need_gib"]),
            "free_gib": float(found["free_gib"]), "per_sample": int(found["per_sample"]),
            "sized_for": int(found["sized_for"]), "error": found["error"].strip()}


def ballast_bytes_per_sample(free_bytes: int, first_batch: int,
                             half_share: float = HALF_SHARE) -> int:
    """Bytes of GPU ballast per sample so that a batch of ``first_batch`` cannot fit
    and a batch of ``first_batch // 2`` takes ``half_share`` of the free memory.

    Args:
        free_bytes: Free GPU memory, bytes (``torch.cuda.mem_get_info()[0]``), >= 1 MiB.
        first_batch: The batch size the trial starts with (>= 2).
        half_share: Share of ``free_bytes`` that half the batch needs, strictly between
            1/2 (or the first batch would fit) and 1 (or the half would not).

    Returns:
        The bytes per sample (rounded down), with ``first_batch * bytes > free_bytes``
        and ``(first_batch // 2) * bytes <= half_share * free_bytes``.

    Raises:
        ValueError: for arguments outside those ranges, or a batch so large against the
            free memory that whole bytes per sample cannot tell the two sizes apart.
    """
    if free_bytes < 2**20:
        raise ValueError(f"free_bytes must be at least 1 MiB, got {free_bytes!r}")
    if first_batch < 2:
        raise ValueError(f"first_batch must be >= 2 (it is halved), got {first_batch!r}")
    if not 0.5 < half_share < 1.0:
        raise ValueError(f"half_share must be between 0.5 and 1, got {half_share!r}")
    half = first_batch // 2
    per_sample = int(free_bytes * half_share) // half
    if first_batch * per_sample <= free_bytes:  # rounding, with a batch of millions
        raise ValueError(f"cannot size a ballast for a batch of {first_batch} in "
                         f"{free_bytes} free bytes: too few bytes per sample")
    return per_sample


class BallastMLP(digits.DigitsMLP):
    """The digits MLP whose training steps also hold ``per_sample_bytes`` of GPU memory
    per sample of their batch (allocated, written, freed at the end of the step)."""

    def __init__(self, per_sample_bytes: int, free_bytes: int, ballast_batch: int,
                 **kwargs: Any):
        super().__init__(**kwargs)
        self.per_sample_bytes = per_sample_bytes
        self.free_bytes = free_bytes
        self.ballast_batch = ballast_batch

    def training_step(self, batch, batch_idx):
        n = batch[0].shape[0]
        need = n * self.per_sample_bytes
        try:
            ballast = torch.empty(need, dtype=torch.uint8, device=self.device)
        except torch.cuda.OutOfMemoryError as exc:
            message = str(exc).strip()
            log.warning("%s", oom_record(n, self.per_sample_bytes, self.free_bytes,
                                         self.ballast_batch,
                                         message.splitlines()[0] if message
                                         else type(exc).__name__))
            raise
        ballast.fill_(1)  # written, so the memory is in use, not only reserved
        del ballast
        return super().training_step(batch, batch_idx)


def oom_once(params: dict[str, Any]):
    """The digits MLP that runs out of GPU memory at batch ``params['ballast_batch']``
    and fits at half of it (see the module doc).

    Keys: ``batch_size`` (the one the OOM ladder halves), ``ballast_batch`` (the batch
    size the ballast is sized for: the space's first batch size, left alone by the
    ladder), and the digits model's keys (``lr``, ``hidden``, ...).

    Raises:
        RuntimeError: when torch sees no CUDA device (this trainable exists to fill one).
    """
    if not torch.cuda.is_available():
        raise RuntimeError("oom_once needs a CUDA GPU (torch sees none): it sizes its "
                           "ballast from the GPU's free memory")
    # Sized again at every build (the ladder rebuilds after an OOM), always for the first
    # batch size: the half batch then needs HALF_SHARE of what is free now.
    free_bytes, _ = torch.cuda.mem_get_info()
    first = int(params["ballast_batch"])
    model_keys = ("lr", "hidden", "dropout", "optimizer", "layers", "momentum")
    model = BallastMLP(ballast_bytes_per_sample(free_bytes, first), free_bytes, first,
                       **{k: params[k] for k in model_keys if k in params})
    return model, digits.DigitsData(batch_size=int(params["batch_size"]))
