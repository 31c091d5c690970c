"""The GPU check (``benchmarks/gpu_check.sh``) on a machine without a GPU.

What can be checked here: the script is valid bash and, without an NVIDIA GPU, says so
in one line and exits 2 having run nothing (slow: a subprocess); the OOM trainable's
ballast sizing; the line it logs, read back; and the judges that turn what the hpsearch
commands left (doctor's and plan's JSON, a study's trials, the report) into PASS or
FAIL, fed with what the real code writes. The checks themselves need a GPU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks import gpu_check
from benchmarks.gpu_trainables import (HALF_SHARE, OOM_RECORD, ballast_bytes_per_sample,
                                       oom_record, parse_oom_record)
from hpsearch import keys
from hpsearch.adapters import nvml
from hpsearch.adapters.system import TorchInfo
from hpsearch.tools import doctor_checks, doctor_machine

from .conftest import REPO

SCRIPT = REPO / "benchmarks" / "gpu_check.sh"
GIB = 2**30
MIB = 2**20

# -- the OOM trainable's sizing -----------------------------------------------------------


@pytest.mark.parametrize("free_gib", [0.5, 7.3, 15.6, 39.4, 78.6, 138.9])
@pytest.mark.parametrize("first", [2, 3, 64, 255, 256, 1024])
def test_the_first_batch_needs_more_than_the_free_memory_and_half_of_it_fits(free_gib, first):
    free = int(free_gib * GIB)
    per_sample = ballast_bytes_per_sample(free, first)
    assert first * per_sample > free
    half_need = (first // 2) * per_sample
    # Half fits with 40% of the free memory left, and the first batch is no near miss.
    assert 0.599 * free < half_need <= HALF_SHARE * free
    assert first * per_sample > 1.19 * free


@given(free=st.integers(MIB, 200 * GIB), first=st.integers(2, 1 << 20))
def test_the_sizing_holds_or_says_it_cannot(free, first):
    try:
        per_sample = ballast_bytes_per_sample(free, first)
    except ValueError as exc:
        assert "cannot size a ballast" in str(exc)
        assert first > free // 10  # only for batches of a tenth of the free bytes or more
        return
    assert first * per_sample > free
    assert (first // 2) * per_sample <= HALF_SHARE * free


@pytest.mark.parametrize("free, first, share, match", [
    (MIB - 1, 256, HALF_SHARE, "free_bytes"),
    (GIB, 1, HALF_SHARE, "first_batch"),
    (GIB, 256, 0.5, "half_share"),
    (GIB, 256, 1.0, "half_share"),
])
def test_the_sizing_refuses_what_cannot_work(free, first, share, match):
    with pytest.raises(ValueError, match=match):
        ballast_bytes_per_sample(free, first, share)


TORCH_OOM = ("CUDA out of memory. Tried to allocate 95.04 GiB. GPU 0 has a total capacity "
             "of 79.19 GiB of which 78.61 GiB is free. Including non-PyTorch memory, this "
             "process has 590.00 MiB memory in use.")


def test_the_oom_line_reads_back():
    per_sample = ballast_bytes_per_sample(int(78.61 * GIB), 256)
    line = oom_record(256, per_sample, int(78.61 * GIB), 256, TORCH_OOM)
    assert line.startswith(OOM_RECORD)
    logged = f"2026-01-01 00:00:00,000 WARNING benchmarks.gpu_trainables: {line}\n"
    assert parse_oom_record("earlier line\n" + logged) == {
        "batch": 256, "need_gib": pytest.approx(94.33, abs=0.01), "free_gib": 78.61,
        "per_sample": per_sample, "sized_for": 256, "error": TORCH_OOM}
    assert parse_oom_record("no such line") is None


# -- the judges ---------------------------------------------------------------------------

H100 = "NVIDIA H100 80GB HBM3"
ONE_GPU = nvml.Inventory(True, (nvml.Gpu(0, H100, "GPU-0", 81559.0, 1024.0, 80535.0, 0.0),),
                         "550.54.15", "12.4", "1 GPU")


def doctor_json(info: TorchInfo, inventory) -> str:
    return doctor_checks.to_json([
        doctor_machine.python_check(), doctor_machine.torch_check(info),
        doctor_machine.nvml_check(inventory), doctor_machine.cuda_check(info, inventory, {}),
        doctor_checks.Check("pricing", doctor_checks.OK, "a trial-hour costs 1 USD")])


def test_doctor_passes_when_torch_uses_the_gpus_nvml_lists():
    info = TorchInfo("2.13.0", "12.4", True, (H100,))
    verdict = gpu_check.judge_doctor(0, doctor_json(info, ONE_GPU), "")
    assert verdict.ok, verdict.text
    assert "CUDA 12.4: 1 device(s)" in verdict.text and "a trial-hour costs" in verdict.text


def test_doctor_fails_on_a_cpu_build_of_torch_or_without_nvml():
    cpu_build = gpu_check.judge_doctor(1, doctor_json(TorchInfo("2.13.0+cpu"), ONE_GPU), "")
    assert not cpu_build.ok and cpu_build.text.startswith("cuda: NVML sees 1 GPU(s) but torch")
    no_nvml = nvml.Inventory(False, message="NVML library not found")
    without = gpu_check.judge_doctor(0, doctor_json(TorchInfo("2.13.0+cpu"), no_nvml), "")
    assert not without.ok and without.text == "NVML: NVML library not found"
    garbled = gpu_check.judge_doctor(2, "", "hpsearch: error: space.yaml: not found\n")
    assert not garbled.ok and garbled.text.endswith("hpsearch: error: space.yaml: not found")


def test_plan_prints_its_estimate():
    from hpsearch.money import catalog
    from hpsearch.spec import config
    from hpsearch.tools import plan, plan_json

    from .test_plan import figures

    made = plan.make_plan(config.load(gpu_check.EXAMPLE, ["pricing.instance=local-gpu"]),
                          catalog.load(None), figures(params={"hidden": 1024}))
    import json

    verdict = gpu_check.judge_plan(0, json.dumps(plan_json.to_json(made)), "")
    assert verdict.ok, verdict.text
    assert verdict.text.startswith(f"estimate {made.memory.total_mib:.0f} MiB per trial")
    assert "at hidden 1024; 32 trials x 30 epochs cheapest on " in verdict.text
    failed = gpu_check.judge_plan(2, "", "hpsearch: error: trainable: cannot import\n")
    assert not failed.ok and "exited 2: hpsearch: error: trainable" in failed.text


def digits_trial(number: int, **attrs) -> dict:
    return {"number": number, "state": "COMPLETE", "value": 0.9 + number / 100,
            "params": {"hidden": 256}, "steps": [1, 2, 3],
            "attrs": {keys.ATTR_GPU_IDS: "0", keys.ATTR_GPU_UTIL: 12.0 + number,
                      keys.ATTR_GPU_MEM_PEAK_MIB: 2100.0, keys.ATTR_GPU_TORCH_PEAK_MIB: 22.0,
                      keys.ATTR_COST: 0.001, keys.ATTR_CURRENCY: "USD", **attrs}}


RUN_LINE = "Search 'digits-gpu': 4 trial(s), 4 at a time, up to 30 epochs each\n"


def test_the_digits_run_passes_with_every_trial_on_the_gpu_and_sampled():
    verdict = gpu_check.judge_digits([digits_trial(n) for n in range(4)], "", 1, RUN_LINE)
    assert verdict.ok, verdict.text
    assert verdict.text.startswith("4/4 COMPLETE on CUDA, resources.gpu=0.25 on GPU id(s) 0 "
                                   "(4 at a time)")
    assert "NVML mean utilisation 12-15%" in verdict.text


@pytest.mark.parametrize("trials, logs, n_gpus, why", [
    ([digits_trial(n) for n in range(3)], "", 1, "3 trials in the study, 4 wanted"),
    ([digits_trial(0, **{keys.ATTR_GPU_UTIL: None})] + [digits_trial(n) for n in (1, 2, 3)],
     "", 1, "trial 0: NVML sampled nothing"),
    ([digits_trial(0, **{keys.ATTR_GPU_IDS: None})] + [digits_trial(n) for n in (1, 2, 3)],
     "", 1, "trial 0 had no GPU from Ray"),
    ([digits_trial(0, **{keys.ATTR_GPU_TORCH_PEAK_MIB: 0.0})]
     + [digits_trial(n) for n in (1, 2, 3)], "", 1, "trial 0 allocated no CUDA memory"),
    ([digits_trial(n) for n in range(4)],
     "WARNING hpsearch.trial: resources.gpu is 0.25 but torch sees no CUDA device: "
     "training on CPU", 1, "a trial log says 'training on CPU'"),
    ([digits_trial(0, **{keys.ATTR_GPU_IDS: "1"})] + [digits_trial(n) for n in (1, 2, 3)],
     "", 1, "one GPU, but the trials had GPU ids ['0', '1']"),
    ([digits_trial(n) for n in range(4)], "", 1, "the run took 1 trial at a time"),
])
def test_the_digits_run_fails_on_cpu_trials_or_unsampled_gpus(trials, logs, n_gpus, why):
    stdout = RUN_LINE.replace("4 at a time", "1 at a time") if "at a time" in why else RUN_LINE
    verdict = gpu_check.judge_digits(trials, logs, n_gpus, stdout)
    assert not verdict.ok and why in verdict.text


def oom_trial(steps=("halve_batch: batch size 256 -> 128",), state="COMPLETE",
              torch_peak_mib=48_400.0) -> dict:
    return {"number": 0, "state": state, "value": 0.95, "params": {}, "steps": [1, 2],
            "attrs": {keys.ATTR_OOM_STEPS: list(steps),
                      keys.ATTR_GPU_TORCH_PEAK_MIB: torch_peak_mib}}


PER_SAMPLE = ballast_bytes_per_sample(int(78.61 * GIB), 256)
OOM_LOG = oom_record(256, PER_SAMPLE, int(78.61 * GIB), 256, TORCH_OOM)


def test_the_oom_trial_passes_after_one_halving_with_the_real_error():
    verdict = gpu_check.judge_oom([oom_trial()], OOM_LOG, first_batch=256, max_epochs=2)
    assert verdict.ok, verdict.text
    assert verdict.text.startswith("CUDA OOM at batch 256 (94.3 GiB asked, 78.6 GiB free: "
                                   "CUDA out of memory. Tried to allocate 95.04 GiB.")
    assert "the study records 'halve_batch: batch size 256 -> 128'" in verdict.text


@pytest.mark.parametrize("trial, logs, why", [
    (oom_trial(steps=()), OOM_LOG, "the study's oom_steps are [], wanted"),
    (oom_trial(steps=("halve_batch: batch size 256 -> 128",
                      "halve_batch: batch size 128 -> 64")), OOM_LOG, "oom_steps are"),
    (oom_trial(state="FAIL"), OOM_LOG, "trial 0 FAIL after epochs [1, 2]"),
    (oom_trial(), "", f"no '{OOM_RECORD}' line in the trial log"),
    (oom_trial(), OOM_LOG.replace("CUDA out of memory", "CUDA error"), "the ballast's error"),
    (oom_trial(torch_peak_mib=600.0), OOM_LOG, "below the half batch's ballast"),
])
def test_the_oom_trial_fails_unless_it_climbed_one_rung_after_a_real_oom(trial, logs, why):
    verdict = gpu_check.judge_oom([trial], logs, first_batch=256, max_epochs=2)
    assert not verdict.ok and why in verdict.text


def test_the_report_passes_with_its_idle_gpu_money_line():
    from hpsearch.report import plain_formats, report

    from .test_report import money, record, study_info

    gpu = {keys.ATTR_GPU_UTIL: 20.0, keys.ATTR_GPU_MEM_PEAK_MIB: 2100.0}
    sampled = report.build([record(n, "COMPLETE", 0.9, [0.9], when=1, **money(1.0, **gpu))
                            for n in range(2)], study_info())
    verdict = gpu_check.judge_report(plain_formats.markdown(sampled),
                                     plain_formats.json_document(sampled))
    assert verdict.ok, verdict.text
    assert verdict.text.startswith(f"{gpu_check.IDLE_ROW}: 1.6000 USD (mean GPU utilisation "
                                   "20%")
    cpu = report.build([record(0, "COMPLETE", 0.9, [0.9], when=1, **money(1.0))],
                       study_info())
    verdict = gpu_check.judge_report(plain_formats.markdown(cpu),
                                     plain_formats.json_document(cpu))
    assert not verdict.ok and "no GPU use sampled" in verdict.text
    assert not gpu_check.judge_report(None, None).ok


def test_ddp_needs_both_gpus_in_the_study():
    two = {**oom_trial(), "attrs": {keys.ATTR_GPU_IDS: "0,1"}}
    verdict = gpu_check.judge_ddp([two], "")
    assert verdict.ok and verdict.text == "COMPLETE with DDP on GPU ids 0, 1, val_acc 0.950"
    one = {**oom_trial(), "attrs": {keys.ATTR_GPU_IDS: "0"}}
    assert not gpu_check.judge_ddp([one], "").ok


def test_plan_against_the_peak_fails_on_an_under_estimate():
    params = {"hidden": 4096, "layers": 3}
    over = gpu_check.judge_plan_vs_peak(params, {"total_mib": 1060.0, "training_mib": 560.0},
                                        720.0)
    assert over.ok and "(1.47x) at hidden 4096, layers 3" in over.text
    under = gpu_check.judge_plan_vs_peak(params, {"total_mib": 700.0, "training_mib": 200.0},
                                         720.0)
    assert not under.ok and under.text.startswith("under-estimate: estimate 700 MiB")


# -- the script without a GPU (subprocesses: slow) ----------------------------------------


def run_script(path: str, tmp_path: Path, **env) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    done = subprocess.run([shutil.which("bash"), str(SCRIPT), str(tmp_path / "out")],
                          env={**os.environ, "PATH": path, **env}, capture_output=True,
                          text=True, timeout=30)
    return done, time.monotonic() - started


@pytest.mark.slow
def test_the_script_is_valid_bash():
    done = subprocess.run([shutil.which("bash"), "-n", str(SCRIPT)], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_without_nvidia_smi_the_script_exits_2_and_runs_nothing(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()  # a PATH without nvidia-smi (nor anything else: nothing else may run)
    done, took_s = run_script(str(empty), tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == ("gpu_check: no NVIDIA GPU on this machine (nvidia-smi not "
                           "found): nothing was run\n")
    assert not (tmp_path / "out").exists() and took_s < 10


def fake_nvidia_smi(folder: Path, output: str, code: int) -> str:
    """A PATH whose nvidia-smi prints ``output`` and exits ``code``, before the real one."""
    folder.mkdir()
    tool = folder / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}\nEOF\nexit {code}\n")
    tool.chmod(0o755)
    return f"{folder}{os.pathsep}{os.environ['PATH']}"


@pytest.mark.slow
@pytest.mark.parametrize("output, code, env, why", [
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make "
     "sure that the latest NVIDIA driver is installed and running.", 9, {},
     "nvidia-smi -L failed with exit 9: NVIDIA-SMI has failed because it couldn't"),
    ("No devices were found", 6, {}, "nvidia-smi -L failed with exit 6: No devices"),
    ("", 0, {}, "nvidia-smi -L lists none"),
    (f"GPU 0: {H100} (UUID: GPU-0)", 0, {"CUDA_VISIBLE_DEVICES": ""},
     "CUDA_VISIBLE_DEVICES='' hides them all"),
])
def test_a_driver_that_lists_no_gpu_exits_2_and_runs_nothing(tmp_path, output, code, env,
                                                             why):
    done, took_s = run_script(fake_nvidia_smi(tmp_path / "bin", output, code), tmp_path,
                              **env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("gpu_check: no NVIDIA GPU on this machine (") and why in line
    assert line.endswith("): nothing was run")
    assert not (tmp_path / "out").exists() and took_s < 10


@pytest.mark.slow
def test_the_ballast_model_trains_with_its_ballast(tmp_path):
    """The training step with its ballast (on CPU here: the allocation that fails on a
    GPU is the same call) and the hyperparameters a checkpoint keeps."""
    import pytorch_lightning as pl

    from benchmarks.gpu_trainables import BallastMLP
    from hpsearch.examples import digits

    model = BallastMLP(per_sample_bytes=4 * MIB, free_bytes=GIB, ballast_batch=64, hidden=32)
    trainer = pl.Trainer(max_epochs=1, limit_train_batches=3, limit_val_batches=1,
                         accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tmp_path)
    trainer.fit(model, digits.DigitsData(batch_size=32))
    assert trainer.global_step == 3
    assert "val_acc" in trainer.callback_metrics
    assert model.hparams["per_sample_bytes"] == 4 * MIB and model.hparams["hidden"] == 32
