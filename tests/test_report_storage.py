"""Storage money in the report, beside compute money (pure)."""

from __future__ import annotations

import pytest

from hpsearch import keys
from hpsearch.money import storage as sm
from hpsearch.money.fmt import fmt_money
from hpsearch.recovery import checkpoint_usage
from hpsearch.report import report
from hpsearch.report import text as report_text

from .test_report import record, study_info


def with_storage(row: str | None):
    info = study_info()
    if row is not None:
        info["user_attrs"][keys.ATTR_STORAGE_PRICE] = sm.packaged()[row].to_dict()
        info["user_attrs"][keys.ATTR_CHECKPOINT_STORAGE] = "s3://b/runs/hand-0123"
    return info


def use_attrs(count, written, seconds, writes, reads, stored, byte_s):
    return checkpoint_usage.to_attrs(checkpoint_usage.CheckpointUse(
        count, written, seconds, writes, reads, stored, byte_s))


def test_the_report_prices_each_trials_checkpoints_at_the_studys_storage():
    records = [
        record(0, "COMPLETE", 0.9, [0.5, 0.9], cost=1.0,
               **use_attrs(2, 2_000_000_000, 4.0, 1000, 10, 1_000_000_000,
                           1e9 * sm.MONTH_S)),
        record(1, "PRUNED", None, [0.4], cost=0.5,
               **use_attrs(1, 500_000_000, 1.0, 200, 0, 500_000_000, 0.0)),
        record(2, "FAIL", None, [], cost=0.1),  # no checkpoint written
    ]
    built = report.build(records, with_storage("aws:s3-standard"))
    rows = {r["number"]: r for r in built.trials}
    assert rows[0]["storage_cost"] == pytest.approx(1000 * 0.005 / 1000 + 10 * 0.0004 / 1000
                                                    + 0.023)
    assert rows[1]["storage_cost"] == pytest.approx(200 * 0.005 / 1000)
    assert rows[2]["storage_cost"] is None and rows[2]["checkpoints"] == 0
    s = built.summary
    assert s["storage_cost"] == pytest.approx(rows[0]["storage_cost"] + rows[1]["storage_cost"])
    assert s["storage_per_month_kept"] == pytest.approx(1.5 * 0.023)
    assert s["checkpoints"] == 3 and s["checkpoint_s_mean"] == pytest.approx(5.0 / 3)
    assert s["storage_currency"] == "USD" and s["storage_price"]["row"] == "aws:s3-standard"
    assert s["total_cost"] == pytest.approx(1.6)  # compute money is unchanged
    line = dict(report_text.summary_lines(built))["Checkpoint storage"]
    assert line.startswith(fmt_money(s["storage_cost"], "USD") + " spent (3 checkpoint(s)")
    assert "1.5 GB kept" in line and "aws:s3-standard" in line and "s3://b/runs/hand-0123" in line
    assert "Checkpoint storage" in dict(report_text.method_lines(built))


def test_a_study_without_a_storage_price_says_so():
    records = [record(0, "COMPLETE", 0.9, [0.9], cost=1.0,
                      **use_attrs(1, 1000, 0.1, 0, 0, 1000, 1.0))]
    built = report.build(records, with_storage(None))
    assert built.summary["storage_cost"] is None and built.trials[0]["storage_cost"] is None
    assert dict(report_text.summary_lines(built))["Checkpoint storage"].endswith(
        "(no storage price recorded)")
    none = report.build([record(0, "COMPLETE", 0.9, [0.9])], with_storage("local:disk"))
    assert dict(report_text.summary_lines(none))["Checkpoint storage"] == "no checkpoint written"
    assert none.summary["storage_cost"] == 0.0
