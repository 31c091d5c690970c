"""Unit tests of hpsearch.spec.trainable: import paths, __main__, function objects (no torch)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from hpsearch.errors import ConfigError
from hpsearch.spec.trainable import check_function, display_name, resolve

REPO = Path(__file__).resolve().parents[1]


def build(params):
    return params


def test_resolve_imports_the_function():
    assert resolve("tests.test_trainable:build") is build


def test_a_path_into_main_is_refused_with_the_fix():
    with pytest.raises(ConfigError) as info:
        resolve("__main__:build")
    error = info.value
    assert error.field == "trainable" and error.value == "__main__:build"
    assert "the trial processes cannot import" in str(error)
    assert "pass the function itself, hpsearch.run(..., trainable=build)" in str(error)
    assert "move it to a module" in str(error)


def test_display_names_are_module_and_qualname():
    def nested(params):
        return params

    assert display_name(build) == "tests.test_trainable:build"
    assert display_name(nested) == \
        "tests.test_trainable:test_display_names_are_module_and_qualname.<locals>.nested"
    assert display_name(lambda p: p).endswith(".<locals>.<lambda>")


def test_a_function_object_is_checked_and_named():
    captured = 24

    def closure(params):
        return {**params, "hidden": captured}

    assert check_function(closure).endswith("<locals>.closure")


def test_what_cannot_reach_the_trial_processes_is_refused():
    lock = threading.Lock()

    def holds_a_lock(params):
        with lock:
            return params

    with pytest.raises(ConfigError) as info:
        check_function(holds_a_lock)
    assert str(info.value).startswith("trainable: cannot be sent to the trial processes: ")
    with pytest.raises(ConfigError, match="must be an import path"):
        check_function(42)


@pytest.mark.slow
def test_validate_refuses_a_main_path_in_one_line(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("name: m\ntrainable: __main__:build\nobjective: {metric: val_acc}\n"
                     "max_epochs: 1\nspace: {lr: {type: float, low: 0.1, high: 1}}\n")
    proc = subprocess.run([sys.executable, "-m", "hpsearch", "validate", str(space)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "hpsearch: error: trainable: is a function of __main__, which the trial processes "
        "cannot import (theirs is Ray's worker): pass the function itself, hpsearch.run"
        "(..., trainable=build), or move it to a module and name that module "
        "(got '__main__:build')"]
