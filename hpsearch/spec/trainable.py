"""The trainable: a ``package.module:function`` import path, or the function itself.

The trainable contract: ``build(params: dict)`` returns one of

* ``(LightningModule, LightningDataModule)``,
* ``(LightningModule, train_dataloader, val_dataloader)``,
* a ``LightningModule`` that defines its own ``train_dataloader`` (and
  ``val_dataloader``),

with the module and datamodule from either Lightning package (``pytorch_lightning``
or ``lightning.pytorch``). ``params`` holds the sampled values of the space (names as in
``space.yaml``). The module logs the objective metric (``self.log("val_acc", ...)``) in
its validation step; hpsearch adds the trainer, reporting, checkpoints and resume.

``hpsearch.run(..., trainable=build)`` takes the function object instead of a path (a
notebook's or a script's function): it travels to the trial processes by value
(cloudpickle, as Ray sends its own trainables) and is recorded in the study's config
under :func:`display_name`, ``module:qualname``, which a continued run compares.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from hpsearch.errors import ConfigError

#: How a path to a function of ``__main__`` is refused (trial processes have another).
MAIN_FIX = ("is a function of __main__, which the trial processes cannot import (theirs "
            "is Ray's worker): pass the function itself, hpsearch.run(..., trainable="
            "build), or move it to a module and name that module")


def resolve(path: str, field: str = "trainable") -> Callable[[dict[str, Any]], Any]:
    """Import ``package.module:function`` and return the function.

    Raises:
        ConfigError: naming ``field`` and ``path`` if the module or the function does not
            exist, is not callable, importing the module raised, or the module is
            ``__main__`` (a trial process cannot import the driver's script).
    """
    module_name, _, func_name = path.partition(":")
    if module_name == "__main__":
        raise ConfigError(field, MAIN_FIX, path)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_name
        if module_name == missing or module_name.startswith(missing + "."):
            raise ConfigError(field, f"no module named '{missing}'", path) from None
        raise ConfigError(
            field, f"importing '{module_name}' failed: no module named '{missing}'", path
        ) from None
    except Exception as exc:  # the user's module raised while importing
        raise ConfigError(
            field, f"importing '{module_name}' failed: {type(exc).__name__}: {exc}", path
        ) from None
    func = getattr(module, func_name, None)
    if func is None:
        raise ConfigError(field, f"module '{module_name}' has no attribute '{func_name}'", path)
    if not callable(func):
        raise ConfigError(field, f"'{func_name}' is not callable", path)
    return func


def display_name(func: Callable[..., Any]) -> str:
    """``module:qualname`` of a function object: how the study's config records it.

    Stable across sessions for the same function (``__main__:build`` for a notebook's
    ``build``, ``mymodule:make.<locals>.build`` for a closure), so a continued run's
    compatibility check compares it like an import path; ``mymodule:build`` passed as an
    object and as a path are the same trainable.
    """
    module = getattr(func, "__module__", None) or "__unknown__"
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) \
        or type(func).__qualname__
    return f"{module}:{name}"


def check_function(func: Any, field: str = "trainable") -> str:
    """Check a build function given as an object; return its :func:`display_name`.

    Raises:
        ConfigError: it is not callable, or cloudpickle cannot serialise it (then it
            cannot reach the trial processes).
    """
    if not callable(func):
        raise ConfigError(field, "must be an import path 'package.module:function' or a "
                          "function", func)
    name = display_name(func)
    import cloudpickle

    try:
        cloudpickle.dumps(func)
    except Exception as exc:  # noqa: BLE001 - whatever stops the pickling
        raise ConfigError(field, f"cannot be sent to the trial processes: "
                          f"{type(exc).__name__}: {exc}", name) from None
    return name
