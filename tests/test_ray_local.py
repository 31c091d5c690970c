"""Unit tests of hpsearch.adapters.ray.local's process side: which processes belong to a
run, the reaper and the watchdog. No Ray: stand-in processes (``sleep``) play the run's
processes. The real thing (a run's Ray, its sockets, a killed driver) is in
tests/test_e2e_netsec.py.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpsearch.adapters.ray.local import (
    MARK_ENV,
    RUN_ENV,
    is_loopback_address,
    reap,
    run_pids,
)

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(),
                                reason="needs Linux's /proc")


@pytest.mark.parametrize("address, expected", [
    ("127.0.0.1:6379", True),
    ("localhost:6379", True),
    ("[::1]:6379", True),
    ("10.0.0.5:6379", False),
    ("head:6379", False),
    ("127.0.0.2:6379", False),  # Ray's servers bind exactly 127.0.0.1 or every interface
    ("auto", False),
    ("local", False),
    (None, False),
    ("ray://127.0.0.1:10001", False),
])
def test_is_loopback_address(address, expected):
    assert is_loopback_address(address) is expected


#: The marks of the stand-in runs, unique to this session: reap() and the watchdog end
#: every process on the machine that carries the mark, so a fixed name would reach the
#: stand-ins of a concurrent session (another pytest worker, another checkout's tests).
RUN = {name: f"run-{name}-{os.getpid()}-{secrets.token_hex(4)}" for name in "abcdef"}


def _sleeper(mark: str | None = None, cwd: Path | None = None,
             write_to: Path | None = None) -> subprocess.Popen:
    """A stand-in for one of a run's processes: sleeps, optionally writing a file."""
    env = {k: v for k, v in os.environ.items() if k not in RUN_ENV}
    if mark is not None:
        env[MARK_ENV] = mark
    if write_to is None:
        return subprocess.Popen(["sleep", "60"], env=env, cwd=cwd)
    code = f"f = open({str(write_to)!r}, 'a'); import time; time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=cwd)
    deadline = time.monotonic() + 10
    while not write_to.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc


def _reader(path: Path) -> subprocess.Popen:
    """A user's ``tail -f`` of a log in the session folder: it must never be reaped."""
    env = {k: v for k, v in os.environ.items() if k not in RUN_ENV}
    proc = subprocess.Popen(["tail", "-f", str(path)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.2)
    return proc


@pytest.fixture
def procs():
    """Stand-in processes, each ended by pid after the test whatever happened."""
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.mark.slow
def test_run_pids_finds_the_marked_and_the_session_writers(tmp_path, procs):
    session = tmp_path / "session_1"
    (session / "logs").mkdir(parents=True)
    log = session / "logs" / "agent.out"
    marked = _sleeper(RUN["a"])
    writer = _sleeper(write_to=log)
    other_run = _sleeper(RUN["b"])
    unmarked = _sleeper()
    reader = _reader(log)
    procs += [marked, writer, other_run, unmarked, reader]

    assert set(run_pids(RUN["a"])) >= {marked.pid}
    assert writer.pid not in run_pids(RUN["a"])  # no session folder given: the mark only
    found = set(run_pids(RUN["a"], [str(session)]))
    assert {marked.pid, writer.pid} <= found
    assert not {other_run.pid, unmarked.pid, reader.pid} & found
    assert os.getpid() not in found
    assert marked.pid in run_pids(RUN["a"], [str(session) + "/"])  # trailing slash


@pytest.mark.slow
def test_reap_ends_the_run_and_spares_the_rest(tmp_path, procs):
    session = tmp_path / "session_2"
    session.mkdir()
    stubborn_code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                     f"f = open({str(session / 'x.log')!r}, 'a'); time.sleep(60)")
    env = {k: v for k, v in os.environ.items() if k not in RUN_ENV}
    stubborn = subprocess.Popen([sys.executable, "-c", stubborn_code], env=env)
    while not (session / "x.log").exists():
        time.sleep(0.02)
    marked = _sleeper(RUN["c"])
    spared = _sleeper(RUN["c"])
    bystander = _sleeper(RUN["d"])
    procs += [stubborn, marked, spared, bystander]

    started = time.monotonic()
    signalled = reap(RUN["c"], [str(session)], spare=(spared.pid,), grace_s=0.5)
    elapsed = time.monotonic() - started

    assert set(signalled) == {stubborn.pid, marked.pid}
    assert marked.wait(timeout=5) == -signal.SIGTERM
    assert stubborn.wait(timeout=5) == -signal.SIGKILL  # it ignored SIGTERM
    assert spared.poll() is None and bystander.poll() is None
    assert elapsed < 5
    assert reap(RUN["c"], [str(session)], spare=(spared.pid,), grace_s=0.5) == []


def _watchdog(mark: str, secrets_dir: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in RUN_ENV}
    return subprocess.Popen(
        [sys.executable, "-c", "from hpsearch.adapters.ray.local import watch; watch()",
         mark, str(secrets_dir)],
        stdin=subprocess.PIPE, env=env)


@pytest.mark.slow
def test_the_watchdog_waits_for_its_pipe_then_ends_the_run(tmp_path, procs):
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir(mode=0o700)
    (secrets_dir / "auth_token").write_text("x")
    session = tmp_path / "session_3"
    session.mkdir()
    writer = _sleeper(write_to=session / "raylet.out")
    marked = _sleeper(RUN["e"])
    bystander = _sleeper()
    watchdog = _watchdog(RUN["e"], secrets_dir)
    procs += [writer, marked, bystander, watchdog]
    watchdog.stdin.write(f"session {session}\n".encode())
    watchdog.stdin.flush()

    time.sleep(0.5)
    watchdog.send_signal(signal.SIGINT)  # Ctrl-C in the terminal: the driver decides
    time.sleep(0.5)
    assert watchdog.poll() is None and marked.poll() is None and writer.poll() is None
    assert secrets_dir.exists()

    watchdog.stdin.close()  # what the kernel does when the driver dies
    assert watchdog.wait(timeout=10) == 0
    assert marked.wait(timeout=5) is not None and writer.wait(timeout=5) is not None
    assert bystander.poll() is None
    assert not secrets_dir.exists()


@pytest.mark.slow
def test_a_sigkilled_parent_sets_the_watchdog_off(tmp_path, procs):
    """The watchdog's pipe belongs to a 'driver' that dies by SIGKILL."""
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir(mode=0o700)
    marked = _sleeper(RUN["f"])
    procs.append(marked)
    driver_code = (
        "import subprocess, sys, time\n"
        "w = subprocess.Popen([sys.executable, '-c', "
        "'from hpsearch.adapters.ray.local import watch; watch()', "
        f"{RUN['f']!r}, {str(secrets_dir)!r}], stdin=subprocess.PIPE)\n"
        "print(w.pid, flush=True)\n"
        "time.sleep(60)\n")
    env = {k: v for k, v in os.environ.items() if k not in RUN_ENV}
    driver = subprocess.Popen([sys.executable, "-c", driver_code], env=env,
                              stdout=subprocess.PIPE, text=True)
    procs.append(driver)
    assert int(driver.stdout.readline()) > 0  # the watchdog runs
    time.sleep(0.5)
    assert marked.poll() is None

    driver.kill()
    driver.wait()
    started = time.monotonic()
    assert marked.wait(timeout=10) == -signal.SIGTERM
    assert time.monotonic() - started < 5
    deadline = time.monotonic() + 10
    while secrets_dir.exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # the watchdog deletes the token's folder last
    assert not secrets_dir.exists()


def test_join_failures_are_one_line_with_the_token_hint(monkeypatch):
    from ray.exceptions import AuthenticationError

    from hpsearch.adapters.ray.local import join_failure, start_failure

    refused = ConnectionError("Failed to connect to Ray cluster at h:6379\nTraceback ...")
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    line = join_failure(refused)
    assert line == ("cannot reach the Ray cluster: Failed to connect to Ray cluster at "
                    "h:6379; if it uses token authentication, set RAY_AUTH_MODE=token and "
                    "give the head's token in RAY_AUTH_TOKEN_PATH (or ~/.ray/auth_token)")
    # With the token mode on, a failed connection is just that.
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert join_failure(refused) == ("cannot reach the Ray cluster: Failed to connect to "
                                     "Ray cluster at h:6379")
    assert join_failure(ValueError("Invalid address format: x")) == (
        "cannot reach the Ray cluster: Invalid address format: x")
    wrong = join_failure(AuthenticationError("Authentication token is missing or incorrect."
                                             "\nlong explanation"))
    assert wrong.startswith("the Ray cluster refused this process's token: set "
                            "RAY_AUTH_MODE=token") and "\n" not in wrong
    assert start_failure(RuntimeError("")) == "cannot start a local Ray: RuntimeError"
