"""Resolve a ``package.module:function`` trainable path to the function.

The trainable contract: ``build(params: dict) -> (LightningModule, LightningDataModule)``,
where ``params`` holds the sampled values of the space (names as in ``space.yaml``).
The module logs the objective metric (``self.log("val_acc", ...)``) in its validation
step; hpsearch adds the trainer, reporting, checkpoints and resume.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from hpsearch.errors import ConfigError


def resolve(path: str, field: str = "trainable") -> Callable[[dict[str, Any]], Any]:
    """Import ``package.module:function`` and return the function.

    Raises:
        ConfigError: naming ``field`` and ``path`` if the module or the function does not
            exist, is not callable, or importing the module raised.
    """
    module_name, _, func_name = path.partition(":")
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
