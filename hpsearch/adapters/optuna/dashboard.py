"""``python -m hpsearch dashboard``: optuna-dashboard on a run's storage, until Ctrl-C.

optuna-dashboard runs as a child process (its command-line script next to the Python
interpreter, else on the PATH, else its module through this interpreter). hpsearch
waits until it accepts connections, prints the URL, and stops it on Ctrl-C (or SIGTERM).
"""

from __future__ import annotations

import collections
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from hpsearch.errors import ConfigError, HpsearchError

_MODULE_MAIN = "import sys; from optuna_dashboard._cli import main; sys.exit(main())"


def command(storage_url: str, host: str, port: int) -> list[str]:
    """The optuna-dashboard command line serving ``storage_url`` on ``host:port``."""
    script = Path(sys.executable).parent / "optuna-dashboard"
    if script.is_file():
        base = [str(script)]
    elif shutil.which("optuna-dashboard"):
        base = [shutil.which("optuna-dashboard")]
    else:
        base = [sys.executable, "-c", _MODULE_MAIN]
    return [*base, storage_url, "--host", host, "--port", str(port)]


def check_port(host: str, port: int) -> None:
    """ConfigError if ``port`` is out of range or already taken on ``host``."""
    if not 1 <= port <= 65535:
        raise ConfigError("--port", "must be between 1 and 65535", port)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # Servers set SO_REUSEADDR, so a port only in TIME_WAIT is free for them too.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise ConfigError("--port", f"cannot listen on {host} ({exc.strerror})",
                              port) from None


def _connectable(host: str, port: int) -> bool:
    target = "127.0.0.1" if host in ("0.0.0.0", "") else host
    try:
        with socket.create_connection((target, port), timeout=0.5):
            return True
    except OSError:
        return False


class _Terminate(Exception):
    pass


def _raise_terminate(signum, frame):  # noqa: ARG001 - a signal handler's signature
    raise _Terminate()


def serve(storage_url: str, host: str, port: int, out: Callable[[str], None] = print,
          ready_timeout_s: float = 60.0) -> int:
    """Run optuna-dashboard on ``storage_url`` until Ctrl-C; return the exit code.

    Returns 0 after Ctrl-C or SIGTERM (the dashboard is stopped with it).

    Raises:
        ConfigError: the port is taken or invalid.
        HpsearchError: the dashboard exited on its own (its last log line is quoted).
    """
    check_port(host, port)
    proc = subprocess.Popen(command(storage_url, host, port), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    # The dashboard logs every request to stderr: keep only the tail, for errors.
    tail: collections.deque[str] = collections.deque(maxlen=20)
    reader = threading.Thread(target=lambda: tail.extend(proc.stderr), daemon=True)
    reader.start()
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _raise_terminate)
    try:
        deadline = time.monotonic() + ready_timeout_s
        while not _connectable(host, port):
            if proc.poll() is not None:
                break
            if time.monotonic() > deadline:
                raise HpsearchError(f"optuna-dashboard did not listen on {host}:{port} "
                                    f"within {ready_timeout_s:g} s")
            time.sleep(0.1)
        if proc.poll() is None:
            out(f"Dashboard: http://{host}:{port}/dashboard/ (storage {storage_url}); "
                f"press Ctrl-C to stop")
            proc.wait()
        reader.join(timeout=2)
        last = next((line.strip() for line in reversed(tail) if line.strip()), "no output")
        raise HpsearchError(f"optuna-dashboard exited with code {proc.returncode}: {last}")
    except (KeyboardInterrupt, _Terminate):
        out("Dashboard stopped.")
        return 0
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
