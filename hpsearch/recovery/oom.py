"""Out-of-memory recovery: the ladder of changes a trial climbs after a CUDA OOM.

Pure module. Practitioners react to ``torch.OutOfMemoryError`` by hand in a known order:
a smaller batch, then 16-bit mixed precision, then gradient checkpointing where the
model supports it. :class:`OomLadder` does the same: each OOM moves the trial one rung
up (a rung that cannot apply is skipped and said so), the trial resumes from its
checkpoint with the change, and every rung taken is recorded in the study. Past the top
rung the trial fails with the reason. An OOM is neither a preemption nor a failure
retry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hpsearch.spec.sections import (DEFAULT_OOM_LADDER, GRAD_CHECKPOINTING, HALVE_BATCH,
                                    MIXED_PRECISION)


@dataclass
class OomLadder:
    """Where a trial stands on the ladder.

    Args:
        steps: The rungs, in order (each one of
            :data:`hpsearch.spec.sections.OOM_STEPS`, the names ``oom.ladder`` accepts).
        min_batch_size: ``halve_batch`` never goes below this.
        batch_param: The param holding the batch size (if the space has it).
    """

    steps: tuple[str, ...] = DEFAULT_OOM_LADDER
    min_batch_size: int = 8
    batch_param: str = "batch_size"
    batch_size: int | None = None  # the batch size now, once known
    precision: str | None = None  # "mixed" once mixed precision is on
    grad_checkpointing: bool = False
    taken: list[str] = field(default_factory=list)
    _next: int = 0

    def params(self, params: dict[str, Any]) -> dict[str, Any]:
        """The trial's params with the ladder's batch size applied."""
        out = dict(params)
        if self.batch_size is not None and self.batch_param in out:
            out[self.batch_param] = self.batch_size
        return out

    def climb(self, current_batch: int | None, supports_checkpointing: bool,
              batch_unknown: str | None = None) -> str | None:
        """Take the next rung that applies after an OOM; return what it did, or None when
        the ladder is exhausted.

        Args:
            current_batch: The batch size the trial ran with, if known.
            supports_checkpointing: Whether the model can checkpoint activations.
            batch_unknown: Why the batch size is unknown or cannot be changed (said when
                ``halve_batch`` is skipped); default "batch size unknown".
        """
        while self._next < len(self.steps):
            step = self.steps[self._next]
            self._next += 1
            if step == HALVE_BATCH:
                if current_batch is None:
                    self.taken.append(
                        f"{HALVE_BATCH}: skipped ({batch_unknown or 'batch size unknown'})")
                    continue
                halved = current_batch // 2
                if halved < self.min_batch_size:
                    self.taken.append(f"{HALVE_BATCH}: skipped ({current_batch} // 2 < "
                                      f"min_batch_size {self.min_batch_size})")
                    continue
                self.batch_size = halved
                self.taken.append(f"{HALVE_BATCH}: batch size {current_batch} -> {halved}")
                return self.taken[-1]
            if step == MIXED_PRECISION:
                if self.precision == "mixed":
                    continue
                self.precision = "mixed"
                self.taken.append(f"{MIXED_PRECISION}: 16-bit mixed precision")
                return self.taken[-1]
            if step == GRAD_CHECKPOINTING:
                if not supports_checkpointing:
                    self.taken.append(f"{GRAD_CHECKPOINTING}: skipped (the model does not "
                                      f"support it)")
                    continue
                self.grad_checkpointing = True
                self.taken.append(f"{GRAD_CHECKPOINTING}: on")
                return self.taken[-1]
            raise ValueError(f"unknown OOM step {step!r}")
        return None
