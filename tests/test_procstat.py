"""hpsearch.adapters.procstat: whether a recorded process still runs (Linux /proc)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpsearch.adapters import procstat

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="Linux /proc")


def never_a_pid() -> int:
    with open("/proc/sys/kernel/pid_max", encoding="ascii") as fh:
        return int(fh.read()) + 1


def test_this_process_runs_and_has_a_start_time():
    assert procstat.running(os.getpid())
    started = procstat.start_time(os.getpid())
    assert started is not None and started.isdigit()
    assert procstat.start_time(os.getpid()) == started  # stable: it names this process
    assert procstat.same_process(os.getpid(), started)
    assert not procstat.same_process(os.getpid(), "0")  # another process with this pid


def test_a_missing_process_neither_runs_nor_started():
    assert not procstat.running(never_a_pid())
    assert procstat.start_time(never_a_pid()) is None
    assert procstat.fields(never_a_pid()) is None
    assert not procstat.same_process(never_a_pid(), "12345")


@pytest.mark.slow  # a child process
def test_a_zombie_has_ended_but_still_has_its_start_time():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while procstat.running(child.pid) and time.monotonic() < deadline:
        time.sleep(0.02)  # exited, not yet reaped: a zombie
    try:
        assert procstat.fields(child.pid)[procstat.STATE] == "Z"
        assert not procstat.running(child.pid)
        assert procstat.start_time(child.pid) is not None
        assert not procstat.same_process(child.pid, procstat.start_time(child.pid))
    finally:
        child.wait()
    assert procstat.fields(child.pid) is None  # reaped: gone


@pytest.mark.slow  # a child process
def test_a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields(tmp_path):
    odd = tmp_path / "a) b (c"
    odd.symlink_to(sys.executable)
    child = subprocess.Popen([str(odd), "-c", "import time; time.sleep(30)"])
    try:
        found = procstat.fields(child.pid)
        with open(f"/proc/{child.pid}/comm", encoding="ascii") as fh:
            assert ")" in fh.read()  # the kernel keeps the odd name
        assert found[procstat.STATE] in "RSD"
        assert found[procstat.START_TIME] == procstat.start_time(child.pid)
        assert int(found[procstat.START_TIME]) >= int(procstat.start_time(os.getpid()))
    finally:
        child.kill()
        child.wait()
