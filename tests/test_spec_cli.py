"""The CLI on the search description's bad input and warnings (issues 10 and 11).

Each bad input: exit code 2, one line on stderr naming the field and the value, no
traceback, nothing written. ``run`` stops before it starts Ray.
"""

from __future__ import annotations

import pytest

from tests.test_cli_errors import GOOD, edit, files_under, hpsearch

DEEP = "[" * 3000 + "]" * 3000

CASES = [
    # (id, space.yaml text, extra args, fragments the one stderr line must contain)
    ("storage-unknown-scheme", GOOD + "storage: foo://host/db\n", [],
     ["storage: unknown database scheme 'foo'", "(got 'foo://host/db')"]),
    ("storage-driver-missing",
     GOOD + "storage: postgresql+psycopg2://me:secret@db.example.org/hps\n", [],
     ["storage: driver 'psycopg2' is not installed", "pip install psycopg2-binary",
      "me:***@db.example.org"]),
    ("storage-sqlite-folder-missing", GOOD + "storage: sqlite:////no/such/dir/o.db\n", [],
     ["storage: the folder of the SQLite file", "does not exist"]),
    ("duplicate-param", edit("  optimizer: {type: categorical, choices: [adam, sgd]}",
                             "  optimizer: {type: categorical, choices: [adam, sgd]}\n"
                             "  lr: {type: float, low: 0.1, high: 0.2}"), [],
     ["space.lr: duplicate key at line 8 (first at line 6)"]),
    ("duplicate-nested", edit("search: {n_trials: 2, concurrency: 1}",
                              "search: {n_trials: 2, concurrency: 1, n_trials: 3}"), [],
     ["search.n_trials: duplicate key at line 8 (first at line 8)"]),
    ("deeply-nested", edit("choices: [adam, sgd]", f"choices: {DEEP}"), [],
     ["nested deeper than 64 levels"]),
    ("set-top-level-n-trials", GOOD, ["--set", "n_trials=4"],
     ["n_trials: unknown key; did you mean 'search.n_trials'?"]),
    ("cpu-fraction", GOOD + "resources: {cpu: 0.001}\n", [],
     ["resources.cpu: a CPU-only trial trains on at least one whole core", "(got 0.001)"]),
    ("max-epochs-huge", edit("max_epochs: 3", "max_epochs: 1000000000"), [],
     ["max_epochs: must be <= 100000", "(got 1000000000)"]),
    ("mode-required", edit("objective: {metric: val_acc, mode: max}",
                           "objective: {metric: score}"), [],
     ["objective.mode: is required", "'score'"]),
    ("cost-aware-never-decides", GOOD + "pruning: {policy: cost_aware, min_epochs: 9}\n",
     ["--set", "max_epochs=10"],
     ["pruning.min_epochs: must be <= 8 with cost_aware and max_epochs 10", "(got 9)"]),
    ("grid-with-float", GOOD.replace("search: {", "search: {sampler: grid, "), [],
     ["search.sampler: grid needs", "space.lr is a continuous float"]),
]


def _one_error_line(proc, fragments) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith("hpsearch: error: "), line
    for fragment in fragments:
        assert fragment in line, f"{fragment!r} not in {line!r}"
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("text, extra, fragments", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
@pytest.mark.slow
@pytest.mark.parametrize("command", ["run", "validate"])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, command, text, extra, fragments):
    space = tmp_path / "space.yaml"
    space.write_text(text, encoding="utf-8")
    args = ["--run-dir", str(tmp_path / "run")] if command == "run" else []
    proc = hpsearch(command, str(space), *args, *extra, cwd=tmp_path)
    _one_error_line(proc, fragments)
    assert files_under(tmp_path) == {"space.yaml"}


@pytest.mark.slow
def test_validate_prints_a_contradicting_mode_as_a_warning(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(edit("objective: {metric: val_acc, mode: max}",
                          "objective: {metric: val_loss, mode: max}"), encoding="utf-8")
    proc = hpsearch("validate", str(space), "--no-import", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    warnings = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning: ")]
    assert warnings == ["warning: objective.mode: max contradicts the metric name 'val_loss', "
                        "which is usually minimised; the search maximises it as told"]
    assert "mode: max" in proc.stdout


@pytest.mark.slow
def test_validate_shows_the_inferred_mode(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(edit("objective: {metric: val_acc, mode: max}",
                          "objective: {metric: valError}"), encoding="utf-8")
    proc = hpsearch("validate", str(space), "--no-import", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "metric: valError\n  mode: min\n" in proc.stdout
    assert "warning:" not in proc.stderr
