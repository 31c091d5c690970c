"""tests/conftest.py's SessionWatchdog: what a killed pytest's tests started ends too.

A pytest process of its own runs one slow test that starts a process in a session of
its own (as the multi-node tests start ``ray start --block``) and then waits; that
pytest is SIGKILLed, so no teardown runs. The process it left must end anyway.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from .conftest import REPO

pytestmark = pytest.mark.slow

LEAVES_A_PROCESS = '''
import os, subprocess, time
import pytest

@pytest.mark.slow
def test_starts_a_cluster_and_hangs():
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    with open(os.environ["PID_FILE"] + ".tmp", "w") as fh:
        fh.write(str(child.pid))
    os.rename(os.environ["PID_FILE"] + ".tmp", os.environ["PID_FILE"])
    time.sleep(300)
'''


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_killed_pytest_leaves_no_process_its_tests_started(tmp_path):
    (tmp_path / "test_leaves.py").write_text(LEAVES_A_PROCESS)
    pid_file = tmp_path / "child.pid"
    env = dict(os.environ, PID_FILE=str(pid_file),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO),
                                                        os.environ.get("PYTHONPATH")])))
    inner = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p",
         "no:cacheprovider", "test_leaves.py"], cwd=tmp_path, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    child = None
    try:
        deadline = time.monotonic() + 120
        while not pid_file.exists():
            assert inner.poll() is None, inner.stdout.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the inner test never started its process"
            time.sleep(0.1)
        child = int(pid_file.read_text())
        assert running(child)
        inner.send_signal(signal.SIGKILL)  # no teardown, no finally
        inner.wait(timeout=30)
        deadline = time.monotonic() + 30  # the watchdog's SIGTERM, then SIGKILL after 5 s
        while running(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not running(child), "the killed pytest's process is still running"
    finally:
        if inner.poll() is None:
            inner.kill()
        if child is not None and running(child):
            os.kill(child, signal.SIGKILL)
