"""Unit tests of hpsearch.report.progress: durations, the tally, throttled lines and the table."""

from __future__ import annotations

import math

import pytest

from hpsearch.report.progress import Progress, Tally, format_duration, format_value, top_table


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def make_progress(interval_s: float = 10.0, n_trials: int = 4, mode: str = "max"):
    clock = FakeClock()
    lines: list[str] = []
    progress = Progress("val_acc", n_trials, lines.append, clock, interval_s)
    progress.tally.mode = mode
    return progress, clock, lines


# ---------------------------------------------------------------------------------------
# format_duration / format_value


@pytest.mark.parametrize(
    "seconds, text",
    [
        (0, "0:00:00"),
        (0.99, "0:00:00"),
        (59.9, "0:00:59"),
        (60, "0:01:00"),
        (83.2, "0:01:23"),
        (3599, "0:59:59"),
        (3600, "1:00:00"),
        (3661, "1:01:01"),
        (36000, "10:00:00"),
        (90061, "25:01:01"),
        (-5, "0:00:00"),
    ],
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    "value, text",
    [(0.912345, "0.9123"), (1234567.0, "1.235e+06"), (0.5, "0.5"), (math.nan, "nan"),
     (3, "3"), ("adam", "adam"), (True, "True"), (None, "None"), (1e-5, "1e-05")],
)
def test_format_value(value, text):
    assert format_value(value) == text


# ---------------------------------------------------------------------------------------
# Tally


def test_tally_counts_each_state():
    tally = Tally()
    for state in ["COMPLETE", "PRUNED", "FAIL", "COMPLETE", "PRUNED", "COMPLETE"]:
        tally.finished(state, None, None)
    assert (tally.complete, tally.pruned, tally.failed) == (3, 2, 1)
    assert tally.best_value is None and tally.best_number is None


def test_tally_tracks_the_best_in_max_mode():
    tally = Tally(mode="max")
    tally.finished("COMPLETE", 0, 0.5)
    tally.finished("COMPLETE", 1, 0.7)
    tally.finished("COMPLETE", 2, 0.6)
    assert (tally.best_value, tally.best_number) == (0.7, 1)


def test_tally_tracks_the_best_in_min_mode():
    tally = Tally(mode="min")
    tally.finished("COMPLETE", 0, 0.5)
    tally.finished("COMPLETE", 1, 0.7)
    tally.finished("COMPLETE", 2, 0.2)
    tally.finished("COMPLETE", 3, 0.3)
    assert (tally.best_value, tally.best_number) == (0.2, 2)


@pytest.mark.parametrize("mode", ["max", "min"])
def test_tally_keeps_the_first_of_equal_values(mode):
    tally = Tally(mode=mode)
    tally.finished("COMPLETE", 4, 0.5)
    tally.finished("COMPLETE", 5, 0.5)
    assert tally.best_number == 4


def test_pruned_and_failed_trials_are_never_best():
    tally = Tally(mode="max")
    tally.finished("COMPLETE", 0, 0.5)
    tally.finished("PRUNED", 1, 0.99)
    tally.finished("FAIL", 2, 0.99)
    assert (tally.best_value, tally.best_number) == (0.5, 0)
    assert (tally.complete, tally.pruned, tally.failed) == (1, 1, 1)


def test_complete_without_a_value_is_counted_but_not_best():
    tally = Tally(mode="min")
    tally.finished("COMPLETE", 0, None)
    assert tally.complete == 1 and tally.best_value is None
    tally.finished("COMPLETE", 1, 3.0)
    tally.finished("COMPLETE", 2, None)
    assert (tally.best_value, tally.best_number) == (3.0, 1)


def test_first_value_is_best_even_if_bad():
    assert Tally(mode="max").is_better(-1e9)
    assert Tally(mode="min").is_better(1e9)


@pytest.mark.parametrize("mode", ["max", "min"])
def test_nan_never_becomes_the_best(mode):
    # A diverged trial reports nan; Optuna records it as FAIL. BUG: the tally takes a
    # first nan as best and then nothing compares better than nan, so the status line
    # shows "best ... nan" for the rest of the run.
    tally = Tally(mode=mode)
    tally.finished("COMPLETE", 0, math.nan)
    tally.finished("COMPLETE", 1, 0.5)
    assert (tally.best_value, tally.best_number) == (0.5, 1)


# ---------------------------------------------------------------------------------------
# Progress: throttled status lines


def test_tick_is_throttled_by_the_clock():
    progress, clock, lines = make_progress(interval_s=10.0)
    progress.tick(running=2)
    clock.now += 9.99
    progress.tick(running=2)
    assert lines == []
    clock.now += 0.01  # exactly interval_s after the start
    progress.tick(running=2)
    assert len(lines) == 1
    assert lines[0].startswith("[0:00:10] ")
    assert "2 running" in lines[0]
    # Many ticks at the same moment give one line.
    progress.tick(running=2)
    progress.tick(running=2)
    assert len(lines) == 1
    clock.now += 5
    progress.tick(running=1)
    assert len(lines) == 1
    clock.now += 5
    progress.tick(running=1)
    assert len(lines) == 2
    assert lines[1].startswith("[0:00:20] ") and "1 running" in lines[1]


def test_tick_interval_restarts_from_the_last_line():
    progress, clock, lines = make_progress(interval_s=10.0)
    clock.now += 25  # a long gap gives one line, not two
    progress.tick(running=0)
    assert len(lines) == 1
    clock.now += 9
    progress.tick(running=0)
    assert len(lines) == 1
    clock.now += 1
    progress.tick(running=0)
    assert len(lines) == 2
    assert lines[1].startswith("[0:00:35] ")


def test_tick_records_running_even_without_a_line():
    progress, clock, lines = make_progress()
    progress.tick(running=3)
    assert progress.tally.running == 3
    assert lines == []
    assert "3 running" in progress.status()


def test_zero_interval_emits_every_tick():
    progress, clock, lines = make_progress(interval_s=0.0)
    for _ in range(3):
        progress.tick(running=1)
    assert len(lines) == 3


def test_status_line_contents():
    progress, clock, lines = make_progress(n_trials=8)
    assert progress.status() == (
        "[0:00:00] 0/8 done: 0 complete, 0 pruned, 0 failed | 0 running | best val_acc -"
    )
    progress.trial_ended(0, "COMPLETE", 5, 0.81)
    progress.trial_ended(1, "PRUNED", 2, 0.4)
    progress.trial_ended(2, "FAIL", 0, None, "boom")
    progress.trial_ended(3, "COMPLETE", 5, 0.912345)
    progress.tick(running=2)
    clock.now += 83.2
    assert progress.status() == (
        "[0:01:23] 4/8 done: 2 complete, 1 pruned, 1 failed | 2 running "
        "| best val_acc 0.9123 (trial 3)"
    )
    assert lines[:4] == [
        "  trial 0 complete after 5 epoch(s): val_acc=0.81",
        "  trial 1 pruned after 2 epoch(s): val_acc=0.4",
        "  trial 2 fail after 0 epoch(s): val_acc=- | boom",
        "  trial 3 complete after 5 epoch(s): val_acc=0.9123",
    ]


def test_status_in_min_mode_shows_the_lowest():
    progress, clock, lines = make_progress(mode="min")
    progress.trial_ended(0, "COMPLETE", 3, 0.30)
    progress.trial_ended(1, "COMPLETE", 3, 0.25)
    progress.trial_ended(2, "COMPLETE", 3, 0.27)
    assert progress.status().endswith("best val_acc 0.25 (trial 1)")


def test_trial_ended_emits_immediately_regardless_of_throttle():
    progress, clock, lines = make_progress(interval_s=1000.0)
    progress.trial_ended(7, "COMPLETE", 20, 0.5)
    progress.trial_ended(None, "FAIL", 0, None, "ValueError: bad")
    assert lines == [
        "  trial 7 complete after 20 epoch(s): val_acc=0.5",
        "  trial None fail after 0 epoch(s): val_acc=- | ValueError: bad",
    ]
    assert progress.tally.complete == 1 and progress.tally.failed == 1


def test_trial_ended_does_not_reset_the_throttle():
    progress, clock, lines = make_progress(interval_s=10.0)
    clock.now += 6
    progress.trial_ended(0, "COMPLETE", 1, 0.5)
    clock.now += 4
    progress.tick(running=0)
    assert len(lines) == 2 and lines[1].startswith("[0:00:10] ")


def test_status_duration_uses_the_injected_clock_only():
    progress, clock, lines = make_progress()
    clock.now += 3 * 3600 + 7
    assert progress.status().startswith("[3:00:07] ")


# ---------------------------------------------------------------------------------------
# top_table


ROWS = [
    {"number": 12, "state": "COMPLETE", "value": 0.98765, "epochs": 20,
     "params": {"lr": 0.0012345, "optimizer": "adam", "hidden": 128}},
    {"number": 3, "state": "PRUNED", "value": 0.5, "epochs": 3,
     "params": {"lr": 0.1, "optimizer": "sgd", "hidden": 16}},
    {"number": 104, "state": "FAIL", "value": None, "epochs": 0,
     "params": {"lr": 0.01, "optimizer": "adam"}},
]


def column_starts(line: str, cells: list[str]) -> list[int]:
    starts, pos = [], 0
    for cell in cells:
        pos = line.index(cell, pos)
        starts.append(pos)
        pos += len(cell)
    return starts


def test_top_table_exact_rendering():
    lines = top_table(ROWS, "val_acc", ["lr", "optimizer", "hidden"])
    assert lines == [
        "trial  state     val_acc  epochs  lr        optimizer  hidden",
        "-----  --------  -------  ------  --------  ---------  ------",
        "12     COMPLETE  0.9877   20      0.001234  adam       128",
        "3      PRUNED    0.5      3       0.1       sgd        16",
        "104    FAIL      -        0       0.01      adam",
    ]


def test_top_table_columns_are_aligned():
    lines = top_table(ROWS, "val_acc", ["lr", "optimizer", "hidden"])
    header, rule, *body = lines
    widths = [len(dash) for dash in rule.split("  ")]
    assert rule == "  ".join("-" * w for w in widths)
    starts = [sum(widths[:i]) + 2 * i for i in range(len(widths))]
    assert column_starts(header, ["trial", "state", "val_acc", "epochs", "lr", "optimizer",
                                  "hidden"]) == starts
    expected_cells = [
        ["12", "COMPLETE", "0.9877", "20", "0.001234", "adam", "128"],
        ["3", "PRUNED", "0.5", "3", "0.1", "sgd", "16"],
        ["104", "FAIL", "-", "0", "0.01", "adam"],
    ]
    for line, cells in zip(body, expected_cells):
        assert column_starts(line, cells) == starts[: len(cells)], line
    # Each column is as wide as its widest cell or header.
    assert widths == [5, 8, 7, 6, 8, 9, 6]


def test_top_table_strips_trailing_whitespace():
    lines = top_table(ROWS, "val_acc", ["lr", "optimizer", "hidden"])
    assert all(line == line.rstrip() for line in lines)
    # The FAIL row has no `hidden`: it ends right after its last cell.
    assert lines[-1].endswith("adam")


def test_top_table_short_cells_are_padded_to_the_header():
    rows = [{"number": 1, "state": "X", "value": 1.0, "epochs": 1, "params": {"a": 2}}]
    lines = top_table(rows, "a_long_metric_name", ["a"])
    assert lines[0] == "trial  state  a_long_metric_name  epochs  a"
    assert lines[1] == "-----  -----  ------------------  ------  -"
    assert lines[2] == "1      X      1                   1       2"


def test_top_table_limit():
    rows = [dict(ROWS[0], number=i) for i in range(10)]
    assert len(top_table(rows, "m", ["lr"])) == 2 + 5
    assert len(top_table(rows, "m", ["lr"], limit=3)) == 2 + 3
    assert top_table(rows, "m", ["lr"], limit=3)[-1].startswith("2 ")


def test_top_table_without_rows():
    lines = top_table([], "val_acc", ["lr"])
    assert lines == ["trial  state  val_acc  epochs  lr", "-----  -----  -------  ------  --"]


def test_top_table_accepts_any_iterable_of_params():
    lines = top_table(ROWS[:1], "v", (p for p in ["optimizer"]))
    assert lines[0].split() == ["trial", "state", "v", "epochs", "optimizer"]
    assert lines[2].split() == ["12", "COMPLETE", "0.9877", "20", "adam"]


# ---------------------------------------------------------------------------------------
# Failed trials, checkpoint fallbacks


def test_a_failed_trial_names_its_log_and_repeats_say_same_error():
    clock = FakeClock()
    lines: list[str] = []
    progress = Progress("val_acc", 4, lines.append, clock, 10.0,
                        trial_log=lambda n: f"runs/x/logs/trial-{n:04d}.log")
    progress.trial_ended(0, "FAIL", 1, 0.5, "RuntimeError: boom at epoch 2 (pid 17)")
    progress.trial_ended(1, "COMPLETE", 3, 0.9)
    progress.trial_ended(2, "FAIL", 1, 0.4, "RuntimeError: boom at epoch 2 (pid 23)")
    progress.trial_ended(3, "FAIL", 0, None, "ValueError: bad")
    assert lines == [
        "  trial 0 fail after 1 epoch(s): val_acc=0.5 | RuntimeError: boom at epoch 2 "
        "(pid 17) (log: runs/x/logs/trial-0000.log)",
        "  trial 1 complete after 3 epoch(s): val_acc=0.9",
        "  trial 2 fail after 1 epoch(s): val_acc=0.4 | same error as trial 0 "
        "(log: runs/x/logs/trial-0002.log)",
        "  trial 3 fail after 0 epoch(s): val_acc=- | ValueError: bad "
        "(log: runs/x/logs/trial-0003.log)",
    ]


def test_checkpoint_fallback_lines():
    progress, clock, lines = make_progress()
    progress.checkpoint_fallback(3, [["epoch-000004", "checksum mismatch in trial.ckpt"]], 2)
    progress.checkpoint_fallback(5, [["epoch-000002", "it lacks Lightning's keys epoch"],
                                     ["epoch-000001", "trial.ckpt is missing"]], 0)
    assert lines == [
        "  trial 3: checkpoint epoch-000004 is corrupt (checksum mismatch in trial.ckpt); "
        "resumed from epoch 2",
        "  trial 5: checkpoint epoch-000002 is corrupt (it lacks Lightning's keys epoch); "
        "no valid checkpoint left: restarted from scratch",
        "  trial 5: checkpoint epoch-000001 is corrupt (trial.ckpt is missing); "
        "no valid checkpoint left: restarted from scratch",
    ]


def test_failures_line_counts_the_session():
    progress, clock, lines = make_progress()
    assert progress.failures_line("x.log") is None
    progress.trial_ended(0, "COMPLETE", 3, 0.9)
    progress.trial_ended(1, "FAIL", 1, None, "boom")
    progress.trial_ended(2, "PRUNED", 1, 0.2)
    progress.trial_ended(3, "FAIL", 1, None, "boom")
    assert progress.failures_line("a.log, b.log") == \
        "2 of 4 trial(s) failed; their logs: a.log, b.log"
    assert progress.failures_line("") == "2 of 4 trial(s) failed"


def test_a_paused_trial_that_resumes_gets_a_line_and_is_no_longer_counted_paused():
    from hpsearch.core.lifecycle import Event, TrialRecord
    from hpsearch.trials import TrialState
    from hpsearch.report.progress import SessionListener

    lines: list[str] = []
    progress = Progress(metric="val_acc", n_trials=4, emit=lines.append, clock=lambda: 0.0)
    listener = SessionListener(progress)
    record = TrialRecord(9, TrialState.PAUSED, epoch=8, value=0.9666, checkpoint_epoch=8)
    listener.trial_finished(record)
    assert progress.tally.paused == 1
    listener.trial_requeued(record, Event.RESUMED, "picked by cost_aware")
    assert progress.tally.paused == 0
    assert lines[-1] == ("  trial 9 resumed after 8 epoch(s) (picked by cost_aware), "
                         "from its checkpoint at epoch 8")


def test_the_driver_log_gets_a_resume_as_info_and_a_preemption_as_warning():
    import logging

    from hpsearch.core.lifecycle import Event, TrialRecord
    from hpsearch.trials import TrialState
    from hpsearch.report.progress import SessionListener

    logged: list[tuple[int, str]] = []
    progress = Progress(metric="val_acc", n_trials=4, emit=lambda line: None, clock=lambda: 0.0)
    listener = SessionListener(progress, lambda level, line: logged.append((level, line)))
    record = TrialRecord(9, TrialState.PAUSED, epoch=8, value=0.9666, checkpoint_epoch=8)
    listener.trial_requeued(record, Event.RESUMED, "picked by cost_aware")
    listener.trial_requeued(record, Event.PREEMPTED, "node lost")
    failed = TrialRecord(3, TrialState.FAILED, epoch=2, value=None, error="CUDA OOM")
    listener.trial_finished(failed)
    assert [level for level, _ in logged] == [logging.INFO, logging.WARNING, logging.WARNING]
    assert logged[0][1].startswith("trial 9 resumed after 8 epoch(s)")
    assert logged[2][1] == "trial 3 failed: CUDA OOM"

