"""The CLI on bad input: exit code 2, one line on stderr, no traceback, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hpsearch.spec.config import load

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "search_spaces" / "digits_mlp.yaml"

GOOD = """\
name: cli-test
trainable: hpsearch.examples.digits:build
objective: {metric: val_acc, mode: max}
max_epochs: 3
space:
  lr:        {type: float, low: 1.0e-4, high: 0.3, log: true}
  optimizer: {type: categorical, choices: [adam, sgd]}
search: {n_trials: 2, concurrency: 1}
"""


def env() -> dict[str, str]:
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
    )
    out["RAY_USAGE_STATS_ENABLED"] = "0"
    return out


def hpsearch(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpsearch", *args], cwd=cwd, env=env(),
                          capture_output=True, text=True, timeout=120)


def edit(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new)


CASES = [
    # (id, space.yaml text, extra args, fragments the one stderr line must contain)
    ("malformed-yaml",
     edit("  optimizer: {type: categorical, choices: [adam, sgd]}",
          "  optimizer: {type: categorical, choices: [adam, sgd]"),
     [], ["space.yaml: malformed YAML at line 8"]),
    ("unknown-key", GOOD + "serach: {seed: 1}\n", [],
     ["space.yaml:9: serach: unknown key", "did you mean 'search'?"]),
    ("low-gt-high", edit("low: 1.0e-4, high: 0.3", "low: 0.5, high: 0.3"), [],
     ["space.yaml:6: space.lr.low:", "<= high (0.3)", "(got 0.5)"]),
    ("log-low-zero", edit("low: 1.0e-4", "low: 0"), [],
     ["space.lr.low:", "log: true", "(got 0.0)"]),
    ("empty-choices", edit("choices: [adam, sgd]", "choices: []"), [],
     ["space.yaml:7: space.optimizer.choices:", "non-empty list", "(got [])"]),
    ("unknown-module", edit("hpsearch.examples.digits:build", "nosuch.module:build"), [],
     ["trainable:", "no module named 'nosuch'", "(got 'nosuch.module:build')"]),
    ("missing-function", edit("digits:build", "digits:nosuch"), [],
     ["trainable:", "has no attribute 'nosuch'", "(got 'hpsearch.examples.digits:nosuch')"]),
    ("bad-set-value", GOOD, ["--set", "search.n_trials=abc"],
     ["error: search.n_trials:", "must be an integer", "(got 'abc')"]),
    ("bad-set-syntax", GOOD, ["--set", "search.n_trials"],
     ["--set:", "dotted.key=value", "(got 'search.n_trials')"]),
    ("set-into-scalar", GOOD, ["--set", "name.x=1"],
     ["name:", "not a mapping", "(got 'cli-test')"]),
]


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("text, extra, fragments", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
@pytest.mark.slow
def test_run_on_bad_input(tmp_path, text, extra, fragments):
    space = tmp_path / "space.yaml"
    space.write_text(text, encoding="utf-8")
    run_dir = tmp_path / "run"
    proc = hpsearch("run", str(space), "--run-dir", str(run_dir), *extra, cwd=tmp_path)

    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert proc.stderr.endswith("\n")
    line = lines[0]
    assert line.startswith("hpsearch: error: "), line
    for fragment in fragments:
        assert fragment in line, f"{fragment!r} not in {line!r}"
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.stdout == ""

    assert not run_dir.exists()
    assert not (tmp_path / "runs").exists()
    assert not list(tmp_path.rglob("optuna.db"))
    assert files_under(tmp_path) == {"space.yaml"}


@pytest.mark.slow
def test_run_bad_input_with_default_run_dir_writes_nothing(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(edit("choices: [adam, sgd]", "choices: []"), encoding="utf-8")
    proc = hpsearch("run", "space.yaml", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("hpsearch: error: space.yaml:7: space.optimizer.choices:")
    assert files_under(tmp_path) == {"space.yaml"}


@pytest.mark.slow
def test_run_missing_file(tmp_path):
    proc = hpsearch("run", "nope.yaml", "--run-dir", "run", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == "hpsearch: error: space.yaml: file not found (got 'nope.yaml')\n"
    assert files_under(tmp_path) == set()


@pytest.mark.slow
def test_validate_prints_the_resolved_config(tmp_path):
    proc = hpsearch("validate", str(EXAMPLE), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    printed = yaml.safe_load(proc.stdout)
    assert printed == load(EXAMPLE).to_dict()
    # Defaults the file leaves out are shown.
    assert printed["pruning"]["reduction_factor"] == 3.0
    assert printed["storage"] is None
    assert list(printed) == ["name", "trainable", "objective", "max_epochs", "space",
                             "search", "resources", "pruning", "pricing", "budget",
                             "checkpoint", "preemption", "oom", "storage", "cluster"]
    assert f"ok: {EXAMPLE} is valid (5 parameters)" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert files_under(tmp_path) == set()


@pytest.mark.slow
def test_validate_applies_overrides(tmp_path):
    proc = hpsearch("validate", str(EXAMPLE), "--no-import", "--set", "search.n_trials=3",
                    "--set", "cluster.address=auto", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    printed = yaml.safe_load(proc.stdout)
    assert printed["search"]["n_trials"] == 3
    assert printed["cluster"]["address"] == "auto"


@pytest.mark.slow
def test_validate_no_import_skips_the_trainable_check(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(edit("hpsearch.examples.digits:build", "nosuch.module:build"),
                     encoding="utf-8")

    skipped = hpsearch("validate", str(space), "--no-import", cwd=tmp_path)
    assert skipped.returncode == 0, skipped.stderr
    assert yaml.safe_load(skipped.stdout)["trainable"] == "nosuch.module:build"

    checked = hpsearch("validate", str(space), cwd=tmp_path)
    assert checked.returncode == 2
    assert checked.stdout == ""
    assert checked.stderr == (
        "hpsearch: error: trainable: no module named 'nosuch' (got 'nosuch.module:build')\n"
    )
    assert files_under(tmp_path) == {"space.yaml"}


@pytest.mark.slow
def test_validate_bad_input_is_one_line(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(edit("low: 1.0e-4", "low: 0"), encoding="utf-8")
    proc = hpsearch("validate", str(space), "--no-import", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == (
        f"hpsearch: error: {space}:6: space.lr.low: must be > 0 with log: true (got 0.0)\n"
    )
