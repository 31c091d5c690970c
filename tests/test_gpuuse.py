"""GPU use of trials: combining attempts, the recorder's attributes, the report's idle money.

The NVML sampling itself needs a GPU (this machine has none: see tests/test_gpu.py for
the no-GPU path); these tests feed the figures a trial process reports.
"""

from __future__ import annotations

import pytest

from hpsearch.spec import config as config_mod
from hpsearch import keys
from hpsearch.report import gpuuse, report
from hpsearch.report import rows as report_rows
from hpsearch.report import text as report_text
from hpsearch.adapters.optuna.study import StudyRecorder
from hpsearch.report.gpuuse import GpuUse

from .test_report import money, record, study_info
from .test_study import RAW
from .test_study import report as epoch_report


def test_combine_weights_utilisation_by_sampled_seconds_and_keeps_the_peaks():
    combined = gpuuse.combine([GpuUse(90.0, 30.0, 1000.0, 800.0),
                               GpuUse(30.0, 10.0, 3000.0, None),
                               GpuUse(None, 0.0, 500.0, 900.0)])
    assert combined.util_mean == pytest.approx((90 * 30 + 30 * 10) / 40)
    assert combined.sampled_s == 40.0
    assert combined.mem_peak_mib == 3000.0 and combined.torch_peak_mib == 900.0


def test_combine_without_seconds_is_a_plain_mean_and_nothing_is_none():
    assert gpuuse.combine([GpuUse(80.0), GpuUse(40.0)]).util_mean == pytest.approx(60.0)
    assert gpuuse.combine([]) == GpuUse(None, 0.0, None, None)


def test_idle_cost_is_the_idle_share_of_the_cost_clamped():
    assert gpuuse.idle_cost(2.0, 75.0) == pytest.approx(0.5)
    assert gpuuse.idle_cost(2.0, 130.0) == 0.0
    assert gpuuse.idle_cost(2.0, -5.0) == 2.0
    assert gpuuse.idle_cost(None, 50.0) is None
    assert gpuuse.idle_cost(1.0, None) is None
    assert gpuuse.idle_cost(1.0, float("nan")) is None


def test_result_and_attribute_round_trips_leave_unknown_figures_out():
    use = GpuUse(55.0, 12.0, 2048.0, None)
    out = gpuuse.to_result(use)
    assert keys.GPU_TORCH_PEAK_MIB not in out
    assert gpuuse.from_result(out) == use
    attrs = gpuuse.to_attrs(use)
    assert attrs == {keys.ATTR_GPU_SAMPLED_S: 12.0, keys.ATTR_GPU_UTIL: 55.0,
                     keys.ATTR_GPU_MEM_PEAK_MIB: 2048.0}
    assert gpuuse.from_attrs(attrs) == use
    # A CPU trial's results carry no figures at all.
    assert gpuuse.from_result({keys.EPOCH: 1, "val_acc": 0.5}) is None
    assert gpuuse.from_attrs({"cost": 1.0}) is None


@pytest.fixture
def url(new_sqlite):
    return new_sqlite()


def gpu(attempt: str, util: float, seconds: float, mem: float) -> dict:
    return {keys.ATTEMPT: attempt, **gpuuse.to_result(GpuUse(util, seconds, mem, mem / 2))}


def test_recorder_combines_the_attempts_of_a_trial_across_a_driver_restart(url):
    config = config_mod.load(RAW)
    first = StudyRecorder(config, url)
    first.ask()
    first.record_epoch(epoch_report(0, 1, 0.4, **gpu("p1", 50.0, 10.0, 1000.0)))
    first.record_epoch(epoch_report(0, 2, 0.5, **gpu("p1", 70.0, 20.0, 1200.0)))  # p1 so far
    attrs = first.study.trials[0].user_attrs
    assert attrs[keys.ATTR_GPU_UTIL] == pytest.approx(70.0)
    assert attrs[keys.ATTR_GPU_SAMPLED_S] == 20.0
    # A restarted process (new attempt) after a preemption.
    first.record_epoch(epoch_report(0, 3, 0.6, **gpu("p2", 10.0, 20.0, 900.0)))
    attrs = first.study.trials[0].user_attrs
    assert attrs[keys.ATTR_GPU_UTIL] == pytest.approx((70 * 20 + 10 * 20) / 40)
    assert attrs[keys.ATTR_GPU_MEM_PEAK_MIB] == 1200.0
    first.close()  # the driver dies

    second = StudyRecorder(config, url)
    second.resume(0)
    second.record_epoch(epoch_report(0, 4, 0.7, **gpu("p3", 100.0, 40.0, 500.0)))
    attrs = second.study.trials[0].user_attrs
    assert attrs[keys.ATTR_GPU_UTIL] == pytest.approx((40 * 40 + 100 * 40) / 80)
    assert attrs[keys.ATTR_GPU_SAMPLED_S] == 80.0
    assert attrs[keys.ATTR_GPU_MEM_PEAK_MIB] == 1200.0
    assert attrs[keys.ATTR_GPU_TORCH_PEAK_MIB] == 600.0


def test_cpu_trials_get_no_gpu_attributes(url):
    recorder = StudyRecorder(config_mod.load(RAW), url)
    recorder.ask()
    recorder.record_epoch(epoch_report(0, 1, 0.4, **{keys.ATTEMPT: "p1"}))
    assert not any(k.startswith("gpu_") for k in recorder.study.trials[0].user_attrs)


def test_report_shows_money_paid_for_idle_gpu_time():
    records = [
        record(0, "COMPLETE", 0.9, [0.9], when=1, **money(4.0, **{
            keys.ATTR_GPU_UTIL: 75.0, keys.ATTR_GPU_MEM_PEAK_MIB: 5000.0})),
        record(1, "PRUNED", 0.5, [0.5], when=2, **money(2.0, **{keys.ATTR_GPU_UTIL: 25.0})),
        record(2, "COMPLETE", 0.8, [0.8], when=3, **money(1.0)),  # no samples
    ]
    built = report.build(records, study_info())
    rows = {r["number"]: r for r in built.trials}
    assert rows[0]["idle_gpu_cost"] == pytest.approx(1.0)
    assert rows[1]["idle_gpu_cost"] == pytest.approx(1.5)
    assert rows[2]["idle_gpu_cost"] is None and rows[2]["gpu_util_mean"] is None
    assert rows[0]["gpu_mem_peak_mib"] == 5000.0
    s = built.summary
    assert s["idle_gpu_cost"] == pytest.approx(2.5)
    assert s["gpu_util_mean"] == pytest.approx((4 * 75 + 2 * 25) / 6)
    assert s["idle_gpu_cost_method"].startswith("estimate")
    labels = dict(report_text.summary_lines(built))
    assert labels["Paid for idle GPU time (estimate)"].startswith("2.5000 USD")
    assert "58%" in labels["Paid for idle GPU time (estimate)"]
    header, cells = report_text.table_rows(built)
    column = header.index("gpu util %")
    assert [c[column] for c in cells] == ["75", "25", "-"]
    assert "idle_gpu_cost" in report_rows.ROW_COLUMNS


def test_report_without_gpu_samples_says_so():
    built = report.build([record(0, "COMPLETE", 0.9, [0.9], when=1, **money(1.0))],
                         study_info())
    assert built.summary["idle_gpu_cost"] is None
    assert built.summary["gpu_util_mean"] is None
    assert "no GPU use sampled" in dict(report_text.summary_lines(built))[
        "Paid for idle GPU time (estimate)"]
