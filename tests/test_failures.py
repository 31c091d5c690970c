"""Unit tests of hpsearch.core.failures: the same error, the fail-fast watch, the verdict."""

from __future__ import annotations

import pytest

from hpsearch.core.failures import (FailFast, Failure, SessionOutcome, Verdict, error_signature,
                               logs_line, session_verdict)


@pytest.mark.parametrize("a, b", [
    ("RuntimeError: boom at epoch 2", "RuntimeError: boom at epoch 3"),
    ("RuntimeError: boom at epoch 2 (lr 0.00123, pid 4411)",
     "RuntimeError: boom at epoch 2 (lr 1e-05, pid 87)"),
    ("ValueError: <Foo object at 0x7f3a2b1c90d0> is bad",
     "ValueError: <Foo object at 0x55aa01> is bad"),
    ("FileNotFoundError: [Errno 2] No such file: '/tmp/run-1/data/x.csv'",
     "FileNotFoundError: [Errno 2] No such file: '/home/me/data/y.csv'"),
    ("ActorDiedError: actor 9595b12588ea3a4a51e98d5301000000 died",
     "ActorDiedError: actor 1234b12588ea3a4a51e98d53010000ff died"),
    ("trial 3: CUDA out of memory after the whole OOM ladder (halve_batch: batch size 64 "
     "-> 32)", "trial 11: CUDA out of memory after the whole OOM ladder (halve_batch: "
     "batch size 128 -> 64)"),
    ("KeyError:   'x'\n", "KeyError: 'x'"),
])
def test_volatile_parts_do_not_make_errors_different(a, b):
    assert error_signature(a) == error_signature(b)


@pytest.mark.parametrize("a, b", [
    ("RuntimeError: boom at epoch 2", "ValueError: boom at epoch 2"),
    ("RuntimeError: boom at epoch 2", "RuntimeError: bang at epoch 2"),
    ("KeyError: 'lr'", "KeyError: 'hidden'"),
])
def test_different_errors_stay_different(a, b):
    assert error_signature(a) != error_signature(b)


def fail(number: int, error: str = "RuntimeError: boom at epoch 2") -> Failure:
    return Failure(number, error, f"runs/x/logs/trial-{number:04d}.log")


def test_the_first_n_failing_alike_stop_the_run():
    watch = FailFast(3)
    assert watch.failed(fail(0, "RuntimeError: boom at epoch 2")) is Verdict.CONTINUE
    assert watch.failed(fail(1, "RuntimeError: boom at epoch 3")) is Verdict.CONTINUE
    assert watch.failed(fail(2, "RuntimeError: boom at epoch 2")) is Verdict.STOP
    message = watch.message()
    assert "the first 3 trials all failed with the same error" in message
    assert "RuntimeError: boom at epoch 2" in message
    assert message.endswith("traceback in runs/x/logs/trial-0000.log")
    assert "search.fail_fast: 3" in message
    # Decided once: later failures do not stop it again.
    assert watch.failed(fail(3)) is Verdict.CONTINUE


def test_a_trial_that_ran_disarms_the_watch():
    watch = FailFast(2)
    watch.failed(fail(0))
    watch.succeeded()
    assert watch.failed(fail(2)) is Verdict.CONTINUE
    assert watch.failed(fail(3)) is Verdict.CONTINUE


def test_different_errors_among_the_first_trials_disarm_the_watch():
    watch = FailFast(3)
    watch.failed(fail(0, "RuntimeError: boom"))
    assert watch.failed(fail(1, "ValueError: bad lr")) is Verdict.CONTINUE
    for n in range(2, 6):
        assert watch.failed(fail(n, "RuntimeError: boom")) is Verdict.CONTINUE


@pytest.mark.parametrize("limit, stops_after", [(1, 1), (2, 2), (5, 5)])
def test_the_limit_is_the_number_of_trials(limit, stops_after):
    watch = FailFast(limit)
    verdicts = [watch.failed(fail(n)) for n in range(stops_after)]
    assert verdicts[-1] is Verdict.STOP
    assert all(v is Verdict.CONTINUE for v in verdicts[:-1])


def test_zero_never_stops():
    watch = FailFast(0)
    assert all(watch.failed(fail(n)) is Verdict.CONTINUE for n in range(20))


def test_a_failure_without_a_log_says_so_without_a_path():
    watch = FailFast(1)
    watch.failed(Failure(0, "RuntimeError: x", None))
    assert "traceback in" not in watch.message()


@pytest.mark.parametrize("complete, pruned, failed, outcome", [
    (3, 0, 0, SessionOutcome.OK),
    (0, 0, 0, SessionOutcome.OK),
    (0, 2, 0, SessionOutcome.OK),
    (2, 0, 2, SessionOutcome.SOME_FAILED),
    (0, 1, 3, SessionOutcome.SOME_FAILED),
    (0, 0, 1, SessionOutcome.ALL_FAILED),
    (0, 0, 7, SessionOutcome.ALL_FAILED),
])
def test_session_verdict(complete, pruned, failed, outcome):
    assert session_verdict(complete, pruned, failed) is outcome


def test_logs_line_names_the_first_logs_then_counts():
    failures = [fail(n) for n in range(7)] + [Failure(9, "x", None)]
    line = logs_line(failures, limit=3)
    assert line == ("runs/x/logs/trial-0000.log, runs/x/logs/trial-0001.log, "
                    "runs/x/logs/trial-0002.log and 4 more")
    assert logs_line([]) == ""
