"""A run's own Ray, reachable by nobody but its user, and gone when its driver is.

What Ray 2.60 does by itself (measured with ``ss -ltnp`` during a plain
``ray.init(include_dashboard=False)``): the GCS, the raylet (node manager and object
manager), the driver's and every worker's core-worker server listen on ``*`` (every
interface) and the runtime-env agent on the machine's address. ``ray.init`` rewrites
``_node_ip_address="127.0.0.1"`` to the machine's address before it starts anything, so
that argument alone changes nothing; Ray's C++ servers bind 127.0.0.1 only when the node's
address is exactly ``127.0.0.1``, which ``ray.init`` leaves alone only where Ray thinks
multi-node clusters are off (``ray._private.ray_constants.ENABLE_RAY_CLUSTER``, read from
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` when Ray is imported). A new local ``ray.init``
also turns on token authentication unless ``RAY_AUTH_MODE`` says otherwise, with a token
it writes to ``~/.ray/auth_token`` (mode 0644, shared by every cluster of the user, kept
forever), and leaves ``RAY_AUTH_MODE=token`` in the caller's environment.

:class:`LocalRay` therefore starts a local run's Ray with both protections:

- **Loopback only.** ``ray.init(address="local", _node_ip_address="127.0.0.1")`` with Ray's
  cluster switch off for the length of the call: the GCS, raylet, workers, driver and
  runtime-env agent listen on 127.0.0.1 only. ``address="local"`` also means a local run
  never joins a cluster it happens to find (``RAY_ADDRESS``, a ``ray start`` of the user's,
  a dying cluster of a killed driver).
- **Token authentication**, so that another local user cannot drive the cluster either:
  a random 256-bit token for this run only, in a file of mode 0600 inside a folder of mode
  0700, given to Ray's processes through ``RAY_AUTH_MODE=token`` and
  ``RAY_AUTH_TOKEN_PATH`` (never the token itself, never printed). A gRPC call without
  it is answered ``UNAUTHENTICATED``.

A watchdog process (:func:`watch`) holds the read end of a pipe from the driver. When the
driver ends, however it ends (``SIGKILL`` included), the pipe closes and the watchdog ends
every process of the run (those that carry the run's mark in their environment or write
into its Ray session folder), then deletes the token.
Without it Ray's dashboard and runtime-env agents outlive a killed driver by about a
minute: they try to tell the dead GCS that the raylet died, with a 60 s timeout that Ray
hard-codes.

Joining an existing cluster (:func:`connect`) is the user's choice and uses the user's
credentials (``RAY_AUTH_MODE=token`` and the cluster's token); it only keeps a loopback
address from being rewritten into the machine's address.

Every environment variable set here is restored when the cluster stops.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hpsearch.adapters import procstat

#: Carried by every process of one local run's Ray: how the watchdog finds them.
MARK_ENV = "HPSEARCH_RAY_RUN"
#: Ray 2.60's token authentication switch (``token`` or ``disabled``).
AUTH_MODE_ENV = "RAY_AUTH_MODE"
#: A file that holds the token; Ray's processes read it when they start.
AUTH_TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
#: The token itself; Ray prefers it to the file, so a run hides it while it lasts.
AUTH_TOKEN_ENV = "RAY_AUTH_TOKEN"
#: The environment a local run sets (and restores).
RUN_ENV = (MARK_ENV, AUTH_MODE_ENV, AUTH_TOKEN_PATH_ENV, AUTH_TOKEN_ENV)

LOOPBACK = "127.0.0.1"
_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})

#: Seconds between the watchdog's SIGTERM and its SIGKILL.
TERM_GRACE_S = 1.0
#: Seconds a clean stop waits for the watchdog to finish.
WATCHDOG_WAIT_S = 10.0
#: What Ray 2.60's failure says when its raylet did not register in time (see
#: :meth:`LocalRay.start`).
STARTUP_TIMEOUT = "timed out during startup"


def is_loopback_address(address: str | None) -> bool:
    """Whether a Ray address (``host:port``) names this machine's loopback interface.

    ``auto``, ``local``, ``None`` and ``ray://`` URLs are not loopback addresses.
    """
    if not address or "://" in address or ":" not in address:
        return False
    host = address.rsplit(":", 1)[0]
    return host in _LOOPBACK_HOSTS


# ---------------------------------------------------------------- processes of a run


def _writes_under(pid_dir: Path, folders: tuple[str, ...]) -> bool:
    """Whether the process holds a file below one of ``folders`` open for writing."""
    try:
        fds = list((pid_dir / "fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if not target.startswith(folders):
            continue
        try:
            info = (pid_dir / "fdinfo" / fd.name).read_text()
            flags = int(info.split("flags:", 1)[1].split()[0], 8)
        except (OSError, IndexError, ValueError):
            continue
        if flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR):
            return True
    return False


def run_pids(mark: str, session_dirs: list[str] | tuple[str, ...] = (),
             proc: Path = Path("/proc")) -> list[int]:
    """Processes of this user that belong to the run ``mark``.

    A process belongs to it when its environment holds ``HPSEARCH_RAY_RUN=<mark>``, or
    when it holds a file in one of the run's Ray session folders open for writing (every
    Ray process writes its logs there). The second test is needed because Ray's agents
    rename themselves (``ray::DashboardAgent``), which wipes part of what
    ``/proc/PID/environ`` shows. ``/proc/PID/environ`` is the environment a process
    started with, so the driver, which set the mark in its own ``os.environ``, carries
    none; it holds the session's files open though, so the caller excludes it by pid.
    Processes that vanish or cannot be read are skipped.
    """
    needle = f"{MARK_ENV}={mark}".encode()
    folders = tuple(os.path.realpath(d).rstrip("/") + "/" for d in session_dirs)
    uid = os.getuid()
    found = []
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") or (folders and _writes_under(entry, folders)):
            found.append(int(entry.name))
    return sorted(found)


def reap(mark: str, session_dirs: list[str] | tuple[str, ...] = (),
         spare: tuple[int, ...] = (), grace_s: float = TERM_GRACE_S) -> list[int]:
    """End every process of the run ``mark``: SIGTERM, then SIGKILL after ``grace_s``.

    Args:
        mark: The run's ``HPSEARCH_RAY_RUN`` value.
        session_dirs: The run's Ray session folders (see :func:`run_pids`).
        spare: Pids never signalled (the caller, the driver).
        grace_s: Seconds between SIGTERM and SIGKILL.

    Returns:
        The pids that were sent SIGTERM (empty when nothing of the run was left).
    """
    spare = set(spare) | {os.getpid()}

    def targets() -> list[int]:
        return [p for p in run_pids(mark, session_dirs) if p not in spare]

    pids = targets()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(procstat.running(p) for p in pids):
        time.sleep(0.05)
    # A process started while the others were being terminated is caught here too.
    for pid in sorted(set(pids) | set(targets())):
        if procstat.running(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    return pids


def watch(argv: list[str] | None = None) -> None:
    """The watchdog's body: wait for the driver to go, then end the run's processes.

    ``argv`` is ``[mark, secrets_dir]``. Reads standard input, a pipe whose other end
    only the driver holds, until end of file: the driver closed it (a clean stop) or died
    (any signal, SIGKILL included). Lines ``session PATH`` on it name the run's Ray
    session folders. Then :func:`reap` ends what is left of the run (never the driver)
    and ``secrets_dir`` (the token's folder) is deleted. Ctrl-C in the terminal is
    ignored: the driver decides when the run ends.
    """
    mark, secrets_dir = (sys.argv[1:] if argv is None else argv)[:2]
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    driver = os.getppid()
    received = b""
    try:
        while chunk := os.read(0, 4096):
            received += chunk
    except OSError:
        pass
    sessions = [line[len("session "):] for line in received.decode(errors="replace").splitlines()
                if line.startswith("session ")]
    try:
        reap(mark, sessions, spare=(driver,) if driver != 1 else ())
    finally:
        shutil.rmtree(secrets_dir, ignore_errors=True)


class _Watchdog:
    """The driver's side of :func:`watch`: a child process and the pipe to it."""

    def __init__(self, mark: str, secrets_dir: str):
        package_root = str(Path(__file__).resolve().parents[2])
        code = ("import sys; sys.path.insert(0, sys.argv.pop(1)); "
                "from hpsearch.adapters.ray.local import watch; watch()")
        env = {k: v for k, v in os.environ.items() if k not in RUN_ENV}
        # Its own session: a terminal's SIGHUP or Ctrl-C must not end it before the
        # driver; only the pipe's end does.
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, package_root, mark, secrets_dir],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env=env, start_new_session=True, close_fds=True)

    def tell_session(self, session_dir: str) -> None:
        """Name the run's Ray session folder to the watchdog."""
        self.proc.stdin.write(f"session {session_dir}\n".encode())
        self.proc.stdin.flush()

    def close(self, wait_s: float = WATCHDOG_WAIT_S) -> None:
        """Close the pipe (the watchdog then reaps and exits) and wait for it."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ---------------------------------------------------------------- Ray


class _ClusterSwitchOff:
    """Ray's multi-node switch off while ``ray.init`` resolves addresses.

    With it on (Linux's default), ``ray.init`` replaces 127.0.0.1 by the machine's
    address; off, it keeps 127.0.0.1, and Ray's servers then bind loopback only. Ray
    reads the switch only while it resolves addresses, so it is restored right after.
    """

    def __enter__(self):
        from ray._private import ray_constants  # the only switch Ray 2.60 has for it

        self.constants = ray_constants
        self.saved = ray_constants.ENABLE_RAY_CLUSTER
        ray_constants.ENABLE_RAY_CLUSTER = False
        return self

    def __exit__(self, *exc_info) -> None:
        self.constants.ENABLE_RAY_CLUSTER = self.saved


def _reload_ray_auth() -> None:
    """Make this process's Ray read ``RAY_AUTH_*`` again (it caches both)."""
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


class _Environment:
    """Sets environment variables and puts back exactly what was there before."""

    def __init__(self, names: tuple[str, ...]):
        self.saved = {name: os.environ.get(name) for name in names}

    def restore(self) -> None:
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class LocalRay:
    """A Ray started for one run on this machine: loopback, token, watchdog.

    Use as a context manager, or :meth:`start` and :meth:`stop` (a fixture). ``ray``
    must not be initialised in this process yet.

    Args:
        **init_kwargs: Passed to ``ray.init`` (``num_cpus``, ``include_dashboard``,
            ``logging_level``, ...); ``address`` and ``_node_ip_address`` are set here.

    Attributes:
        address: The GCS address (``127.0.0.1:PORT``) once started: what another process
            of this user passes as ``cluster.address`` to join this cluster (it inherits
            the token's environment from this process while the cluster runs).
    """

    def __init__(self, **init_kwargs: Any):
        for key in ("address", "_node_ip_address"):
            if key in init_kwargs:
                raise TypeError(f"LocalRay sets {key} itself")
        self.init_kwargs = init_kwargs
        self.address: str | None = None
        self._env: _Environment | None = None
        self._watchdog: _Watchdog | None = None
        self._secrets_dir: str | None = None

    def start(self) -> "LocalRay":
        """Write the token, start the watchdog, set the environment, ``ray.init``.

        Ray 2.60 waits a fixed 30 s for its raylet to register with its GCS and then
        fails ("The current node timed out during startup"); on a machine whose cores
        are busy (seen once in CI, three test workers on two cores) that is not enough.
        Such a start is ended like any failed one (the watchdog ends what it started)
        and made once more, with a new token and a new watchdog.

        Raises:
            RuntimeError: Ray is already initialised in this process, or the second
                start timed out too (one line, not Ray's bare ``Exception``).
        """
        for attempt in (1, 2):
            try:
                return self._start()
            except Exception as exc:  # Ray raises a bare Exception for it
                if STARTUP_TIMEOUT not in str(exc):
                    raise
        raise RuntimeError(
            f"Ray's node {STARTUP_TIMEOUT} on both of {attempt} tries (Ray waits 30 s for "
            "its raylet each time); are this machine's cores busy with other work?"
        ) from None

    def _start(self) -> "LocalRay":
        import ray

        if ray.is_initialized():
            raise RuntimeError("ray is already initialised in this process")
        mark = secrets.token_hex(16)
        self._env = _Environment(RUN_ENV)
        try:
            self._secrets_dir = tempfile.mkdtemp(prefix="hpsearch-ray-")  # mode 0700
            token_path = Path(self._secrets_dir) / "auth_token"
            fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
            self._watchdog = _Watchdog(mark, self._secrets_dir)
            os.environ[MARK_ENV] = mark
            os.environ[AUTH_MODE_ENV] = "token"
            os.environ[AUTH_TOKEN_PATH_ENV] = str(token_path)
            os.environ.pop(AUTH_TOKEN_ENV, None)
            _reload_ray_auth()
            with _ClusterSwitchOff():
                context = ray.init(address="local", _node_ip_address=LOOPBACK,
                                   **self.init_kwargs)
            self.address = context.address_info["gcs_address"]
            self._watchdog.tell_session(context.address_info["session_dir"])
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """``ray.shutdown``, end what is left of the run, restore the environment.

        Safe to call twice, and after a failed :meth:`start`.
        """
        import ray

        try:
            if ray.is_initialized():
                ray.shutdown()
        finally:
            try:
                if self._watchdog is not None:
                    self._watchdog.close()
                    self._watchdog = None
            finally:
                if self._env is not None:
                    self._env.restore()
                    self._env = None
                    _reload_ray_auth()
                if self._secrets_dir is not None:
                    shutil.rmtree(self._secrets_dir, ignore_errors=True)
                    self._secrets_dir = None

    def __enter__(self) -> "LocalRay":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


def connect(address: str, **init_kwargs: Any) -> None:
    """Join the running Ray cluster at ``address`` (``auto`` or ``host:port``).

    Authentication is the cluster's: with token authentication on (``ray start --head``
    does it whenever a token exists), this process needs ``RAY_AUTH_MODE=token`` and the
    cluster's token (``RAY_AUTH_TOKEN_PATH``, ``RAY_AUTH_TOKEN`` or ``~/.ray/auth_token``).
    A loopback address (a cluster bound to 127.0.0.1, e.g. another run's
    :class:`LocalRay`) is used as given instead of being rewritten into the machine's
    address, where such a cluster does not listen.

    Raises:
        ConnectionError, RuntimeError, ValueError: From ``ray.init``.
        ray.exceptions.AuthenticationError: The cluster refused this process's token
            (or its lack of one).
    """
    import ray

    if is_loopback_address(address):
        with _ClusterSwitchOff():
            ray.init(address=address, **init_kwargs)
    else:
        ray.init(address=address, **init_kwargs)


#: What a process needs to join a cluster that has token authentication on.
TOKEN_HINT = ("set RAY_AUTH_MODE=token and give the head's token in RAY_AUTH_TOKEN_PATH "
              "(or ~/.ray/auth_token)")


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def start_failure(exc: BaseException) -> str:
    """One line on why :meth:`LocalRay.start` failed."""
    return f"cannot start a local Ray: {_first_line(exc)}"


def join_failure(exc: BaseException) -> str:
    """One line on why :func:`connect` failed, for a ``cluster.address`` error.

    Ray's own messages run to paragraphs. A cluster with token authentication answers a
    process without ``RAY_AUTH_MODE=token`` with a plain connection failure, so that
    failure carries the hint too.
    """
    import ray

    if isinstance(exc, ray.exceptions.AuthenticationError):
        return f"the Ray cluster refused this process's token: {TOKEN_HINT}"
    reason = f"cannot reach the Ray cluster: {_first_line(exc)}"
    if isinstance(exc, ConnectionError) and os.environ.get(AUTH_MODE_ENV) != "token":
        reason += f"; if it uses token authentication, {TOKEN_HINT}"
    return reason
