"""Lightning as the trainable uses it: which package, which data shape, which checkpoints.

**Two packages.** Lightning ships the same API as ``pytorch_lightning`` and as
``lightning.pytorch`` (``import lightning as L``, what Lightning's own docs use today).
Their classes are distinct: a ``lightning.pytorch`` module cannot be trained by a
``pytorch_lightning`` Trainer. :func:`flavour_of` tells, from the class of the object
the trainable built (its MRO), which package it comes from, once; the runner, the DDP
ranks and ``plan``'s probe then take the Trainer, the callbacks and the strategies from
that package only (:class:`Lightning`).

**Three data shapes** (:func:`interpret`): ``build(params)`` returns
``(module, datamodule)``, ``(module, train_dataloader, val_dataloader)``, or a module
that defines its own ``train_dataloader`` (and usually ``val_dataloader``). Anything else
is one line saying what came back and what is accepted.

**Checkpoints are data, not code** (:func:`checkpoint_problem`): a checkpoint is only
handed to ``trainer.fit(ckpt_path=...)`` after it loaded with
``torch.load(weights_only=True)`` (the restricted unpickler: tensors, containers,
numbers, strings; no code) and holds the keys Lightning needs to resume. The
checkpoints of hpsearch's trials, in both packages, with the RNG callback's state,
Adam/AdamW/SGD optimizers, LR schedulers, the AMP grad scaler and hyperparameters,
reference exactly these globals (measured with Lightning 2.6.6 and torch 2.13, see
:data:`CHECKPOINT_GLOBALS`), all in torch's own ``weights_only`` allow-list, so
hpsearch adds nothing to it (:data:`EXTRA_SAFE_GLOBALS` is empty).
"""

from __future__ import annotations

import enum
import functools
import importlib
import os
import random
import zipfile
from dataclasses import dataclass
from types import ModuleType
from typing import Any

#: The Lightning packages a trainable may use, by import name.
PACKAGES = ("lightning.pytorch", "pytorch_lightning")

#: The globals the pickle of a trial's checkpoint references (Lightning 2.6, both
#: packages; the typed storages of other dtypes appear under mixed precision or on
#: CUDA). All are in torch's weights_only allow-list.
CHECKPOINT_GLOBALS = frozenset({
    "collections.OrderedDict",
    "torch._utils._rebuild_tensor_v2",
    "torch.ByteStorage",  # RNG states (Python's as a tensor, torch's, CUDA's)
    "torch.FloatStorage",  # weights, optimizer state
    "torch.LongStorage",  # NumPy's RNG state, optimizer step counts
})

#: Globals hpsearch allows beyond torch's weights_only defaults: none are needed.
EXTRA_SAFE_GLOBALS: tuple = ()

#: The top-level keys Lightning reads when it resumes a fit from a checkpoint.
RESUME_KEYS = ("pytorch-lightning_version", "epoch", "global_step", "state_dict",
               "loops", "callbacks", "optimizer_states", "lr_schedulers")

#: Where the docs explain the data shapes.
DOCS_SECTION = "docs/reference.md, 'Writing a trainable'"


@dataclass(frozen=True)
class Lightning:
    """One Lightning package's API, as the trainable's classes use it.

    Attributes:
        name: ``lightning.pytorch`` or ``pytorch_lightning``.
        pl: The package itself (``Trainer``, ``Callback``, ``LightningModule``, ...).
    """

    name: str
    pl: ModuleType

    @property
    def Trainer(self) -> type:  # noqa: N802 (the class it returns)
        return self.pl.Trainer

    @property
    def Callback(self) -> type:  # noqa: N802
        return self.pl.Callback

    @property
    def LightningModule(self) -> type:  # noqa: N802
        return self.pl.LightningModule

    @property
    def LightningDataModule(self) -> type:  # noqa: N802
        return self.pl.LightningDataModule

    def ddp_strategy(self, **kwargs: Any) -> Any:
        """This package's ``DDPStrategy(**kwargs)``."""
        strategies = importlib.import_module(f"{self.name}.strategies")
        return strategies.DDPStrategy(**kwargs)

    def overrides(self, obj: Any, method: str) -> bool:
        """Whether ``obj``'s class defines ``method`` itself (not the Lightning default)."""
        base = self.LightningModule if isinstance(obj, self.LightningModule) \
            else self.LightningDataModule
        mine = getattr(type(obj), method, None)
        return mine is not None and mine is not getattr(base, method, None)


@functools.lru_cache(maxsize=None)
def package(name: str) -> Lightning:
    """The :class:`Lightning` API of package ``name`` (one of :data:`PACKAGES`)."""
    return Lightning(name, importlib.import_module(name))


def _package_of_class(klass: type) -> str | None:
    module = getattr(klass, "__module__", "") or ""
    for name in PACKAGES:
        if module == name or module.startswith(name + "."):
            return name
    return None


def flavour_of(obj: Any) -> Lightning | None:
    """The Lightning package ``obj`` (a module or datamodule) belongs to, or None.

    Read from the object's class hierarchy: the first class in its MRO defined inside
    ``lightning.pytorch`` or ``pytorch_lightning`` names the package; the object must be
    an instance of that package's ``LightningModule`` or ``LightningDataModule``. Only
    the package found is imported.
    """
    for klass in type(obj).__mro__:
        name = _package_of_class(klass)
        if name is None:
            continue
        api = package(name)
        if isinstance(obj, (api.LightningModule, api.LightningDataModule)):
            return api
        return None
    return None


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices) before the trainable is built, as
    both packages' ``seed_everything(seed, workers=True)`` do.

    It runs before the build, so before the package is known; both packages read the
    same two environment variables set here: ``PL_GLOBAL_SEED`` (DDP ranks re-seed from
    it) and ``PL_SEED_WORKERS=1`` (the Trainer gives DataLoader workers derived seeds).
    """
    import numpy as np
    import torch

    os.environ["PL_GLOBAL_SEED"] = str(seed)
    os.environ["PL_SEED_WORKERS"] = "1"
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def default() -> Lightning:
    """The package hpsearch itself depends on (``pytorch_lightning``)."""
    return package("pytorch_lightning")


class DataShape(enum.Enum):
    """How ``build(params)`` hands over its data."""

    DATAMODULE = "(LightningModule, LightningDataModule)"
    LOADERS = "(LightningModule, train DataLoader, val DataLoader)"
    MODULE = "a LightningModule that defines train_dataloader (and val_dataloader)"


class ShapeError(ValueError):
    """What ``build`` returned is none of the shapes hpsearch trains (the message says
    what came back and what is accepted)."""


@dataclass
class Built:
    """What ``build(params)`` returned, understood.

    Attributes:
        api: The Lightning package of the module.
        module: The LightningModule.
        shape: Which of the accepted shapes it came in.
        datamodule: The LightningDataModule (``DATAMODULE``).
        train, val: The loaders (``LOADERS``; ``val`` may be None).
    """

    api: Lightning
    module: Any
    shape: DataShape
    datamodule: Any = None
    train: Any = None
    val: Any = None

    def fit_kwargs(self) -> dict[str, Any]:
        """The data arguments of ``trainer.fit(module, **kwargs)``."""
        if self.shape is DataShape.DATAMODULE:
            return {"datamodule": self.datamodule}
        if self.shape is DataShape.LOADERS:
            return {"train_dataloaders": self.train, "val_dataloaders": self.val}
        return {}

    def batch_size_holder(self) -> tuple[Any, str | None]:
        """Where a ``batch_size`` can be read and set after the build: ``(holder, None)``
        with the datamodule or the module (whichever makes the loaders), as an
        attribute or in its ``hparams`` (where Lightning's own batch-size finder looks),
        or ``(None, why not)``."""
        if self.shape is DataShape.LOADERS:
            return None, ("the DataLoaders build() returned have a fixed batch size; "
                          "make it a param (oom.batch_size_param)")
        owner = self.datamodule if self.shape is DataShape.DATAMODULE else self.module
        if hasattr(owner, "batch_size"):
            return owner, None
        hparams = getattr(owner, "hparams", None)
        if hparams is not None and "batch_size" in hparams:
            return hparams, None
        what = "datamodule" if self.shape is DataShape.DATAMODULE else "module"
        return None, f"the {what} has no batch_size attribute or hyperparameter"


def get_batch_size(holder: Any) -> Any:
    """``holder.batch_size`` (or ``holder["batch_size"]`` for a hyperparameter dict)."""
    if isinstance(holder, dict):
        return holder["batch_size"]
    return getattr(holder, "batch_size")


def set_batch_size(holder: Any, value: int) -> None:
    """Set the batch size where :meth:`Built.batch_size_holder` found it."""
    if isinstance(holder, dict):
        holder["batch_size"] = value
    else:
        holder.batch_size = value


def _name(obj: Any) -> str:
    return "None" if obj is None else type(obj).__name__


def _describe(obj: Any) -> str:
    if isinstance(obj, (tuple, list)):
        items = ", ".join(_name(x) for x in obj)
        return f"a {type(obj).__name__} of length {len(obj)} ({items})"
    return f"a {_name(obj)}"


def _accepted() -> str:
    shapes = [s.value for s in DataShape]
    return f"{', '.join(shapes[:-1])} or {shapes[-1]}"


def _refuse(obj: Any, detail: str | None = None) -> ShapeError:
    got = detail or _describe(obj)
    return ShapeError(f"must return {_accepted()}; got {got} (see {DOCS_SECTION})")


def _is_loader(obj: Any) -> bool:
    return hasattr(obj, "__iter__") and not isinstance(obj, (str, bytes, dict))


def interpret(built: Any) -> Built:
    """Understand what ``build(params)`` returned.

    Raises:
        ShapeError: It is none of :class:`DataShape`'s shapes: the message names the
            type and length of what came back, what is accepted, and the docs section.
    """
    if not isinstance(built, (tuple, list)):
        api = flavour_of(built)
        if api is None or not isinstance(built, api.LightningModule):
            raise _refuse(built)
        if not api.overrides(built, "train_dataloader"):
            raise _refuse(built, f"a {_name(built)} that does not define train_dataloader")
        return Built(api, built, DataShape.MODULE)
    module = built[0] if built else None
    api = flavour_of(module)
    if api is None or not isinstance(module, api.LightningModule):
        raise _refuse(built)
    if len(built) == 2:
        data = built[1]
        other = flavour_of(data)
        if other is not None and other is not api and isinstance(data, other.LightningDataModule):
            raise _refuse(built, (
                f"{_describe(built)} whose LightningModule comes from {api.name} and "
                f"LightningDataModule from {other.name}: import one Lightning package in "
                f"both"))
        if not isinstance(data, api.LightningDataModule):
            raise _refuse(built)
        return Built(api, module, DataShape.DATAMODULE, datamodule=data)
    if len(built) == 3:
        train, val = built[1], built[2]
        if not _is_loader(train) or not (val is None or _is_loader(val)) \
                or flavour_of(train) is not None or flavour_of(val) is not None:
            raise _refuse(built)
        return Built(api, module, DataShape.LOADERS, train=train, val=val)
    raise _refuse(built)


def unsafe_globals(path: str | os.PathLike[str]) -> list[str]:
    """The globals in checkpoint ``path`` that ``torch.load(weights_only=True)`` would
    refuse (read from the pickle's opcodes; nothing is unpickled). Zip checkpoints
    only (what ``torch.save`` writes); [] for others."""
    import torch

    if not zipfile.is_zipfile(path):
        return []
    return sorted(torch.serialization.get_unsafe_globals_in_checkpoint(path))


def load_data(path: str | os.PathLike[str]) -> Any:
    """``torch.load(path, weights_only=True)`` on the CPU: data only, never code."""
    import torch

    with torch.serialization.safe_globals(list(EXTRA_SAFE_GLOBALS)):
        return torch.load(path, map_location="cpu", weights_only=True,
                          mmap=zipfile.is_zipfile(path))


def checkpoint_problem(path: str | os.PathLike[str]) -> str | None:
    """Why checkpoint file ``path`` cannot resume a fit, or None when it can.

    It must exist, reference no global outside torch's ``weights_only`` allow-list
    (checked without unpickling anything), load with ``torch.load(weights_only=True)``
    and hold every key of :data:`RESUME_KEYS`. The reason is one short phrase.
    """
    if not os.path.isfile(path):
        return f"{os.path.basename(path)} is missing"
    try:
        unsafe = unsafe_globals(path)
    except Exception as exc:  # noqa: BLE001 - an unreadable zip is a damaged checkpoint
        return f"it cannot be read ({type(exc).__name__}: {_first_line(exc)})"
    if unsafe:
        return f"it is not plain data: it references {', '.join(unsafe)}"
    try:
        data = load_data(path)
    except Exception as exc:  # noqa: BLE001 - whatever stops the load stops the resume
        return f"it does not load as data ({type(exc).__name__}: {_first_line(exc)})"
    if not isinstance(data, dict):
        return f"it holds a {type(data).__name__}, not a Lightning checkpoint"
    missing = [key for key in RESUME_KEYS if key not in data]
    if missing:
        return f"it lacks Lightning's keys {', '.join(missing)}"
    return None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else ""
    return text if len(text) <= 200 else text[:197] + "..."
