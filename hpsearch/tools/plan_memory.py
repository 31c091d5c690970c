"""GPU memory one trial of ``hpsearch plan`` needs, from what the CPU probe measured.

Pure module: the arithmetic. The measurements (parameter count, activation bytes, the
optimizer state) come from :mod:`hpsearch.adapters.trial.probe`.

**Memory per trial** (per GPU), in bytes::

    weights      = parameters x bytes per weight (4: fp32, the model's dtype)
    gradients    = trainable parameters x 4
    optimizer    = trainable parameters x 4 x states  (Adam/AdamW 2, SGD with momentum 1,
                   plain SGD 0; or the state the optimizer really held after one step)
    ddp buckets  = gradients again when a trial trains on several GPUs (DDP's buckets)
    activations  = the distinct tensors autograd saves for backward during one training
                   step at the trial's batch size, measured on CPU (parameters excluded)
    transient    = the largest of those tensors once more: while a layer computes its
                   output, its input is still held (measured on CPU)
    cuda context = 500 MiB, a fixed allowance for the CUDA context, cuBLAS/cuDNN
                   workspaces and the caching allocator's slack

``fp16``/``bf16`` mean Lightning's ``16-mixed``/``bf16-mixed`` (automatic mixed
precision), which is how hpsearch trains in 16 bits: weights, gradients and optimizer
state stay fp32; the activations (and the 16-bit weight copies autocast saves for
backward) are measured under CPU bf16 autocast, the same size as fp16. A GPU fits when
the total is at most 95% of its memory (times the trial's fraction of a shared GPU).

Lightning runs each step as forward, ``zero_grad``, backward, optimizer step, so the
previous step's gradients are still alive when the forward pass has saved every
activation: the peak of a steady-state step is the sum above (without the context). The
test suite checks the sum against the peak resident memory two real CPU training steps
add to a fresh process (within 20%; on its MLP the sum is within a few percent). Not
counted: memory a model keeps outside autograd (caches, buffers it creates in
``training_step`` and holds on to), cuDNN/cuBLAS workspaces beyond the allowance, and
the optimizer step's temporaries: on CUDA, PyTorch's default ``foreach`` Adam/AdamW
briefly holds one more fp32 copy of the parameters while activations are already freed,
which can be the step's peak for a large model trained on a small batch (when the
parameters' bytes exceed activations + transient).
"""

from __future__ import annotations

from dataclasses import dataclass

from hpsearch.adapters.trial.probe import ProbeFigures

MIB = 1024 * 1024
GIB = 1024 * MIB

PRECISIONS = ("fp32", "fp16", "bf16")
#: Lightning's precision for a GPU trial and for the CPU probe of each precision.
LIGHTNING_PRECISION = {"fp32": "32-true", "fp16": "16-mixed", "bf16": "bf16-mixed"}
#: fp32 states per trainable parameter.
OPTIMIZER_STATES = {"adam": 2.0, "adamw": 2.0, "sgd": 1.0}

CUDA_CONTEXT_MIB = 500.0
#: Share of a GPU's memory a trial may plan to use (allocator fragmentation, the driver).
HEADROOM = 0.95


@dataclass(frozen=True)
class MemoryEstimate:
    """GPU memory one trial needs on each of its GPUs, in bytes (see the module doc)."""

    n_params: int
    n_trainable: int
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    ddp_bytes: float
    activations_bytes: float
    cuda_context_bytes: float
    transient_bytes: float = 0.0

    @property
    def training_bytes(self) -> float:
        """Everything but the CUDA context: what one training step holds at its peak."""
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes
                + self.ddp_bytes + self.activations_bytes + self.transient_bytes)

    @property
    def total_bytes(self) -> float:
        return self.training_bytes + self.cuda_context_bytes

    @property
    def total_mib(self) -> float:
        return self.total_bytes / MIB

    def fits(self, gpu_memory_gb: float | None, gpu_fraction: float = 1.0) -> bool:
        """Whether the trial fits a GPU of ``gpu_memory_gb`` (GiB) of which it gets
        ``gpu_fraction``, keeping :data:`HEADROOM`; False when the memory is unknown."""
        if not gpu_memory_gb:
            return False
        return self.total_bytes <= gpu_memory_gb * GIB * min(1.0, gpu_fraction) * HEADROOM


def estimate_memory(n_params: int, n_trainable: int, activations_bytes: float, *,
                    optimizer_states: float = 2.0, weight_bytes: float = 4.0,
                    n_gpus: int = 1, cuda_context_mib: float = CUDA_CONTEXT_MIB,
                    optimizer_bytes: float | None = None,
                    transient_bytes: float = 0.0) -> MemoryEstimate:
    """GPU memory of one trial on each of its GPUs.

    Args:
        n_params: Parameters of the model.
        n_trainable: Those that require gradients.
        activations_bytes: Bytes autograd saves for backward in one step (measured).
        optimizer_states: fp32 states per trainable parameter (Adam 2, SGD momentum 1).
        weight_bytes: Bytes per weight and per gradient (4 for fp32 models, also under
            mixed precision).
        n_gpus: GPUs of one trial (DDP); above 1, DDP's gradient buckets add a copy of
            the gradients.
        cuda_context_mib: Fixed allowance for the CUDA context and workspaces.
        optimizer_bytes: The optimizer state measured after one step; replaces
            ``optimizer_states`` when given.
        transient_bytes: The largest single activation (measured): the output a layer
            is computing while its input is still held.
    """
    for name, value in (("n_params", n_params), ("n_trainable", n_trainable),
                        ("activations_bytes", activations_bytes),
                        ("optimizer_states", optimizer_states),
                        ("transient_bytes", transient_bytes)):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value!r}")
    gradients = n_trainable * weight_bytes
    optimizer = (n_trainable * 4.0 * optimizer_states if optimizer_bytes is None
                 else float(optimizer_bytes))
    return MemoryEstimate(
        n_params=n_params,
        n_trainable=n_trainable,
        weights_bytes=n_params * weight_bytes,
        gradients_bytes=gradients,
        optimizer_bytes=optimizer,
        ddp_bytes=gradients if n_gpus > 1 else 0.0,
        activations_bytes=float(activations_bytes),
        cuda_context_bytes=cuda_context_mib * MIB,
        transient_bytes=float(transient_bytes),
    )


def memory_of(probe: ProbeFigures, optimizer: str | None,
              n_gpus: int) -> tuple[MemoryEstimate, str]:
    """The memory estimate, from the optimizer state the probe measured or the one
    ``optimizer`` names, and a note saying which."""
    if optimizer is None:
        memory = estimate_memory(probe.n_params, probe.n_trainable, probe.activations_bytes,
                                 weight_bytes=probe.weight_bytes, n_gpus=n_gpus,
                                 optimizer_bytes=probe.optimizer_bytes,
                                 transient_bytes=probe.largest_activation_bytes)
        states = probe.optimizer_bytes / (4.0 * probe.n_trainable) if probe.n_trainable else 0
        return memory, (f"{probe.optimizer} (measured state after one step: "
                        f"{states:.2f} fp32 values per trainable parameter)")
    states = OPTIMIZER_STATES[optimizer]
    memory = estimate_memory(probe.n_params, probe.n_trainable, probe.activations_bytes,
                             optimizer_states=states, weight_bytes=probe.weight_bytes,
                             n_gpus=n_gpus, transient_bytes=probe.largest_activation_bytes)
    return memory, (f"{optimizer} as given ({states:g} fp32 state(s) per trainable "
                    f"parameter; the model configures {probe.optimizer})")

