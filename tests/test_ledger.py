"""Unit tests of hpsearch.money.ledger: billed intervals, spent and wasted money, persistence.

Pure: no Ray, torch, Lightning or Optuna is needed (nor imported) here. Times are plain
numbers the tests choose (the ledger takes ``now_s`` from its caller).
"""

from __future__ import annotations

import json

import pytest

from hpsearch import keys
from hpsearch.errors import EXIT_CONFIG, HpsearchError
from hpsearch.money.ledger import Ledger
from hpsearch.money.ledger_book import CurrencyError
from hpsearch.money.ledger_entries import DONE, FAILED, PREEMPTED, STOPPED, Interval
from hpsearch.money.pricing import Price

T0 = 1_700_000_000.0  # a wall-clock-like origin


def price(per_hour: float = 3.6, currency: str = "USD", granularity: int = 1,
          min_billing: int = 0, instance: str = "aws:p3.2xlarge", spot: bool = False) -> Price:
    return Price(per_hour=per_hour, currency=currency, instance=instance, spot=spot,
                 instance_per_hour=per_hour, share=1.0, billing_granularity_s=granularity,
                 min_billing_s=min_billing)


# 3.6 per hour = 0.001 per second: costs read as milli-units of seconds.
P = price()


# ---------------------------------------------------------------------------------------
# Billing arithmetic


@pytest.mark.parametrize(
    "length_s, granularity, min_billing, billed",
    [
        (90.2, 1, 0, 91.0),
        (90.0, 1, 0, 90.0),
        (0.5, 1, 0, 1.0),
        (61.0, 60, 0, 120.0),
        (60.0, 60, 0, 60.0),
        (10.0, 1, 60, 60.0),
        (75.0, 1, 60, 75.0),
        (0.0, 1, 60, 60.0),
        (10.0, 60, 60, 60.0),
    ],
)
def test_billed_seconds(length_s, granularity, min_billing, billed):
    ledger = Ledger()
    ledger.open(0, T0, price(granularity=granularity, min_billing=min_billing))
    interval = ledger.close(0, T0 + length_s, DONE)
    assert interval.billed_s() == pytest.approx(billed)
    assert ledger.spent() == pytest.approx(billed * 3.6 / 3600)
    assert ledger.trial_money(0).billed_s == pytest.approx(billed)


def test_cost_is_billed_seconds_times_price():
    ledger = Ledger()
    ledger.open(1, T0, price(per_hour=7.2, granularity=60))
    ledger.close(1, T0 + 61, DONE)
    assert ledger.spent() == pytest.approx(120 * 7.2 / 3600)
    assert ledger.spent(trial=1) == pytest.approx(0.24)
    assert ledger.spent(trial=2) == 0


# ---------------------------------------------------------------------------------------
# Waste


@pytest.mark.parametrize("outcome", [PREEMPTED, FAILED])
def test_preempted_after_checkpoint_wastes_the_work_since_it(outcome):
    # The case: preempted 90 s after start, checkpoint at 60 s -> 30 s wasted.
    ledger = Ledger()
    ledger.open(3, T0, P)
    ledger.checkpoint(3, T0 + 60)
    interval = ledger.close(3, T0 + 90, outcome)
    assert interval.outcome == outcome
    assert interval.wasted_s() == pytest.approx(30)
    assert ledger.wasted() == pytest.approx(30 * 3.6 / 3600)
    assert ledger.wasted(trial=3) == pytest.approx(0.03)
    # Wasted money is also spent money.
    assert ledger.spent() == pytest.approx(90 * 3.6 / 3600)
    money = ledger.trial_money(3)
    assert money.wasted_cost == pytest.approx(0.03)
    assert money.cost == pytest.approx(0.09)


def test_latest_checkpoint_counts():
    ledger = Ledger()
    ledger.open(0, T0, P)
    ledger.checkpoint(0, T0 + 20)
    ledger.checkpoint(0, T0 + 80)
    ledger.close(0, T0 + 90, PREEMPTED)
    assert ledger.wasted() == pytest.approx(10 * 3.6 / 3600)


@pytest.mark.parametrize("outcome", [DONE, STOPPED])
def test_done_and_stopped_waste_nothing(outcome):
    ledger = Ledger()
    ledger.open(0, T0, P)
    ledger.checkpoint(0, T0 + 60)
    ledger.close(0, T0 + 90, outcome)
    assert ledger.wasted() == 0
    assert ledger.spent() == pytest.approx(0.09)


@pytest.mark.parametrize("outcome", [PREEMPTED, FAILED])
def test_no_checkpoint_wastes_the_whole_interval(outcome):
    ledger = Ledger()
    ledger.open(0, T0, P)
    ledger.close(0, T0 + 90, outcome)
    assert ledger.wasted() == pytest.approx(90 * 3.6 / 3600)


def test_open_interval_wastes_nothing_yet():
    ledger = Ledger()
    ledger.open(0, T0, P)
    ledger.checkpoint(0, T0 + 10)
    assert ledger.wasted() == 0


def test_checkpoint_of_a_closed_or_unknown_trial_is_ignored():
    ledger = Ledger()
    ledger.checkpoint(9, T0)
    ledger.open(0, T0, P)
    ledger.close(0, T0 + 50, DONE)
    ledger.checkpoint(0, T0 + 60)
    assert ledger.intervals[0].checkpoint_s is None


# ---------------------------------------------------------------------------------------
# Open intervals, restarts and edge cases


def test_open_interval_is_billed_up_to_now():
    ledger = Ledger()
    ledger.open(0, T0, P)
    assert ledger.is_open(0) and ledger.open_trials() == [0]
    assert ledger.spent(T0 + 100) == pytest.approx(0.1)
    assert ledger.spent(T0 + 250) == pytest.approx(0.25)
    assert ledger.trial_money(0, T0 + 100).billed_s == pytest.approx(100)


def test_open_interval_without_now_bills_only_the_minimum():
    ledger = Ledger()
    ledger.open(0, T0, price(min_billing=60))
    assert ledger.spent() == pytest.approx(60 * 3.6 / 3600)


def test_several_intervals_of_one_trial_sum():
    ledger = Ledger()
    ledger.open(5, T0, P)
    ledger.checkpoint(5, T0 + 60)
    ledger.close(5, T0 + 90, PREEMPTED)
    # Restarted from the checkpoint on a new instance after an outage.
    ledger.open(5, T0 + 500, price(instance="aws:g5.xlarge", spot=True))
    ledger.close(5, T0 + 700, DONE)
    money = ledger.trial_money(5)
    assert money.billed_s == pytest.approx(290)
    assert money.cost == pytest.approx(0.29)
    assert money.wasted_cost == pytest.approx(0.03)
    assert (money.instance, money.spot) == ("aws:g5.xlarge", True)  # the latest interval
    assert ledger.trials() == [5]
    assert len(ledger.intervals) == 2


def test_trials_are_kept_apart():
    ledger = Ledger()
    ledger.open(1, T0, P)
    ledger.open(2, T0 + 10, price(per_hour=7.2))
    ledger.close(1, T0 + 100, DONE)
    ledger.close(2, T0 + 110, FAILED)
    assert ledger.spent(trial=1) == pytest.approx(0.1)
    assert ledger.spent(trial=2) == pytest.approx(0.2)
    assert ledger.spent() == pytest.approx(0.3)
    assert ledger.wasted(trial=1) == 0
    assert ledger.wasted(trial=2) == pytest.approx(0.2)
    assert ledger.trials() == [1, 2]


def test_close_of_unknown_trial_returns_none():
    ledger = Ledger()
    assert ledger.close(42, T0, DONE) is None
    assert ledger.intervals == []


def test_close_twice_returns_none_the_second_time():
    ledger = Ledger()
    ledger.open(0, T0, P)
    assert ledger.close(0, T0 + 10, DONE) is not None
    assert ledger.close(0, T0 + 50, FAILED) is None
    assert ledger.intervals[0].end_s == T0 + 10
    assert ledger.intervals[0].outcome == DONE


def test_open_twice_keeps_the_first_interval():
    ledger = Ledger()
    first = ledger.open(0, T0, P)
    second = ledger.open(0, T0 + 50, price(per_hour=100.0))
    assert second is first
    assert len(ledger.intervals) == 1
    ledger.close(0, T0 + 100, DONE)
    assert ledger.spent() == pytest.approx(0.1)


def test_close_before_start_bills_nothing_negative():
    ledger = Ledger()
    ledger.open(0, T0, P)
    interval = ledger.close(0, T0 - 5, DONE)
    assert interval.end_s == T0
    assert ledger.spent() == 0


@pytest.mark.parametrize("outcome", ["open", "crashed", "", None])
def test_unknown_outcome_raises(outcome):
    ledger = Ledger()
    ledger.open(0, T0, P)
    with pytest.raises(ValueError):
        ledger.close(0, T0 + 10, outcome)
    assert ledger.is_open(0)  # nothing was closed


def test_close_all():
    ledger = Ledger()
    ledger.open(0, T0, P)
    ledger.open(1, T0, P)
    assert sorted(ledger.close_all(T0 + 10, STOPPED)) == [0, 1]
    assert ledger.open_trials() == []
    assert {i.outcome for i in ledger.intervals} == {STOPPED}


def test_trial_money_of_unbilled_trial_is_none():
    assert Ledger().trial_money(0) is None


def test_trial_money_attrs_keys():
    ledger = Ledger()
    ledger.open(0, T0, P)
    ledger.close(0, T0 + 10, DONE)
    attrs = ledger.trial_money(0).attrs()
    assert set(attrs) == {"cost", "wasted_cost", "billed_s", "instance", "spot", "currency",
                          "spot_cost"}
    assert set(attrs) == {keys.ATTR_COST, keys.ATTR_WASTED_COST, keys.ATTR_BILLED_S,
                          keys.ATTR_INSTANCE, keys.ATTR_SPOT, keys.ATTR_CURRENCY,
                          keys.ATTR_SPOT_COST}
    assert attrs["currency"] == "USD" and attrs["cost"] == pytest.approx(0.01)
    assert attrs["instance"] == "aws:p3.2xlarge" and attrs["spot"] is False


# ---------------------------------------------------------------------------------------
# Currency


def test_mixing_currencies_raises():
    ledger = Ledger(currency="USD")
    with pytest.raises(CurrencyError) as info:
        ledger.open(0, T0, price(currency="CNY"))
    assert info.value.exit_code == EXIT_CONFIG == 2
    assert "USD" in str(info.value) and "CNY" in str(info.value)
    assert ledger.intervals == [] and ledger.open_trials() == []


def test_ledger_without_currency_takes_the_first():
    ledger = Ledger()
    ledger.open(0, T0, price(currency="CNY"))
    assert ledger.currency == "CNY"
    with pytest.raises(CurrencyError):
        ledger.open(1, T0, price(currency="USD"))


# ---------------------------------------------------------------------------------------
# Persistence


def _busy_ledger(path) -> Ledger:
    ledger = Ledger(path, currency="USD")
    ledger.open(0, T0, P)
    ledger.checkpoint(0, T0 + 60)
    ledger.close(0, T0 + 90, PREEMPTED)
    ledger.open(0, T0 + 200, P)
    ledger.close(0, T0 + 400, DONE)
    ledger.open(1, T0 + 10, price(granularity=60, min_billing=60))
    ledger.close(1, T0 + 70, STOPPED)
    ledger.open(2, T0 + 20, P)  # still running
    ledger.checkpoint(2, T0 + 50)
    return ledger


def _totals(ledger: Ledger, now: float):
    return (ledger.spent(now), ledger.wasted(), ledger.trials(), ledger.open_trials(),
            [ledger.trial_money(t, now) for t in ledger.trials()])


def test_ledger_writes_json_lines(tmp_path):
    path = tmp_path / "ledger.jsonl"
    _busy_ledger(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    events = [json.loads(line) for line in lines]
    assert [e["event"] for e in events] == [
        "open", "checkpoint", "close", "open", "close", "open", "close", "open",
        "checkpoint"]
    assert events[0]["currency"] == "USD" and events[0]["price_per_hour"] == 3.6
    assert events[2] == {"event": "close", "trial": 0, "at_s": T0 + 90,
                         "outcome": PREEMPTED}


def test_in_memory_ledger_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ledger = Ledger()
    ledger.open(0, T0, P)
    ledger.close(0, T0 + 1, DONE)
    assert list(tmp_path.iterdir()) == []


def test_replay_gives_the_same_totals(tmp_path):
    path = tmp_path / "ledger.jsonl"
    before = _busy_ledger(path)
    after = Ledger(path)
    now = T0 + 1000
    assert _totals(after, now) == _totals(before, now)
    assert after.currency == "USD"
    assert after.spent(now) == pytest.approx(0.09 + 0.2 + 0.06 + 0.98)
    assert after.wasted() == pytest.approx(0.03)
    # The replayed open interval keeps its checkpoint and can be closed.
    after.close(2, now, FAILED)
    assert after.wasted(trial=2) == pytest.approx(0.95)


def test_replay_ignores_a_truncated_last_line(tmp_path):
    path = tmp_path / "ledger.jsonl"
    before = _busy_ledger(path)
    full = json.dumps({"event": "close", "trial": 2, "at_s": T0 + 300, "outcome": "done"})
    with path.open("a", encoding="utf-8") as f:
        f.write(full[: len(full) // 2])  # the driver died mid-write
    after = Ledger(path)
    now = T0 + 1000
    assert _totals(after, now) == _totals(before, now)
    assert after.is_open(2)


def test_ledger_continued_after_a_truncated_line_replays_again(tmp_path):
    # A resumed run appends to a ledger whose last line a crash cut short; the next
    # resume must still read it, with the events written after the crash.
    path = tmp_path / "ledger.jsonl"
    _busy_ledger(path)
    full = json.dumps({"event": "close", "trial": 2, "at_s": T0 + 300, "outcome": "done"})
    with path.open("a", encoding="utf-8") as f:
        f.write(full[: len(full) // 2])
    resumed = Ledger(path)
    resumed.close(2, T0 + 500, STOPPED)
    resumed.open(3, T0 + 500, P)
    resumed.close(3, T0 + 600, DONE)
    expected = _totals(resumed, T0 + 1000)
    again = Ledger(path)  # raised "corrupt ledger line" / lost events before a fix
    assert _totals(again, T0 + 1000) == expected


def test_replay_corrupt_middle_line_raises(tmp_path):
    path = tmp_path / "ledger.jsonl"
    _busy_ledger(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[3] = lines[3][:10]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(HpsearchError) as info:
        Ledger(path)
    assert f"{path}:4" in str(info.value)
    assert "corrupt" in str(info.value)


@pytest.mark.parametrize(
    "bad",
    ["[1, 2]", "{}", '{"event": "open", "trial": 1}', '{"event": "close"}'],
    ids=["not_an_object", "no_event", "open_without_fields", "close_without_trial"],
)
def test_replay_malformed_event_in_the_middle_raises(tmp_path, bad):
    # Valid JSON that is not a ledger event is as corrupt as a broken line: an
    # HpsearchError naming path:line, not a KeyError/TypeError traceback.
    path = tmp_path / "ledger.jsonl"
    _busy_ledger(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[3] = bad
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(HpsearchError) as info:
        Ledger(path)
    assert f"{path}:4" in str(info.value)


def test_replay_skips_blank_lines(tmp_path):
    path = tmp_path / "ledger.jsonl"
    before = _busy_ledger(path)
    path.write_text(path.read_text(encoding="utf-8").replace("\n", "\n\n"), encoding="utf-8")
    assert _totals(Ledger(path), T0 + 1000) == _totals(before, T0 + 1000)


def test_replay_in_another_currency_raises(tmp_path):
    path = tmp_path / "ledger.jsonl"
    _busy_ledger(path)
    with pytest.raises(CurrencyError):
        Ledger(path, currency="CNY")


def test_replayed_ledger_appends(tmp_path):
    path = tmp_path / "ledger.jsonl"
    _busy_ledger(path)
    resumed = Ledger(path)
    resumed.open(7, T0 + 2000, P)
    resumed.close(7, T0 + 2100, DONE)
    third = Ledger(path)
    assert third.spent(trial=7) == pytest.approx(0.1)
    assert third.trials() == [0, 1, 2, 7]


def test_interval_dataclass_defaults():
    interval = Interval(0, "x", False, 3.6, "USD", T0)
    assert interval.outcome == "open" and interval.end_s is None
    assert interval.billed_s(T0 + 10) == 10 and interval.wasted_s() == 0


def test_spot_cost_is_the_part_billed_at_spot_prices():
    from hpsearch.money.pricing import Price

    spot = Price(3600.0, "USD", "aws:x", True, 3600.0, 1.0)
    on_demand = Price(3600.0 * 3, "USD", "aws:x", False, 3600.0 * 3, 1.0)
    ledger = Ledger()
    ledger.open(0, T0, spot)
    ledger.close(0, T0 + 10, PREEMPTED)
    ledger.open(0, T0 + 20, spot)
    ledger.reprice(0, on_demand)  # it landed on an on-demand node this time
    ledger.close(0, T0 + 30, DONE)
    money = ledger.trial_money(0)
    assert money.spot_cost == pytest.approx(10.0)
    assert money.cost == pytest.approx(10.0 + 30.0)
    assert money.spot is False  # the latest interval's kind


# ---------------------------------------------------------------------------------------
# A driver that died: alive events, and where its open intervals close


def test_alive_is_written_only_while_open_and_throttled(tmp_path):
    path = tmp_path / "ledger.jsonl"
    ledger = Ledger(path)
    assert ledger.alive(T0) is False  # nothing open: an idle driver writes nothing
    ledger.open(0, T0, P)
    assert ledger.alive(T0 + 1, every_s=5) is True
    assert ledger.alive(T0 + 3, every_s=5) is False
    assert ledger.alive(T0 + 6, every_s=5) is True
    assert ledger.alive(T0 + 6.5, every_s=0) is True
    events = [json.loads(line)["event"] for line in path.read_text().splitlines()]
    assert events == ["open", "alive", "alive", "alive"]


def test_a_dead_drivers_interval_closes_at_the_last_alive_and_wastes_since_checkpoint(
        tmp_path):
    path = tmp_path / "ledger.jsonl"
    ledger = Ledger(path)
    ledger.open(0, T0, P)
    ledger.checkpoint(0, T0 + 20)
    ledger.alive(T0 + 45, every_s=0)  # then the driver is SIGKILLed
    resumed = Ledger(path)
    assert resumed.last_seen(0) == T0 + 45
    resumed.close_all(T0 + 500, FAILED, at_last_event=True)
    assert resumed.spent() == pytest.approx(0.045)  # billed to the last alive, not 20 s
    assert resumed.wasted() == pytest.approx(0.025)  # the 25 s since the checkpoint


def test_other_trials_events_also_prove_an_interval_was_running(tmp_path):
    path = tmp_path / "ledger.jsonl"
    ledger = Ledger(path)
    ledger.open(0, T0, P)
    ledger.open(1, T0 + 10, P)
    ledger.checkpoint(1, T0 + 30)
    ledger.close(1, T0 + 40, DONE)
    ledger.open(2, T0 + 41, P)  # trial 2 opened after: it says nothing of before
    resumed = Ledger(path)
    assert resumed.last_seen(0) == T0 + 41
    assert resumed.last_seen(2) == T0 + 41
    resumed.close_all(T0 + 999, FAILED, at_last_event=True)
    assert resumed.wasted(trial=0) == pytest.approx(0.041)  # no checkpoint: all of it
    assert resumed.wasted(trial=2) == 0


def test_without_alive_events_an_interval_closes_at_its_last_event(tmp_path):
    # A ledger written before alive events existed replays as it always did.
    path = tmp_path / "ledger.jsonl"
    ledger = Ledger(path)
    ledger.open(0, T0, P)
    ledger.checkpoint(0, T0 + 20)
    resumed = Ledger(path)
    resumed.close_all(T0 + 999, FAILED, at_last_event=True)
    assert resumed.spent() == pytest.approx(0.02) and resumed.wasted() == 0


def test_a_failed_append_leaves_no_half_line(tmp_path, monkeypatch):
    import errno
    import os

    path = tmp_path / "ledger.jsonl"
    ledger = Ledger(path)
    ledger.open(0, T0, P)
    before = path.read_bytes()
    real_write = os.write
    calls = []

    def full_disk(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[:7]))  # part of the line fits ...
        raise OSError(errno.ENOSPC, "No space left on device")  # ... then the disk is full

    monkeypatch.setattr(os, "write", full_disk)
    with pytest.raises(OSError):
        ledger.checkpoint(0, T0 + 5)
    monkeypatch.setattr(os, "write", real_write)
    assert path.read_bytes() == before
    ledger.close(0, T0 + 9, DONE)
    assert Ledger(path).spent() == pytest.approx(0.009)


def test_the_ledger_id_is_written_once_and_replayed(tmp_path):
    path = tmp_path / "ledger.jsonl"
    ledger = Ledger(path)
    assert ledger.id is None
    first = ledger.ensure_id()
    assert ledger.ensure_id() == first and len(first) == 32
    assert Ledger(path).id == first
    older = tmp_path / "older.jsonl"
    _busy_ledger(older)  # a ledger from before ids: gets one appended
    assert Ledger(older).id is None
    given = Ledger(older).ensure_id()
    again = Ledger(older)
    assert again.id == given
    assert _totals(again, T0 + 1000) == _totals(_replayed(older), T0 + 1000)


def _replayed(path) -> Ledger:
    return Ledger(path)


# ---------------------------------------------------------------------------------------
# Repair


def test_corrupt_middle_line_says_how_to_repair(tmp_path):
    from hpsearch.money.ledger_file import LedgerCorrupt

    path = tmp_path / "run" / "ledger.jsonl"
    path.parent.mkdir()
    _busy_ledger(path)
    lines = path.read_text().splitlines()
    lines[3] = lines[3][:20]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(LedgerCorrupt) as info:
        Ledger(path)
    assert info.value.exit_code == EXIT_CONFIG
    assert f"python -m hpsearch repair {tmp_path / 'run'}" in str(info.value)


def test_repair_of_a_torn_middle_close_keeps_every_valid_event(tmp_path):
    from hpsearch.money.ledger_repair import repair

    path = tmp_path / "ledger.jsonl"
    _busy_ledger(path)
    original = path.read_bytes()
    lines = original.decode().splitlines()
    assert json.loads(lines[4])["event"] == "close"  # trial 0's second interval ends
    lines[4] = lines[4][:25]
    path.write_text("\n".join(lines) + "\n")
    damaged = path.read_bytes()
    result = repair(path, clock=lambda: T0)
    assert [n for n, _, _ in result.dropped] == [5]
    assert result.backup is not None and result.backup.read_bytes() == damaged
    assert result.still_open == [0, 2]
    repaired = Ledger(path)  # loads now
    kept = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(kept) == len(lines) - 1
    # Trial 0's second interval lost its close: it stays open, and the next run closes
    # it at the last moment it was known running (here its start: every later event in
    # this ledger is older), as failed.
    repaired.close_all(T0 + 5000, FAILED, at_last_event=True)
    assert repaired.intervals[1].outcome == FAILED and repaired.intervals[1].end_s == T0 + 200
    assert repaired.spent(trial=1) == pytest.approx(0.06)
    assert any("repaired, 1 line(s) dropped" in line for line in result.lines())


def test_repair_books_an_interval_whose_open_line_was_torn(tmp_path):
    from hpsearch.money.ledger_repair import repair

    path = tmp_path / "ledger.jsonl"
    ledger = Ledger(path)
    ledger.open(0, T0, P)
    ledger.close(0, T0 + 100, DONE)
    ledger.open(1, T0 + 110, P)  # this line gets torn
    ledger.checkpoint(1, T0 + 150)
    ledger.close(1, T0 + 200, DONE)
    lines = path.read_text().splitlines()
    lines[2] = lines[2][:30]
    path.write_text("\n".join(lines) + "\n")
    result = repair(path)
    assert result.booked == [(1, T0 + 100)]  # from the last event before the damage
    repaired = Ledger(path)
    assert repaired.spent(trial=1) == pytest.approx(0.1)  # 100 s, not the lost 90 s
    assert repaired.spent(trial=0) == pytest.approx(0.1)
    assert repaired.open_trials() == []


def test_repair_of_a_sound_ledger_changes_nothing(tmp_path):
    from hpsearch.money.ledger_repair import repair

    path = tmp_path / "ledger.jsonl"
    _busy_ledger(path)
    before = path.read_bytes()
    result = repair(path)
    assert result.dropped == [] and result.backup is None
    assert path.read_bytes() == before
    assert list(tmp_path.iterdir()) == [path]


def test_repair_drops_a_torn_last_line_too(tmp_path):
    from hpsearch.money.ledger_repair import repair

    path = tmp_path / "ledger.jsonl"
    before = _busy_ledger(path)
    with path.open("a") as f:
        f.write('{"event": "close", "tri')
    result = repair(path)
    assert [why for _, why, _ in result.dropped] == ["not JSON, torn last line"]
    assert _totals(Ledger(path), T0 + 1000) == _totals(before, T0 + 1000)
