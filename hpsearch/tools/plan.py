"""``hpsearch plan``: will a trial fit a GPU, and what would the whole search cost on each?

Pure module: the arithmetic and the table. The measurements it works from (parameter
count, activation bytes, CPU step times) come from :mod:`hpsearch.adapters.trial.probe`, which
trains a few batches of the trainable on this machine's CPU.

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

**Time per epoch** on a GPU, without ``--throughput``: the CPU probe's measured seconds
per batch (train and validation; data loading included), scaled by the ratio of this
CPU's measured matmul rate to the GPU's nominal dense rate for the precision (datasheet
TFLOPS, :data:`GPU_SPEEDS`) times :data:`GPU_EFFICIENCY`, and never below
:data:`TRAIN_STEP_FLOOR_S` / :data:`VAL_STEP_FLOOR_S` per batch (small models are bound
by Python and kernel-launch overhead, not FLOPs). This is a rough guide, easily 2-3x off
either way; a throughput measured on the target GPU (``--throughput SAMPLES_PER_S``,
optionally ``@MODEL`` to scale it to the other GPUs by the same table) replaces it.
With ``--throughput`` an epoch is its training samples / throughput, plus validation in
the proportion the CPU probe measured.

**Cost of the search** is billed as a provider bills instances (see
:mod:`hpsearch.money.nodes`): the trials are packed on instances by their resources (an
instance runs as many at once as its GPUs hold: ``gpu_count // resources.gpu``; CPU
trials on the local machine by its CPUs), ``search.concurrency`` at a time (default: the
slots of one instance), so the search rents ``ceil(at once / slots)`` instances for
``waves x trial time``, where a wave is one round of trials at once (:func:`pack`). Each
instance is billed once for that rental, rounded up to the offer's
``billing_granularity_s`` and at least its ``min_billing_s``. The trials' shares
(``trials x trial time x GPUs per trial / the instance's GPUs``) are the work; the rest
of what the instances bill is *idle* (an 8-GPU instance waiting for its last wave, a
minimum longer than the search), shown beside the cost. A trial runs start-up + epochs x
seconds per epoch; start-up is :data:`STARTUP_S` (a trial process's spawn and imports)
plus the measured build/setup time. A row priced for the GPU only (a cloud's GPU add-on)
includes its VM where the catalogue knows it, and says so where it does not. Spot is
the expected cost: the rental grown by the work preemptions lose (half an epoch and a
restart each, at the row's interruption rate as ``pricing.spot: auto`` counts it).

Epochs default to ``max_epochs``: what the search costs if no trial is pruned, the
upper end; ``--epochs`` assumes fewer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Callable, Mapping

from hpsearch.adapters.trial.probe import ProbeFigures
from hpsearch.errors import ConfigError
from hpsearch.money import catalog as catalog_mod
from hpsearch.money.fmt import fmt_money
from hpsearch.spec.space import CategoricalParam, ConstParam, FloatParam, IntParam, Space

MIB = 1024 * 1024
GIB = 1024 * MIB

PRECISIONS = ("fp32", "fp16", "bf16")
#: Lightning's precision for a GPU trial and for the CPU probe of each precision.
LIGHTNING_PRECISION = {"fp32": "32-true", "fp16": "16-mixed", "bf16": "bf16-mixed"}
#: fp32 states per trainable parameter.
OPTIMIZER_STATES = {"adam": 2.0, "adamw": 2.0, "sgd": 1.0}
POINTS = ("mid", "high")

CUDA_CONTEXT_MIB = 500.0
#: Share of a GPU's memory a trial may plan to use (allocator fragmentation, the driver).
HEADROOM = 0.95
#: Achieved share of a GPU's nominal rate in training, relative to this CPU's measured
#: matmul rate.
GPU_EFFICIENCY = 0.5
#: Least seconds a GPU spends per training / validation batch (Lightning's loop, the
#: optimizer step's kernels).
TRAIN_STEP_FLOOR_S = 0.002
VAL_STEP_FLOOR_S = 0.001
#: Seconds each trial spends starting (process spawn, imports of torch and Lightning).
STARTUP_S = 4.0


@dataclass(frozen=True)
class GpuSpeed:
    """Nominal dense throughput of a GPU model (NVIDIA datasheets, no sparsity).

    Attributes:
        fp32_tflops: Plain fp32 (PyTorch's default matmul precision uses no TF32).
        half_tflops: fp16/bf16 tensor cores with fp32 accumulation.
        bf16: Whether the GPU has bf16 (Ampere and later).
    """

    fp32_tflops: float
    half_tflops: float
    bf16: bool

    def tflops(self, precision: str) -> float | None:
        """The rate for ``precision``, or None where the GPU cannot run it (bf16)."""
        if precision == "fp32":
            return self.fp32_tflops
        if precision == "bf16" and not self.bf16:
            return None
        return self.half_tflops


#: Keyed by the catalogue's ``gpu_model`` (H200 for detected machines).
GPU_SPEEDS: dict[str, GpuSpeed] = {
    "T4": GpuSpeed(8.1, 65.0, False),
    "V100": GpuSpeed(15.7, 125.0, False),
    "A10G": GpuSpeed(31.2, 70.0, True),
    "L4": GpuSpeed(30.3, 121.0, True),
    "RTX 3090": GpuSpeed(35.6, 71.0, True),
    "RTX 4090": GpuSpeed(82.6, 165.0, True),
    "A100-40GB": GpuSpeed(19.5, 312.0, True),
    "A100-80GB": GpuSpeed(19.5, 312.0, True),
    "H100": GpuSpeed(67.0, 989.0, True),
    "H200": GpuSpeed(67.0, 989.0, True),
}


# ---------------------------------------------------------------------------------------
# The configuration to probe.


def _on_grid(value: float, param: FloatParam | IntParam) -> float | int:
    """``value`` moved to the nearest legal value of ``param`` (its ``low + k x step``
    grid where it has a step; never outside ``[low, high]``); ties go up."""
    if isinstance(param, IntParam):
        step = param.step or 1
        last = (param.high - param.low) // step
        k = min(last, max(0, math.floor((value - param.low) / step + 0.5)))
        return param.low + k * step
    if param.step is None:
        return min(param.high, max(param.low, float(f"{value:.6g}")))
    # Decimal arithmetic: (0.25 - 0.1) / 0.1 is 1.4999999999999998 in floats.
    low, step = Decimal(repr(param.low)), Decimal(repr(param.step))
    last = int((Decimal(repr(param.high)) - low) / step)
    k = min(last, max(0, math.floor((Decimal(repr(float(value))) - low) / step
                                    + Decimal("0.5"))))
    return float(low + k * step)


def representative_params(space: Space, point: str = "mid") -> dict[str, Any]:
    """One configuration standing for the space.

    ``mid``: each float/int at the midpoint of its range (the geometric mean with
    ``log: true``), moved to the nearest value on its step grid (ints to the nearest
    integer, ties up; floats without a step to 6 significant digits); each categorical
    at its first choice. ``high``: each float/int at the largest value of its range
    (on its grid) and each categorical of numbers at its largest choice (the largest
    model where size grows with a param: width, depth, batch size), other categoricals
    at their first choice. Constants keep their value; a conditional param is included
    only where the values picked for its parents activate it (as in a trial).
    """
    if point not in POINTS:
        raise ConfigError("--point", f"must be one of {', '.join(POINTS)}", point)
    out: dict[str, Any] = {}
    for name, param in space.items():
        if not space.is_active(name, out):
            continue
        if isinstance(param, ConstParam):
            out[name] = param.value
            continue
        if isinstance(param, CategoricalParam):
            numbers = [c for c in param.choices
                       if isinstance(c, (int, float)) and not isinstance(c, bool)]
            if point == "high" and numbers and len(numbers) == len(param.choices):
                out[name] = max(numbers)
            else:
                out[name] = param.choices[0]
            continue
        if point == "high":
            target = param.high
        elif param.log:
            target = math.exp((math.log(param.low) + math.log(param.high)) / 2)
        else:
            target = (param.low + param.high) / 2
        out[name] = _on_grid(target, param)
    return out


# ---------------------------------------------------------------------------------------
# Memory.


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


# ---------------------------------------------------------------------------------------
# Time.


@dataclass(frozen=True)
class Throughput:
    """A training throughput the user measured: samples per second, on ``model``
    (None: taken as is for every GPU)."""

    samples_per_s: float
    model: str | None = None


def parse_throughput(text: str, models: list[str]) -> Throughput:
    """``"1200"`` or ``"1200@A100-80GB"`` (a catalogue GPU model, any case)."""
    value, at, model = str(text).strip().partition("@")
    try:
        rate = float(value)
    except ValueError:
        raise ConfigError("--throughput", "must be samples per second, optionally "
                          "@MODEL (e.g. 1200@A100-80GB)", text) from None
    if not math.isfinite(rate) or rate <= 0:
        raise ConfigError("--throughput", "must be > 0 samples per second", text)
    if not at:
        return Throughput(rate)
    if not model.strip():
        raise ConfigError("--throughput", "names no GPU model after '@' (e.g. "
                          "1200@A100-80GB)", text)
    known = {m.lower().replace(" ", ""): m for m in models}
    key = model.lower().replace(" ", "")
    if key not in known:
        raise ConfigError("--throughput", f"unknown GPU model '{model}'; known: "
                          f"{', '.join(sorted(set(models)))}", text)
    if known[key] not in GPU_SPEEDS:
        raise ConfigError("--throughput", f"no speed figure for {known[key]} to scale "
                          "from; give the throughput without @MODEL", text)
    return Throughput(rate, known[key])


def gpu_epoch_s(probe: ProbeFigures, model: str, precision: str, n_gpus: int = 1,
                throughput: Throughput | None = None) -> tuple[float | None, str]:
    """Seconds per epoch of one trial on ``n_gpus`` GPUs of ``model``; ``(None, why)``
    when unknown or the GPU cannot run the precision."""
    speed = GPU_SPEEDS.get(model)
    rate = speed.tflops(precision) if speed else None
    if speed is not None and rate is None:
        return None, f"no {precision} on {model}"
    n_gpus = max(1, n_gpus)
    if throughput is not None:
        if not probe.train_samples:
            return None, "training samples per epoch unknown"
        samples_per_s = throughput.samples_per_s
        if throughput.model is not None:
            reference = GPU_SPEEDS[throughput.model].tflops(precision)
            if reference is None:
                return None, f"no {precision} on {throughput.model}"
            if rate is None:
                return None, f"no speed figure for {model}"
            samples_per_s *= rate / reference
        return probe.train_samples / samples_per_s * (1.0 + probe.val_ratio), ""
    if rate is None:
        return None, f"no speed figure for {model}"
    if probe.train_step_s is None or not probe.train_batches or probe.cpu_gflops <= 0:
        return None, "no training batch was timed"
    scale = probe.cpu_gflops / (rate * 1000.0 * GPU_EFFICIENCY)
    train = max(probe.train_step_s * scale, TRAIN_STEP_FLOOR_S) * probe.train_batches
    val = 0.0
    if probe.val_step_s and probe.val_batches:
        val = max(probe.val_step_s * scale, VAL_STEP_FLOOR_S) * probe.val_batches
    return (train + val) / n_gpus, ""


# ---------------------------------------------------------------------------------------
# The table.


def billed_s(run_s: float, offer: catalog_mod.Offer) -> float:
    """Seconds billed for one interval of ``run_s`` seconds on ``offer``: rounded up to
    its billing granularity, at least its minimum billing period (as
    :meth:`hpsearch.money.ledger_entries.Interval.billed_s` bills it)."""
    from hpsearch.money.nodes import billed_seconds

    return billed_seconds(run_s, offer.billing_granularity_s, offer.min_billing_s)


@dataclass(frozen=True)
class PlanRow:
    """One catalogue GPU offer, judged for the search.

    Attributes:
        offer: The catalogue row.
        fits: Whether one trial fits its GPU memory (and GPU count).
        available_mib: Memory a trial may plan to use there (its share, with headroom).
        epoch_s: Estimated seconds per epoch, or None (``why`` says why).
        trial_s: Estimated run time of one trial (start-up and every epoch).
        billed_s: Seconds billed for one instance's rental on demand (:func:`billed_s`).
        spot_billed_s: The same on spot, preemption losses included.
        share: Fraction of the instance a trial pays for.
        on_demand_cost, spot_cost: The whole search's cost, or None (no such price).
        spot_factor: Billed spot time per useful second.
        why: Why it does not fit or has no time estimate.
        nodes: Instances rented for the search; ``slots``: trials one runs at once.
        wall_s: How long they are rented (``waves x trial_s``).
        idle_cost: What the instances bill beyond the trials' shares (on-demand, else
            spot), None without a cost.
        vm_missing: A GPU-only row whose VM price the catalogue lacks (not counted).
    """

    offer: catalog_mod.Offer
    fits: bool
    available_mib: float | None
    epoch_s: float | None
    trial_s: float | None
    share: float
    on_demand_cost: float | None
    spot_cost: float | None
    spot_factor: float | None
    why: str = ""
    billed_s: float | None = None
    spot_billed_s: float | None = None
    nodes: int = 1
    slots: int = 1
    wall_s: float | None = None
    idle_cost: float | None = None
    vm_missing: bool = False

    @property
    def best(self) -> tuple[float, str] | None:
        """``(cost, "spot" | "on-demand")``, the cheaper option, or None."""
        options = [(c, k) for c, k in ((self.spot_cost, "spot"),
                                       (self.on_demand_cost, "on-demand")) if c is not None]
        return min(options) if options else None

    @property
    def minimum_billed(self) -> bool:
        """Whether the billing minimum or granularity bills an instance for more time
        than it is rented (by more than a second)."""
        return (self.wall_s is not None and self.billed_s is not None
                and self.billed_s > self.wall_s + 1.0)

    @property
    def idle_share(self) -> float | None:
        """Idle over the instances' bill (the option of :attr:`idle_cost`)."""
        cost = self.on_demand_cost if self.on_demand_cost is not None else self.spot_cost
        if self.idle_cost is None or not cost:
            return None
        return self.idle_cost / cost


@dataclass
class Plan:
    """Everything ``plan`` prints."""

    name: str
    trainable: str
    point: str
    probe: ProbeFigures
    memory: MemoryEstimate
    precision: str
    optimizer_note: str
    trials: int
    epochs: int
    gpus_per_trial: float
    throughput: Throughput | None
    rows: list[PlanRow]
    too_small: list[PlanRow]
    cpu_row: tuple[str, float | None, str] | None
    currency_filter: str | None = None
    budget: tuple[float, str] | None = None
    notes: list[str] = field(default_factory=list)
    epochs_given: bool = False

    def cheapest_whole(self, currency: str) -> tuple[PlanRow, float, str] | None:
        """The cheapest rentable row in ``currency`` whose price includes its VM."""
        out = None
        for row in self.rows:
            best = row.best
            if (best is None or not row.fits or _owned(row.offer) or row.vm_missing
                    or row.offer.currency != currency):
                continue
            if out is None or best[0] < out[1]:
                out = (row, best[0], best[1])
        return out

    def recommendations(self) -> dict[str, tuple[PlanRow, float, str]]:
        """``{currency: (row, cost, "spot" | "on-demand")}``: the cheapest rentable row
        that fits, per currency. Rows of provider ``local`` (the depreciation of a
        machine one owns) are priced in the table but never recommended."""
        out: dict[str, tuple[PlanRow, float, str]] = {}
        for row in self.rows:
            best = row.best
            if best is None or not row.fits or _owned(row.offer):
                continue
            current = out.get(row.offer.currency)
            if current is None or best[0] < current[1]:
                out[row.offer.currency] = (row, best[0], best[1])
        return out


def _positive(value: Any, option: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(option, "must be an integer >= 1", value)
    return value


def check_options(catalog: catalog_mod.Catalog, *, trials: int = 1, epochs: int = 1,
                  precision: str = "fp32", optimizer: str | None = None,
                  currency: str | None = None, throughput: Throughput | None = None,
                  ) -> str | None:
    """Check ``plan``'s options before anything is probed; return the currency upper-cased.

    Raises:
        ConfigError: naming the option (``--trials``, ``--epochs``, ``--precision``,
            ``--optimizer``, ``--currency``, ``--throughput``) and its bad value.
    """
    _positive(trials, "--trials")
    _positive(epochs, "--epochs")
    if precision not in PRECISIONS:
        raise ConfigError("--precision", f"must be one of {', '.join(PRECISIONS)}",
                          precision)
    if optimizer is not None and optimizer not in OPTIMIZER_STATES:
        raise ConfigError("--optimizer", f"must be one of {', '.join(OPTIMIZER_STATES)}",
                          optimizer)
    if currency is not None:
        currency = currency.upper()
        known = sorted({o.currency for o in catalog.offers.values()})
        if currency not in known:
            raise ConfigError("--currency", f"no catalogue offer is priced in it; known: "
                              f"{', '.join(known)}", currency)
    if throughput is not None and throughput.model is not None:
        speed = GPU_SPEEDS.get(throughput.model)
        if speed is not None and speed.tflops(precision) is None:
            raise ConfigError("--throughput", f"{throughput.model} cannot train in "
                              f"{precision}: a throughput measured there does not apply",
                              f"{throughput.samples_per_s:g}@{throughput.model}")
    return currency


@dataclass(frozen=True)
class Packing:
    """How a search's trials lie on instances of one offer (see the module doc).

    Attributes:
        slots: Trials one instance runs at once.
        nodes: Instances rented for the whole search.
        waves: Rounds of trials at once.
    """

    slots: int
    nodes: int
    waves: int


def pack(trials: int, per_trial: float, capacity: float,
         concurrency: int | None = None) -> Packing:
    """Lay ``trials`` on instances of ``capacity`` GPUs (or CPUs), ``per_trial`` each,
    ``concurrency`` at once (default: one instance's slots)."""
    slots = max(1, int(capacity // per_trial + 1e-9)) if per_trial > 0 else 1
    at_once = max(1, min(trials, concurrency or slots))
    return Packing(slots, math.ceil(at_once / slots), math.ceil(trials / at_once))


def rental_cost(packing: Packing, run_s: float, price_per_hour: float,
                offer: catalog_mod.Offer) -> tuple[float, float]:
    """``(money, billed seconds per instance)`` of the search's instances rented for
    ``waves x run_s``, each billed once with the offer's granularity and minimum."""
    billed = billed_s(packing.waves * run_s, offer)
    return packing.nodes * billed * price_per_hour / 3600.0, billed


def _costed(config: Any, offer: catalog_mod.Offer, probe: ProbeFigures, available, gpu,
            n_gpus, trials, epochs, precision, throughput, node_cpus) -> PlanRow:
    """One offer that fits, priced for the whole search (see the module doc)."""
    from hpsearch.money import nodekinds, pricing

    share = offer.share(config.resources.cpu, gpu, node_cpus)
    vm_missing = offer.gpu_only and any(
        offer.vm_per_hour(spot) is None for spot, price in (
            (False, offer.on_demand_per_hour), (True, offer.spot_per_hour)) if price)
    epoch_s, why = gpu_epoch_s(probe, offer.gpu_model, precision, n_gpus, throughput)
    if epoch_s is None:
        return PlanRow(offer, True, available, None, None, share, None, None, None, why,
                       vm_missing=vm_missing)
    startup_s = STARTUP_S + probe.setup_s
    trial_s = startup_s + epochs * epoch_s
    packing = pack(trials, gpu, offer.gpu_count, config.search.concurrency)
    on_demand = billed = spot = factor = spot_billed = None
    if offer.on_demand_per_hour is not None:
        on_demand, billed = rental_cost(packing, trial_s,
                                        offer.instance_price_per_hour(False), offer)
    if offer.spot_per_hour is not None:
        rate = pricing.preemption_rate(config, offer)
        factor = nodekinds.spot_cost_factor(rate, epoch_s / 2.0, startup_s)
        spot, spot_billed = rental_cost(packing, trial_s * factor,
                                        offer.instance_price_per_hour(True), offer)
    kind_spot = on_demand is None
    cost = spot if kind_spot else on_demand
    work = trials * (trial_s * (factor if kind_spot else 1.0)) * share / 3600.0 \
        * offer.instance_price_per_hour(kind_spot)
    return PlanRow(offer, True, available, epoch_s, trial_s, share, on_demand, spot, factor,
                   billed_s=billed if billed is not None else spot_billed,
                   spot_billed_s=spot_billed, nodes=packing.nodes, slots=packing.slots,
                   wall_s=packing.waves * trial_s, idle_cost=None if cost is None
                   else max(0.0, cost - work), vm_missing=vm_missing)


def _cpu_reference(config: Any, catalog: catalog_mod.Catalog, probe: ProbeFigures,
                   currency: str | None, trials: int, epochs: int,
                   node_cpus: float) -> tuple[str, float | None, str] | None:
    """``(instance, cost, currency)`` of the search on this machine's CPU (``local-cpu``:
    the machine billed for the whole search, its CPUs packed with trials)."""
    try:
        offer = catalog.lookup("local:local-cpu")
    except ConfigError:
        return None
    if currency is not None and offer.currency != currency:
        return None
    cost = None
    if probe.cpu_epoch_s is not None and offer.on_demand_per_hour is not None:
        run_s = STARTUP_S + probe.setup_s + epochs * probe.cpu_epoch_s
        packing = pack(trials, config.resources.cpu, node_cpus, config.search.concurrency)
        cost = rental_cost(packing, run_s, offer.on_demand_per_hour, offer)[0]
    return offer.key, cost, offer.currency


def _memory_of(probe: ProbeFigures, optimizer: str | None,
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


def make_plan(config: Any, catalog: catalog_mod.Catalog, probe: ProbeFigures, *,
              trials: int | None = None, epochs: int | None = None,
              precision: str = "fp32", optimizer: str | None = None,
              throughput: Throughput | None = None, point: str = "mid",
              currency: str | None = None, node_cpus: float = 1.0) -> Plan:
    """Judge every catalogue GPU offer for the search ``config`` describes.

    Args:
        config: The validated :class:`hpsearch.spec.config.Config`.
        catalog: The price catalogue.
        probe: What the CPU probe measured.
        trials: Trials of the search; default ``search.n_trials``.
        epochs: Epochs each trial trains; default ``max_epochs`` (no pruning).
        precision: ``fp32``, ``fp16`` or ``bf16`` (mixed precision for 16 bits).
        optimizer: ``adam``, ``adamw`` or ``sgd`` to assume its states; default the
            optimizer state the probe measured.
        throughput: A measured training throughput instead of the CPU-scaled estimate.
        point: The configuration probed (``mid`` or ``high``; printed only).
        currency: Only offers in this currency.
        node_cpus: CPUs of this machine (prices the CPU reference row).

    Raises:
        ConfigError: naming the option (``--trials``, ``--epochs``, ``--precision``,
            ``--optimizer``, ``--currency``, ``--throughput``) and its bad value.
    """
    epochs_given = epochs is not None
    trials = config.search.n_trials if trials is None else trials
    epochs = config.max_epochs if epochs is None else epochs
    currency = check_options(catalog, trials=trials, epochs=epochs, precision=precision,
                             optimizer=optimizer, currency=currency, throughput=throughput)
    notes: list[str] = []
    gpu = config.resources.gpu if config.resources.gpu > 0 else 1.0
    if config.resources.gpu <= 0:
        notes.append("resources.gpu is 0 (CPU trials): planned as 1 GPU per trial")
    n_gpus = max(1, int(gpu)) if gpu >= 1 else 1
    memory, optimizer_note = _memory_of(probe, optimizer, n_gpus)
    rows: list[PlanRow] = []
    too_small: list[PlanRow] = []
    for offer in _gpu_offers(catalog, currency):
        row = _too_small(offer, memory, gpu)
        if row is not None:
            too_small.append(row)
            continue
        rows.append(_costed(config, offer, probe, _usable_mib(offer, gpu), gpu, n_gpus,
                            trials, epochs, precision, throughput, node_cpus))
    rows.sort(key=_cheapest_first)
    too_small.sort(key=lambda r: (r.offer.gpu_memory_gb or 0, r.offer.key))
    cpu_row = _cpu_reference(config, catalog, probe, currency, trials, epochs, node_cpus)
    return Plan(
        name=config.name, trainable=config.trainable, point=point, probe=probe,
        memory=memory, precision=precision, optimizer_note=optimizer_note, trials=trials,
        epochs=epochs, gpus_per_trial=gpu, throughput=throughput, rows=rows,
        too_small=too_small, cpu_row=cpu_row, currency_filter=currency,
        budget=_budget_of(config, catalog, node_cpus), notes=notes,
        epochs_given=epochs_given,
    )


def _gpu_offers(catalog: catalog_mod.Catalog,
                currency: str | None) -> list[catalog_mod.Offer]:
    """The catalogue's GPU offers (in ``currency`` only, when given), in its order."""
    return [offer for offer in catalog.offers.values()
            if offer.gpu_count and offer.gpu_model
            and (currency is None or offer.currency == currency)]


def _budget_of(config: Any, catalog: catalog_mod.Catalog,
               node_cpus: float) -> tuple[float, str] | None:
    """``(budget.max_cost, its currency)``, or None without a budget or when the run's
    own instance cannot be priced (then there is no currency to compare it in)."""
    from hpsearch.money import pricing

    if config.budget.max_cost is None:
        return None
    try:
        price = pricing.resolve(config, catalog=catalog, node_cpus=node_cpus)
    except ConfigError:
        return None
    return config.budget.max_cost, price.currency


def _usable_mib(offer: catalog_mod.Offer, gpu: float) -> float | None:
    """MiB a trial may use of ``offer``'s GPU (its fraction, less the headroom)."""
    fraction = gpu if gpu < 1 else 1.0
    return (offer.gpu_memory_gb * GIB * fraction * HEADROOM / MIB
            if offer.gpu_memory_gb else None)


def _too_small(offer: catalog_mod.Offer, memory: Any, gpu: float) -> PlanRow | None:
    """The row of an offer a trial does not fit (too few GPUs, too little memory), or
    None when it fits."""
    available = _usable_mib(offer, gpu)
    if gpu > offer.gpu_count:
        why = f"{offer.gpu_count} GPU(s), a trial needs {gpu:g}"
    elif not memory.fits(offer.gpu_memory_gb, gpu if gpu < 1 else 1.0):
        why = "memory" if offer.gpu_memory_gb else "memory unknown"
    else:
        return None
    return PlanRow(offer, False, available, None, None, 0.0, None, None, None, why)


def _cheapest_first(row: PlanRow) -> tuple:
    """USD first, then by currency; priced rows cheapest first."""
    best = row.best
    return (row.offer.currency != "USD", row.offer.currency,
            best is None, best[0] if best else 0.0, row.offer.key)


# ---------------------------------------------------------------------------------------
# Rendering.


def fmt_bytes(n: float) -> str:
    """``512 B``, ``12.3 KiB``, ``45.6 MiB``, ``7.89 GiB``."""
    if n < 1024:
        return f"{n:.0f} B"
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:.3g} {unit}" if n / size < 100 else f"{n / size:.0f} {unit}"
    return f"{n:.0f} B"


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1:
        return f"{s:.3g} s"
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def _format_params(params: Mapping[str, Any]) -> str:
    def one(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.6g}"
        return str(value)

    return ", ".join(f"{k}={one(v)}" for k, v in params.items()) or "(no params)"


def _owned(offer: catalog_mod.Offer) -> bool:
    """A ``local`` row: the depreciation of a machine one owns, not something to rent."""
    return offer.provider == "local"


def _gpu_part_only(offer: catalog_mod.Offer) -> bool:
    return offer.gpu_only


def render(plan: Plan, table: Callable[[list[str], list[list[str]]], list[str]]
           ) -> list[str]:
    """The lines ``plan`` prints; ``table`` renders a header and rows."""
    p = plan.probe
    point = ("midpoint of each range, first categorical choice" if plan.point == "mid"
             else "upper end of each range, largest numeric choice")
    lines = [
        f"Plan for '{plan.name}' ({plan.trainable})",
        f"Configuration probed ({point}): {_format_params(p.params)}",
        f"Model: {p.n_params:,} parameters ({p.n_trainable:,} trainable); optimizer "
        f"{plan.optimizer_note}",
    ]
    lines += _memory_lines(plan)
    lines.append(_time_line(plan))
    epochs_from = ("--epochs" if plan.epochs_given else
                   "max_epochs, no trial pruned: --epochs to assume fewer")
    lines.append(
        f"Search: {plan.trials} trial(s) x {plan.epochs} epoch(s) ({epochs_from}) + "
        f"{fmt_seconds(STARTUP_S + p.setup_s)} start-up per trial, "
        f"{plan.gpus_per_trial:g} GPU(s) per trial")
    for note in plan.notes:
        lines.append(f"Note: {note}")
    lines += _table_lines(plan, table)
    if plan.too_small:
        names = []
        for row in plan.too_small:
            if row.why == "memory":
                usable = fmt_bytes(row.available_mib * MIB) if row.available_mib else "?"
                names.append(f"{row.offer.key} ({usable} usable)")
            else:
                names.append(f"{row.offer.key} ({row.why})")
        lines.append(f"Too small for this trial: {', '.join(names)}")
    if plan.cpu_row is not None:
        key, cost, cur = plan.cpu_row
        lines.append(f"This machine's CPU, for reference (measured, {p.threads} thread(s)): "
                     f"{fmt_seconds(p.cpu_epoch_s)}/epoch; the search about "
                     f"{fmt_money(cost)} {cur} at {key}")
    lines += _recommendation_lines(plan)
    lines.append("Estimates, not quotes: check the catalogue's prices (python -m hpsearch "
                 "catalog) and measure a trial on the chosen GPU.")
    return lines


def _memory_lines(plan: Plan) -> list[str]:
    """The memory estimate of one trial, part by part."""
    p, m = plan.probe, plan.memory
    lines = [
        f"Memory per trial{' per GPU' if plan.gpus_per_trial > 1 else ''} at "
        f"{plan.precision} ({LIGHTNING_PRECISION[plan.precision]}), batch "
        f"{p.batch_size if p.batch_size is not None else '?'}:",
        f"  weights       {fmt_bytes(m.weights_bytes):>10}  ({p.n_params:,} x "
        f"{p.weight_bytes:g} B)",
        f"  gradients     {fmt_bytes(m.gradients_bytes):>10}  ({p.n_trainable:,} x "
        f"{p.weight_bytes:g} B)",
        f"  optimizer     {fmt_bytes(m.optimizer_bytes):>10}",
    ]
    if m.ddp_bytes:
        lines.append(f"  ddp buckets   {fmt_bytes(m.ddp_bytes):>10}  (a copy of the "
                     "gradients)")
    lines += [
        f"  activations   {fmt_bytes(m.activations_bytes):>10}  (tensors saved for "
        f"backward in one step, measured on CPU"
        f"{' under bf16 autocast' if plan.precision != 'fp32' else ''})",
        f"  transient     {fmt_bytes(m.transient_bytes):>10}  (the largest of them again: "
        "a layer's output while its input is held)",
        f"  cuda context  {fmt_bytes(m.cuda_context_bytes):>10}  (fixed allowance)",
        f"  total         {fmt_bytes(m.total_bytes):>10}  (a GPU fits with this at most "
        f"{HEADROOM:.0%} of its memory)",
    ]
    return lines


def _time_line(plan: Plan) -> str:
    """Where the time estimate comes from: a throughput given, or this CPU scaled."""
    p = plan.probe
    if plan.throughput is not None:
        on = f" on {plan.throughput.model}" if plan.throughput.model else ""
        scaled = (" and scaled to the other GPUs by nominal throughput"
                  if plan.throughput.model else ", taken as is for every GPU")
        return (f"Time: from the throughput given, {plan.throughput.samples_per_s:g} "
                f"samples/s{on}{scaled}; {p.train_samples or '?'} training samples "
                f"per epoch, validation +{p.val_ratio:.0%} as measured on CPU")
    return (f"Time: measured on this CPU ({p.threads} thread(s), {p.measured_batches} "
            f"batch(es)): {fmt_seconds(p.train_step_s)}/train batch, "
            f"{fmt_seconds(p.val_step_s)}/val batch, {p.train_batches or '?'} + "
            f"{p.val_batches or 0} batches per epoch = {fmt_seconds(p.cpu_epoch_s)}/epoch; "
            f"GPU times scale it by matmul rate (this CPU {p.cpu_gflops:.1f} GFLOP/s "
            f"measured vs each GPU's nominal {plan.precision} rate x {GPU_EFFICIENCY:g}), "
            f"at least {TRAIN_STEP_FLOOR_S * 1000:g} ms per train batch: a rough guide; "
            "--throughput gives a measured one")


def _recommendation_lines(plan: Plan) -> list[str]:
    """The cheapest fitting offer per currency (and the whole instance when its VM is
    not priced), against the budget; or why there is none."""
    lines: list[str] = []
    recs = plan.recommendations()
    for cur, (row, cost, kind) in recs.items():
        line = (f"Recommended ({cur}): {row.offer.key} ({row.offer.gpu_model}) {kind}, "
                f"about {fmt_money(cost)} {cur} for the search"
                f"{_vm_words(row)}")
        if kind == "spot" and row.on_demand_cost is not None:
            line += f" ({fmt_money(row.on_demand_cost)} on demand)"
        lines.append(line)
        whole = plan.cheapest_whole(cur)
        if row.vm_missing and whole is not None:
            lines.append(f"  the cheapest whole instance: {whole[0].offer.key} "
                         f"({whole[0].offer.gpu_model}) {whole[2]}, about "
                         f"{fmt_money(whole[1])} {cur}, VM included")
        if plan.budget is not None and plan.budget[1] == cur:
            limit = plan.budget[0]
            verdict = "within" if cost <= limit else "OVER"
            lines.append(f"  budget.max_cost {limit:g} {cur}: {verdict}")
    if not recs and plan.rows:
        if all(_owned(r.offer) for r in plan.rows):
            lines.append("No recommendation: only machines you own fit.")
        else:
            lines.append("No recommendation: no rentable GPU that fits has a time "
                         "estimate (give --throughput).")
    return lines


def _vm_words(row: PlanRow) -> str:
    if not _gpu_part_only(row.offer):
        return ""
    if row.vm_missing:
        return " plus its VM, which is billed on top and not in the catalogue"
    return " (the GPU and its VM)"


def _table_lines(plan: Plan, table: Callable[[list[str], list[list[str]]], list[str]]
                 ) -> list[str]:
    """The table of GPUs that fit, with its legend."""
    header = ["instance", "gpu", "mem_gb", "s/epoch", "s/trial", "nodes", "rented",
              "on-demand", "spot (exp.)", "idle", "cur"]
    body = []
    for row in plan.rows:
        o = row.offer
        idle = row.idle_share
        body.append([
            o.key + (" *" if row.vm_missing else "") + (" ^" if _owned(o) else ""),
            f"{o.gpu_count}x {o.gpu_model}" if o.gpu_count > 1 else o.gpu_model,
            f"{o.gpu_memory_gb:g}" if o.gpu_memory_gb else "-",
            fmt_seconds(row.epoch_s) if row.epoch_s is not None else (row.why or "-"),
            fmt_seconds(row.trial_s),
            "-" if row.wall_s is None else f"{row.nodes} x {row.slots}",
            "-" if row.wall_s is None else fmt_seconds(row.wall_s)
            + (" +" if row.minimum_billed else ""),
            fmt_money(row.on_demand_cost), fmt_money(row.spot_cost),
            "-" if idle is None else f"{idle:.0%}", o.currency,
        ])
    if not body:
        return ["No catalogue GPU fits this trial"
                + (f" in {plan.currency_filter}" if plan.currency_filter else "") + "."]
    lines = ["GPUs that fit, cheapest first (whole search, billed per instance: nodes x "
             "trials at once on each, rented for the search's waves of trials; idle: the "
             "part of the bill no trial's share covers; spot includes the work preemptions "
             "are expected to lose):"]
    lines += ["  " + line for line in table(header, body)]
    if any(r.vm_missing for r in plan.rows):
        lines.append("  * the GPU's price only: the provider bills the VM around it on top, "
                     "and the catalogue does not know it")
    if any(_gpu_part_only(r.offer) and not r.vm_missing for r in plan.rows):
        lines.append("  (a GPU priced apart from its VM is shown with the VM included)")
    if any(_owned(r.offer) for r in plan.rows):
        lines.append("  ^ a machine you own (depreciation and power): for comparison, never "
                     "recommended")
    minimums = sorted({r.offer.min_billing_s for r in plan.rows if r.minimum_billed})
    if minimums:
        lines.append(f"  + billed at least {'/'.join(f'{m:g}' for m in minimums)} s per "
                     "instance (the offer's billing minimum, once per rental): more than "
                     "it is rented")
    return lines


def _row_json(row: PlanRow) -> dict[str, Any]:
    o = row.offer
    return {
        "instance": o.key, "gpu": o.gpu_model, "gpu_count": o.gpu_count,
        "gpu_memory_gb": o.gpu_memory_gb, "fits": row.fits,
        "available_bytes": None if row.available_mib is None else row.available_mib * MIB,
        "epoch_s": row.epoch_s, "trial_s": row.trial_s, "billed_s": row.billed_s,
        "spot_billed_s": row.spot_billed_s, "share": row.share,
        "on_demand_cost": row.on_demand_cost, "spot_cost": row.spot_cost,
        "spot_factor": row.spot_factor, "currency": o.currency,
        "billing_granularity_s": o.billing_granularity_s, "min_billing_s": o.min_billing_s,
        "gpu_price_only": _gpu_part_only(o), "vm_missing": row.vm_missing,
        "owned": _owned(o), "why": row.why or None, "nodes": row.nodes,
        "slots": row.slots, "rented_s": row.wall_s, "idle_cost": row.idle_cost,
        "idle_share": row.idle_share,
    }


def to_json(plan: Plan) -> dict[str, Any]:
    """The plan as plain data (``plan --json``): bytes and seconds unformatted.

    ``rows`` holds every catalogue GPU offer judged, those that fit first (cheapest
    first, as printed), then those too small (``fits: false``, ``why``);
    ``recommendation`` maps each currency to the cheapest row that fits and has a cost.
    """
    p, m = plan.probe, plan.memory
    recs = {cur: {"instance": row.offer.key, "gpu": row.offer.gpu_model, "kind": kind,
                  "cost": cost, "on_demand_cost": row.on_demand_cost,
                  "spot_cost": row.spot_cost, "currency": cur}
            for cur, (row, cost, kind) in plan.recommendations().items()}
    cpu = None
    if plan.cpu_row is not None:
        key, cost, cur = plan.cpu_row
        cpu = {"instance": key, "epoch_s": p.cpu_epoch_s, "cost": cost, "currency": cur}
    return {
        "name": plan.name,
        "trainable": plan.trainable,
        "point": plan.point,
        "params": dict(p.params),
        "precision": plan.precision,
        "lightning_precision": LIGHTNING_PRECISION[plan.precision],
        "optimizer": plan.optimizer_note,
        "batch_size": p.batch_size,
        "memory": {
            "n_params": m.n_params, "n_trainable": m.n_trainable,
            "weights_bytes": m.weights_bytes, "gradients_bytes": m.gradients_bytes,
            "optimizer_bytes": m.optimizer_bytes, "ddp_bytes": m.ddp_bytes,
            "activations_bytes": m.activations_bytes,
            "transient_bytes": m.transient_bytes,
            "cuda_context_bytes": m.cuda_context_bytes,
            "training_bytes": m.training_bytes, "total_bytes": m.total_bytes,
            "headroom": HEADROOM,
        },
        "probe": {
            "threads": p.threads, "measured_batches": p.measured_batches,
            "train_step_s": p.train_step_s, "val_step_s": p.val_step_s,
            "train_batches": p.train_batches, "val_batches": p.val_batches,
            "train_samples": p.train_samples, "setup_s": p.setup_s,
            "cpu_epoch_s": p.cpu_epoch_s, "cpu_gflops": p.cpu_gflops,
        },
        "throughput": None if plan.throughput is None else {
            "samples_per_s": plan.throughput.samples_per_s,
            "gpu": plan.throughput.model},
        "trials": plan.trials,
        "epochs": plan.epochs,
        "startup_s": STARTUP_S + p.setup_s,
        "gpus_per_trial": plan.gpus_per_trial,
        "currency_filter": plan.currency_filter,
        "rows": [_row_json(r) for r in [*plan.rows, *plan.too_small]],
        "cpu_reference": cpu,
        "recommendation": recs,
        "budget": None if plan.budget is None else {"max_cost": plan.budget[0],
                                                    "currency": plan.budget[1]},
        "notes": list(plan.notes),
    }
