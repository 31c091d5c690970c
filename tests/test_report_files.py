"""Report files are written atomically: a failed write (a full disk, a writer that dies
midway) leaves the previous report, or nothing, and one line naming the file and the
cause; never a truncated file, never a temporary file left behind.

The full-disk tests mount a real 64 KiB tmpfs, which needs root (CI runs as root).
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from hpsearch.report import report, writers
from hpsearch.report.writers import ReportWriteError

from .test_report import HAND, cli, make_study, study_info


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file in ``folder`` (hidden ones too) with its bytes."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.fixture
def tiny_disk(tmp_path):
    """A real tmpfs of 64 KiB mounted on a fresh folder; unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.fail("this test mounts a tmpfs and needs root (CI runs the suite as root)")
    folder = tmp_path / "tiny"
    folder.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, f"cannot mount a tmpfs: {proc.stderr.strip()}"
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True, timeout=30, check=True)


def test_atomic_write_replaces_a_file_whole(tmp_path):
    path = tmp_path / "report.md"
    writers.atomic_write(path, ["old ", "text\n"])
    assert path.read_text() == "old text\n"
    writers.atomic_write(path, ["new\n"])
    assert path.read_text() == "new\n"
    assert sorted(os.listdir(tmp_path)) == ["report.md"]
    # A new file gets the permissions any new file gets (not the 0600 of a temp file).
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


@pytest.mark.parametrize("failure", [OSError(errno.ENOSPC, "No space left on device"),
                                     OSError(errno.EACCES, "Permission denied"),
                                     RuntimeError("plotly broke")],
                         ids=["disk-full", "denied", "renderer-bug"])
def test_a_writer_that_fails_midway_leaves_the_previous_file(tmp_path, failure):
    path = tmp_path / "report.html"
    path.write_text("<html>the previous report</html>\n")

    def chunks():
        yield "<html>half of a new rep"
        raise failure

    if isinstance(failure, OSError):
        with pytest.raises(ReportWriteError) as caught:
            writers.atomic_write(path, chunks())
        message = str(caught.value)
        assert "\n" not in message and str(path) in message
        if failure.errno == errno.ENOSPC:
            assert message.startswith(f"disk full at {path}")
        else:
            assert message.startswith(f"cannot write {path}: Permission denied")
    else:
        with pytest.raises(RuntimeError, match="plotly broke"):
            writers.atomic_write(path, chunks())
    assert snapshot(tmp_path) == {"report.html": b"<html>the previous report</html>\n"}


def test_write_replaces_no_file_unless_every_format_was_written(tmp_path, monkeypatch):
    built = report.build(HAND, study_info())
    out = tmp_path / "out"
    writers.write(built, out, ["csv", "json", "md"])
    before = snapshot(out)

    def broken(report_obj, version):
        yield "<!DOCTYPE html>"
        raise OSError(errno.ENOSPC, "No space left on device")

    # The HTML renderer fails after the CSV was staged: neither file is replaced.
    monkeypatch.setitem(writers.RENDERERS, "html", broken)
    with pytest.raises(ReportWriteError, match=f"^disk full at {out / 'report.html'}"):
        writers.write(built, out, ["csv", "html", "json"])
    assert snapshot(out) == before


@pytest.mark.slow
def test_a_full_disk_leaves_the_previous_report_and_says_so(tiny_disk):
    built = report.build(HAND, study_info())
    writers.write(built, tiny_disk, ["csv", "json", "md"])  # small: they fit
    before = snapshot(tiny_disk)
    # The HTML (plotly inlined, megabytes) cannot fit in 64 KiB.
    with pytest.raises(ReportWriteError) as caught:
        writers.write(built, tiny_disk)
    assert str(caught.value) == (f"disk full at {tiny_disk / 'report.html'}; the report "
                                 f"files already there are unchanged")
    assert snapshot(tiny_disk) == before  # no report.html, no temporary file
    # Nothing before: nothing after.
    for name in before:
        (tiny_disk / name).unlink()
    with pytest.raises(ReportWriteError, match="disk full at"):
        writers.write_html(built, tiny_disk / "report.html")
    assert os.listdir(tiny_disk) == []


@pytest.mark.slow
def test_cli_report_on_a_full_disk_is_one_line_and_keeps_the_old_files(tmp_path, tiny_disk):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    make_study(f"sqlite:///{run_dir / 'optuna.db'}", "full", running=False)
    proc = cli("report", str(run_dir), "--format", "md", "--out", str(tiny_disk),
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    before = snapshot(tiny_disk)
    proc = cli("report", str(run_dir), "--out", str(tiny_disk), cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout == "", (proc.stdout, proc.stderr)
    (line,) = proc.stderr.splitlines()
    assert line == (f"hpsearch: error: disk full at {tiny_disk / 'report.html'}; the "
                    f"report files already there are unchanged")
    assert snapshot(tiny_disk) == before


@pytest.mark.slow
def test_cli_report_into_a_folder_it_cannot_create(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    make_study(f"sqlite:///{run_dir / 'optuna.db'}", "one", running=False)
    (tmp_path / "file").write_text("not a folder")
    proc = cli("report", str(run_dir), "--out", "file/out", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("hpsearch: error: cannot write file/out: Not a directory")


@pytest.mark.slow
def test_write_study_report_is_atomic_too(tmp_path, tiny_disk):
    study = make_study(f"sqlite:///{tmp_path / 'x.db'}", "x", running=False)
    from hpsearch.adapters.optuna.results import write_study_report

    with pytest.raises(ReportWriteError, match="^disk full at "):
        write_study_report(study, tiny_disk, ["html"])
    assert os.listdir(tiny_disk) == []
