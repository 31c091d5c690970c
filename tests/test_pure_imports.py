"""Pure modules and ``--help`` import none of Ray, torch, Lightning or Optuna.

Each check runs in a fresh interpreter, so what this test session imported does not count.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("ray", "torch", "pytorch_lightning", "lightning", "optuna")
#: The pure packages (DESIGN.md: no Ray, torch, Lightning or Optuna at import) and the
#: leaves: every module of them is checked, so a new one cannot be forgotten.
PURE_PACKAGES = ("spec", "money", "pruning", "model", "core", "recovery", "report")
LEAVES = ("scalars", "errors", "keys", "trials", "version")


def pure_modules_on_disk() -> list[str]:
    root = REPO / "hpsearch"
    out = [f"hpsearch.{leaf}" for leaf in LEAVES]
    for package in PURE_PACKAGES:
        for path in sorted((root / package).glob("*.py")):
            stem = path.stem
            out.append(f"hpsearch.{package}" if stem == "__init__"
                       else f"hpsearch.{package}.{stem}")
    return out


PURE_MODULES = sorted(set(pure_modules_on_disk()) | {
    "hpsearch",
    "hpsearch.spec.config",
    "hpsearch.spec.study_storage",
    "hpsearch.spec.space",
    "hpsearch.spec.space_parse",
    "hpsearch.scalars",
    "hpsearch.errors",
    "hpsearch.keys",
    "hpsearch.trials",
    "hpsearch.spec.storage_url",
    "hpsearch.pruning.decisions",
    "hpsearch.report.progress",
    "hpsearch.cli",
    "hpsearch.spec.trainable",
    "hpsearch.money.catalog",
    "hpsearch.tools.plan",
    "hpsearch.tools.plan_point",
    "hpsearch.tools.plan_text",
    "hpsearch.tools.plan_json",
    "hpsearch.money.pricing",
    "hpsearch.adapters.nvml",
    "hpsearch.tools.doctor",
    "hpsearch.money.ledger",
    "hpsearch.money.runtime",
    "hpsearch.money.budget",
    "hpsearch.pruning.cost_aware",
    "hpsearch.report.report",
    "hpsearch.report.writers",
    "hpsearch.report.gpuuse",
    "hpsearch.recovery.oom",
    "hpsearch.core.failures",
    "hpsearch.core.lifecycle",
    "hpsearch.core.ports",
    "hpsearch.pruning.none",
    "hpsearch.recovery.checkpoint",
    "hpsearch.recovery.preemption",
    "hpsearch.money.nodekinds",
    "hpsearch.simulate",
    "hpsearch.recovery.faults",
    "hpsearch.recovery.storage",
    "hpsearch.money.storage",
    "hpsearch.driver.checkpoints",
    "hpsearch.model.planner",
})
MARKER = "@@hpsearch-test-result@@"

#: Reports the heavy top-level packages in sys.modules after ``body`` ran.
PROBE = """
import json, sys
HEAVY = {heavy!r}
result = {{}}
{body}
result["heavy"] = sorted({{m.split(".")[0] for m in sys.modules}} & set(HEAVY))
print({marker!r} + json.dumps(result))
"""


def env() -> dict[str, str]:
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
    )
    return out


def run_python(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env(), capture_output=True,
                          text=True, timeout=120)


def probe(body: str, cwd: Path) -> tuple[dict, subprocess.CompletedProcess]:
    code = PROBE.format(heavy=HEAVY, body=body, marker=MARKER)
    proc = run_python(["-c", code], cwd)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARKER)]
    assert len(lines) == 1, proc.stdout
    return json.loads(lines[0][len(MARKER):]), proc


@pytest.mark.slow
def test_probe_detects_heavy_imports(tmp_path):
    # The probe itself must be able to fail: importing Optuna is reported.
    result, _ = probe("import optuna", tmp_path)
    assert result["heavy"] == ["optuna"]


@pytest.mark.slow
def test_pure_modules_import_no_heavy_library(tmp_path):
    # One fresh interpreter imports them one after another and looks after each: while
    # every module is pure no heavy library is ever loaded, so each look is as good as
    # a fresh interpreter's, and the first impure module is the one named.
    result, _ = probe(
        "import importlib\n"
        "result['files'] = {}\n"
        f"for name in {PURE_MODULES!r}:\n"
        "    m = importlib.import_module(name)\n"
        "    result['files'][name] = m.__file__\n"
        "    loaded = sorted({m.split('.')[0] for m in sys.modules} & set(HEAVY))\n"
        "    if loaded:\n"
        "        result['offender'] = [name, loaded]\n"
        "        break\n",
        tmp_path,
    )
    assert "offender" not in result, "importing {} loaded {}".format(*result["offender"])
    assert set(result["files"]) == set(PURE_MODULES)
    for name, file in result["files"].items():
        assert Path(file).resolve().is_relative_to(REPO), name


HELP_ARGV = [["--help"], ["run", "--help"], ["validate", "--help"], ["report", "--help"],
             ["dashboard", "--help"], ["plan", "--help"], ["doctor", "--help"]]


@pytest.mark.slow
@pytest.mark.parametrize("argv", HELP_ARGV, ids=" ".join)
def test_module_help_exits_zero_with_usage(argv, tmp_path):
    proc = run_python(["-m", "hpsearch", *argv], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: python -m hpsearch")
    assert proc.stderr == ""
    assert "Traceback" not in proc.stdout
    if argv[0] == "run":
        assert "--run-dir" in proc.stdout and "--set" in proc.stdout
    if argv[0] == "validate":
        assert "--no-import" in proc.stdout
    if argv == ["--help"]:
        assert "run" in proc.stdout and "validate" in proc.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_help_imports_no_heavy_library(tmp_path):
    # Every --help in one fresh interpreter (none of them may load a heavy library).
    result, proc = probe(
        "import contextlib, io\n"
        "from hpsearch.cli import main\n"
        "result['exits'] = []\n"
        f"for argv in {HELP_ARGV!r}:\n"
        "    out = io.StringIO()\n"
        "    try:\n"
        "        with contextlib.redirect_stdout(out):\n"
        "            main(argv)\n"
        "        result['exits'].append(['returned', out.getvalue()[:40]])\n"
        "    except SystemExit as exc:\n"
        "        result['exits'].append([exc.code, out.getvalue()[:40]])\n",
        tmp_path,
    )
    assert [code for code, _ in result["exits"]] == [0] * len(HELP_ARGV)
    assert all(text.startswith("usage: python -m hpsearch") for _, text in result["exits"])
    assert result["heavy"] == [], f"--help loaded {result['heavy']}"


@pytest.mark.slow
def test_version(tmp_path):
    from hpsearch.version import __version__

    proc = run_python(["-m", "hpsearch", "--version"], tmp_path)
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"hpsearch {__version__}"


@pytest.mark.slow
def test_no_command_is_a_usage_error(tmp_path):
    proc = run_python(["-m", "hpsearch"], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: python -m hpsearch")
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_validate_no_import_imports_no_heavy_library(tmp_path):
    example = REPO / "search_spaces" / "digits_mlp.yaml"
    result, proc = probe(
        "from hpsearch.cli import main\n"
        f"result['returned'] = main(['validate', {str(example)!r}, '--no-import'])\n",
        tmp_path,
    )
    assert result["returned"] == 0
    assert "name: digits-mlp" in proc.stdout
    assert result["heavy"] == [], f"validate --no-import loaded {result['heavy']}"
