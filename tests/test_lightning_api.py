"""The contract with the trainable's Lightning code: which package, which data shape,
which checkpoints load (hpsearch.adapters.trial.lightning_api and the runner's prepare).

Every test here needs torch (checkpoints are torch files; importing torch alone takes
about 1.2 s, a twentieth of the whole fast set) or builds Lightning objects: all are slow.
"""

from __future__ import annotations

import importlib
import io
import os
import pickle
import zipfile
from pathlib import Path

import pytest

from hpsearch.adapters.trial import lightning_api
from hpsearch.adapters.trial.lightning_api import (CHECKPOINT_GLOBALS, RESUME_KEYS, DataShape,
                                             ShapeError, checkpoint_problem)

from .payloads import Payload

pytestmark = pytest.mark.slow

# ---------------------------------------------------------------------------------------
# Checkpoints are data, not code (torch only)


def test_a_crafted_zip_checkpoint_is_refused_without_running_it(tmp_path, monkeypatch):
    import posix

    import torch

    marker = tmp_path / "pwned"
    ckpt = tmp_path / "trial.ckpt"
    torch.save({"state_dict": {}, "evil": Payload(str(marker))}, ckpt)
    # The payload is real: loading it the old way runs the command. Unpickling looks the
    # function up as posix.system, so the call is caught there and no shell starts (a
    # fast test starts no process).
    commands = []
    monkeypatch.setattr(posix, "system", commands.append)
    torch.load(ckpt, weights_only=False)
    assert commands == [f"touch {marker}"]
    monkeypatch.undo()

    reason = checkpoint_problem(ckpt)
    assert reason is not None and "not plain data" in reason
    assert "system" in reason  # the global it references: posix.system / os.system
    assert not marker.exists()


def test_a_crafted_raw_pickle_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "pwned"
    ckpt = tmp_path / "trial.ckpt"
    ckpt.write_bytes(pickle.dumps({"epoch": 1, "evil": Payload(str(marker))}))
    reason = checkpoint_problem(ckpt)
    assert reason is not None and reason.startswith("it does not load as data")
    assert not marker.exists()


def test_plain_data_without_lightnings_keys_cannot_resume(tmp_path):
    import torch

    ckpt = tmp_path / "trial.ckpt"
    torch.save({"state_dict": {"w": torch.ones(2)}, "epoch": 3}, ckpt)
    reason = checkpoint_problem(ckpt)
    missing = [k for k in RESUME_KEYS if k not in ("state_dict", "epoch")]
    assert reason == f"it lacks Lightning's keys {', '.join(missing)}"


def test_what_is_not_a_checkpoint_says_what_it_is(tmp_path):
    import torch

    ckpt = tmp_path / "trial.ckpt"
    torch.save([1, 2, 3], ckpt)
    assert checkpoint_problem(ckpt) == "it holds a list, not a Lightning checkpoint"
    assert checkpoint_problem(tmp_path / "nothing.ckpt") == "nothing.ckpt is missing"
    ckpt.write_bytes(b"PK\x03\x04 truncated zip")
    reason = checkpoint_problem(ckpt)
    assert reason is not None and reason.startswith(("it cannot be read", "it does not"))


def test_a_complete_plain_checkpoint_passes(tmp_path):
    import torch

    ckpt = tmp_path / "trial.ckpt"
    data = {key: {} for key in RESUME_KEYS}
    data["pytorch-lightning_version"] = "2.6.6"
    data["state_dict"] = {"w": torch.ones(3)}
    torch.save(data, ckpt)
    assert checkpoint_problem(ckpt) is None


# ---------------------------------------------------------------------------------------
# Real checkpoints of both packages: exactly which globals they hold


def _pickle_globals(path: Path) -> set[str]:
    """Every global (GLOBAL / STACK_GLOBAL) the checkpoint's pickle references."""
    import pickletools

    with zipfile.ZipFile(path) as zf:
        name = next(n for n in zf.namelist() if n.endswith("data.pkl"))
        data = zf.read(name)
    found, strings = set(), []
    for op, arg, _pos in pickletools.genops(io.BytesIO(data)):
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(arg)
        elif op.name == "GLOBAL":
            found.add(arg.replace(" ", "."))
        elif op.name == "STACK_GLOBAL":
            found.add(f"{strings[-2]}.{strings[-1]}")
    return found


def _fit_and_save(package: str, tmp_path: Path, precision: str, optimizer: str) -> Path:
    import torch

    from hpsearch.adapters.trial import callbacks

    if package == "lightning":
        from .lit_trainables import build
    else:
        from hpsearch.examples.digits import build
    api = lightning_api.package("lightning.pytorch" if package == "lightning"
                                else "pytorch_lightning")
    module, data = build({"optimizer": optimizer, "hidden": 8})
    # fp16 on CPU: Lightning would switch to bf16 (no scaler); an explicit plugin keeps
    # the AMP grad scaler, whose state the checkpoint then holds as on a GPU.
    amp = {"plugins": [importlib.import_module(f"{api.name}.plugins").MixedPrecision(
        "16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))]} \
        if precision == "16-mixed" else {"precision": precision}
    trainer = api.Trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=1,
                          **amp, logger=False, enable_checkpointing=False,
                          enable_progress_bar=False, enable_model_summary=False,
                          callbacks=[callbacks.make(api, callbacks.RngState)],
                          default_root_dir=tmp_path)
    trainer.fit(module, datamodule=data)
    path = tmp_path / f"{package}-{precision}-{optimizer}.ckpt"
    trainer.save_checkpoint(str(path), weights_only=False)
    return path


@pytest.mark.parametrize("package", ["lightning", "pytorch_lightning"])
@pytest.mark.parametrize("precision, optimizer", [("32-true", "adam"),
                                                  ("bf16-mixed", "sgd"),
                                                  ("16-mixed", "adam")])
def test_trial_checkpoints_hold_only_the_allowed_globals_and_load_as_data(
        tmp_path, package, precision, optimizer):
    import torch

    path = _fit_and_save(package, tmp_path, precision, optimizer)
    assert _pickle_globals(path) <= CHECKPOINT_GLOBALS
    assert torch.serialization.get_unsafe_globals_in_checkpoint(str(path)) == []
    assert checkpoint_problem(path) is None
    data = lightning_api.load_data(path)
    (rng_key,) = [k for k in data["callbacks"] if "RngState" in k]
    assert set(data["callbacks"][rng_key]) >= {"python", "numpy", "torch"}
    assert data["hyper_parameters"]["optimizer"] == optimizer
    if precision == "16-mixed":
        assert data["MixedPrecision"]["scale"] > 0  # the grad scaler's state


# ---------------------------------------------------------------------------------------
# Which package, which shape (Lightning)


def test_the_flavour_comes_from_the_class():
    import torch

    import lightning as L
    import pytorch_lightning as pl

    from hpsearch.examples.digits import DigitsData, DigitsMLP

    from .lit_trainables import LitDigitsData, LitDigitsMLP

    assert lightning_api.flavour_of(DigitsMLP()).name == "pytorch_lightning"
    assert lightning_api.flavour_of(DigitsData()).name == "pytorch_lightning"
    assert lightning_api.flavour_of(LitDigitsMLP()).name == "lightning.pytorch"
    assert lightning_api.flavour_of(LitDigitsData()).name == "lightning.pytorch"
    assert lightning_api.flavour_of(LitDigitsMLP()).Trainer is L.Trainer
    assert lightning_api.flavour_of(DigitsMLP()).Callback is pl.Callback
    assert lightning_api.flavour_of(torch.nn.Linear(2, 2)) is None
    assert lightning_api.flavour_of("a string") is None


def _shape_error(returned) -> str:
    with pytest.raises(ShapeError) as info:
        lightning_api.interpret(returned)
    message = str(info.value)
    assert "\n" not in message
    assert "(LightningModule, LightningDataModule)" in message
    assert "(LightningModule, train DataLoader, val DataLoader)" in message
    assert "a LightningModule that defines train_dataloader" in message
    assert message.endswith("(see docs/reference.md, 'Writing a trainable')")
    return message


def test_the_three_shapes_are_understood():
    import torch

    from torch.utils.data import DataLoader

    from .lit_trainables import shaped

    built = lightning_api.interpret(shaped({"shape": "datamodule"}))
    assert built.shape is DataShape.DATAMODULE and set(built.fit_kwargs()) == {"datamodule"}
    built = lightning_api.interpret(shaped({"shape": "loaders"}))
    assert built.shape is DataShape.LOADERS
    assert isinstance(built.fit_kwargs()["train_dataloaders"], DataLoader)
    built = lightning_api.interpret(shaped({"shape": "module"}))
    assert built.shape is DataShape.MODULE and built.fit_kwargs() == {}
    assert built.api.name == "lightning.pytorch"


def test_what_is_not_a_shape_is_one_line_with_its_type_and_length():
    from hpsearch.examples.digits import DigitsData, DigitsMLP

    from .lit_trainables import LitDigitsData

    assert "got a DigitsMLP that does not define train_dataloader" in _shape_error(DigitsMLP())
    assert "got a tuple of length 1 (DigitsMLP)" in _shape_error((DigitsMLP(),))
    assert "got a tuple of length 4 (DigitsMLP, DigitsData, None, int)" in \
        _shape_error((DigitsMLP(), DigitsData(), None, 3))
    assert "got a list of length 2 (DigitsData, DigitsMLP)" in \
        _shape_error([DigitsData(), DigitsMLP()])
    assert "got a tuple of length 2 (DigitsMLP, int)" in _shape_error((DigitsMLP(), 64))
    assert "got a dict" in _shape_error({"model": DigitsMLP()})
    assert "got a None " in _shape_error(None)
    mixed = _shape_error((DigitsMLP(), LitDigitsData()))
    assert "LightningModule comes from pytorch_lightning and LightningDataModule from " \
        "lightning.pytorch: import one Lightning package in both" in mixed


@pytest.mark.parametrize("shape", ["datamodule", "loaders", "module"])
def test_the_batch_size_is_halved_where_the_shape_allows(shape):
    """A ``batch_size`` param is halved by rebuilding (every shape); without it, the
    datamodule's or the module's ``batch_size`` is set after the build, and loaders
    handed over ready-made cannot be re-batched (said, with the fix)."""
    from hpsearch.adapters.trial.runner import TrialSpec, prepare
    from hpsearch.recovery.oom import OomLadder

    def spec(param: str) -> TrialSpec:
        from hpsearch.spec import config as config_mod

        return TrialSpec(config_mod.load({
            "name": "shapes", "trainable": "tests.lit_trainables:shaped",
            "objective": {"metric": "val_acc"}, "max_epochs": 2,
            "space": {"shape": {"type": "categorical", "choices": [shape]}},
            "oom": {"batch_size_param": param}}))

    ladder = OomLadder(min_batch_size=8, batch_param="batch")
    ladder.climb(128, False)
    assert ladder.batch_size == 64
    # As a param: the build sees 64, whatever the shape.
    built, batch, why = prepare(spec("batch"), ladder.params({"shape": shape, "batch": 128}),
                                0, 0, ladder)
    assert (batch, why) == (64, None)
    # Not a param hpsearch knows of ("bs"): found on the data where the shape allows.
    ladder = OomLadder(min_batch_size=8, batch_param="bs")
    ladder.climb(128, False)
    built, batch, why = prepare(spec("bs"), {"shape": shape, "batch": 128}, 0, 0, ladder)
    if shape == "loaders":
        assert batch is None
        assert why == ("the DataLoaders build() returned have a fixed batch size; make "
                       "it a param (oom.batch_size_param)")
        assert OomLadder(batch_param="bs").climb(None, False, why) == \
            "mixed_precision: 16-bit mixed precision"
    else:
        assert (batch, why) == (64, None)
        holder = built.datamodule if shape == "datamodule" else built.module
        assert holder.batch_size == 64


@pytest.mark.parametrize("shape", ["datamodule", "loaders", "module"])
def test_plans_probe_measures_every_shape(shape):
    from hpsearch.adapters.trial.probe import probe

    figures = probe("tests.lit_trainables:shaped", {"shape": shape, "batch": 32},
                    probe_batches=2)
    assert (figures.train_batches, figures.val_batches, figures.train_samples) == \
        (45, 1, 1438)
    assert figures.batch_size == 32 and figures.measured_batches == 2
    assert figures.activations_bytes > 0 and figures.optimizer == "Adam"


def test_plans_probe_takes_a_function_and_refuses_a_bad_shape_in_one_line():
    from hpsearch.adapters.trial.probe import probe
    from hpsearch.errors import ConfigError

    from .lit_trainables import LitDigitsMLP

    def bare(params):
        return LitDigitsMLP()

    with pytest.raises(ConfigError) as info:
        probe(bare, {})
    message = str(info.value)
    assert message.startswith("trainable: must return (LightningModule, ")
    assert "got a LitDigitsMLP that does not define train_dataloader" in message
    assert "test_plans_probe_takes_a_function_and_refuses_a_bad_shape_in_one_line." \
        "<locals>.bare" in message


def test_seed_everything_seeds_every_rng_and_tells_lightning(monkeypatch):
    import torch

    import random

    import numpy as np

    # seed_everything sets both for Lightning's workers: put back what was there after.
    for name in ("PL_GLOBAL_SEED", "PL_SEED_WORKERS"):
        monkeypatch.setenv(name, "")
    lightning_api.seed_everything(7)
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    lightning_api.seed_everything(7)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == first
    assert os.environ["PL_GLOBAL_SEED"] == "7" and os.environ["PL_SEED_WORKERS"] == "1"
