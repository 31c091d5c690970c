"""A run's network exposure, end to end: real ``python -m hpsearch`` processes, real Ray.

- Every listening TCP socket of a run's process tree is on loopback, and each refuses a
  call without the run's token (gRPC ``UNAUTHENTICATED``, HTTP 401); the token is in a
  0600 file, in no output or log, and gone with the run.
- A SIGKILLed driver's Ray processes end within seconds (Ray's agents alone linger about a
  minute), and ``resume`` right after it, with the dying cluster named as Ray's current
  one, starts a Ray of its own and completes every trial.
- docs/clusters.md's cluster steps with Ray 2.60's token authentication (``ray start
  --head``, a worker given the head's token, ``hpsearch run --set cluster.address=auto``),
  in a network namespace of the test's own so that no address but loopback exists.

Only 127.0.0.1 is ever connected to.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from hpsearch.adapters.ray.local import MARK_ENV, RUN_ENV

from .conftest import REPO, SessionWatchdog
from .test_e2e import spec

pytestmark = pytest.mark.slow

#: One method of each gRPC service a Ray process serves; a server answers UNIMPLEMENTED
#: for the others, and UNAUTHENTICATED (or OK, without authentication) for its own.
GRPC_PROBES = (
    "/ray.rpc.NodeInfoGcsService/GetAllNodeInfo",      # GCS
    "/ray.rpc.NodeManagerService/GetNodeStats",        # raylet: node manager
    "/ray.rpc.ObjectManagerService/Pull",              # raylet: object manager
    "/ray.rpc.CoreWorkerService/GetCoreWorkerStats",   # driver and workers
)
REFUSED = "refused"
GONE = "gone"  # the socket closed before it could be probed (a worker that ended)
LOOPBACK = ("127.0.0.1", "::1", "::ffff:127.0.0.1")


def _finished_and_running(db: Path) -> tuple[int, list[int]]:
    """Complete trials and the numbers of running ones (read-only; any moment)."""
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as con:
            rows = con.execute("SELECT number, state FROM trials").fetchall()
    except sqlite3.OperationalError:  # the study's tables are not created yet
        return 0, []
    return (sum(1 for _, state in rows if state == "COMPLETE"),
            [n for n, state in rows if state == "RUNNING"])


@pytest.fixture
def ray_tmp():
    """A RAY_TMPDIR of the test's own: Ray's sessions, logs and ray_current_cluster.

    Short, under /tmp: Ray's Unix sockets live there and a socket's path has at most
    107 bytes (pytest's tmp_path is too long).
    """
    path = Path(tempfile.mkdtemp(prefix="hps-ray-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without the test session's own Ray token and mark (but with
    the mark of the pytest process, so its watchdog ends what a killed test leaves)."""
    env = {k: v for k, v in os.environ.items() if k not in RUN_ENV}
    if SessionWatchdog.mark is not None:
        env[MARK_ENV] = SessionWatchdog.mark
    env.update(PYTHONPATH=str(REPO), RAY_USAGE_STATS_ENABLED="0", **extra)
    return env


def _listening(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def probe(port: int, again: bool = True) -> str:
    """Call the server on 127.0.0.1:``port`` without a token: how did it answer?

    A worker that is ending unregisters its services before it closes its socket: for
    that moment every method answers UNIMPLEMENTED, its own included, and nothing can be
    called; a call that reaches it as its server shuts down is CANCELLED. Such an answer
    is checked again a second later: gone by then, it was a worker ending; still there,
    the second answer is the one reported.

    Returns:
        ``refused`` (gRPC UNAUTHENTICATED, or HTTP 401 from a plain HTTP server),
        ``gone`` (nothing listens there any more), or what it answered instead.
    """
    import grpc

    codes = []
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        for method in GRPC_PROBES:
            call = channel.unary_unary(method)
            try:
                call(b"", timeout=10)
            except grpc.RpcError as exc:
                codes.append(exc.code())
                continue
            return f"{method} answered OK without a token"
    if grpc.StatusCode.UNAUTHENTICATED in codes:
        return REFUSED
    ending = {grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.CANCELLED}
    if again and ending & set(codes) and set(codes) <= ending | {grpc.StatusCode.UNAVAILABLE}:
        time.sleep(1.0)
        return probe(port, again=False) if _listening(port) else GONE
    if set(codes) != {grpc.StatusCode.UNAVAILABLE}:
        return f"gRPC answers {sorted(c.name for c in codes)}"
    # Not gRPC: Ray's runtime-env agent speaks plain HTTP.
    request = urllib.request.Request(f"http://127.0.0.1:{port}/get_runtime_envs_info",
                                     data=b"", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return f"HTTP {response.status} without a token"
    except urllib.error.HTTPError as exc:
        return REFUSED if exc.code == 401 else f"HTTP {exc.code}"
    except OSError:
        return GONE


class SocketWatch:
    """Lists the listening TCP sockets of a process tree while it runs; probes each once.

    Attributes:
        seen: ``(ip, port, process name) -> probe result`` for every socket seen.
        token_paths: ``RAY_AUTH_TOKEN_PATH`` values found in the tree's environments.
    """

    def __init__(self, root_pid: int, interval_s: float = 0.3):
        self.root_pid = root_pid
        self.interval_s = interval_s
        self.seen: dict[tuple[str, int, str], str] = {}
        self.token_paths: set[str] = set()
        self.tokens: dict[str, tuple[str, int, int]] = {}  # path -> (token, mode, dir mode)
        self.pids: set[int] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc_info):
        self.stop.set()
        self.thread.join(timeout=60)

    def _loop(self) -> None:
        import psutil

        while not self.stop.is_set():
            try:
                root = psutil.Process(self.root_pid)
                tree = [root] + root.children(recursive=True)
            except psutil.Error:
                return
            for proc in tree:
                self._look_at(proc)
            self.stop.wait(self.interval_s)

    def _look_at(self, proc) -> None:
        import psutil

        try:
            name = proc.name()
            conns = proc.net_connections(kind="tcp")
            environ = proc.environ()
        except psutil.Error:
            return
        self.pids.add(proc.pid)
        path = environ.get("RAY_AUTH_TOKEN_PATH")
        if path and path not in self.tokens:
            try:
                self.tokens[path] = (Path(path).read_text().strip(),
                                     stat.S_IMODE(os.stat(path).st_mode),
                                     stat.S_IMODE(os.stat(Path(path).parent).st_mode))
            except OSError:
                pass
        for conn in conns:
            if conn.status != psutil.CONN_LISTEN:
                continue
            key = (conn.laddr.ip, conn.laddr.port, name)
            if key not in self.seen:
                self.seen[key] = probe(conn.laddr.port)


def _gone_within(procs: list, timeout_s: float) -> float | None:
    """Seconds until every process in ``procs`` (psutil) ended, or None after timeout_s."""
    import psutil

    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        alive = []
        for proc in procs:
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
            except psutil.Error:
                pass
        if not alive:
            return time.monotonic() - started
        time.sleep(0.1)
    return None


def _kill_leftovers(procs: list) -> None:
    import psutil

    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass


def test_a_runs_sockets_are_on_loopback_and_refuse_a_caller_without_the_token(in_tmp, ray_tmp):
    import psutil

    # A user who switched Ray's token off, with a home of their own: the local run is
    # protected all the same, and Ray's shared ~/.ray/auth_token is neither read nor made.
    home = in_tmp / "home"
    home.mkdir()
    env = clean_env(RAY_AUTH_MODE="disabled", HOME=str(home), RAY_TMPDIR=str(ray_tmp))
    driver = subprocess.Popen(
        [sys.executable, "-m", "hpsearch", "run", str(REPO / "search_spaces/digits_mlp.yaml"),
         "--set", "search.n_trials=2", "--set", "max_epochs=3", "--progress-interval", "1"],
        cwd=in_tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tree: list = []
    try:
        with SocketWatch(driver.pid) as watch:
            out, err = driver.communicate(timeout=400)
        tree = [psutil.Process(p) for p in watch.pids if psutil.pid_exists(p)]
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode == 0, err[-3000:]
    assert "2/2 done: 2 complete" in out

    for (ip, port, name), answer in sorted(watch.seen.items(), key=lambda kv: kv[0][2]):
        print(f"\n{name:24s} {ip}:{port}  {answer}", end="")
    names = {name for _, _, name in watch.seen}
    # The whole of Ray was seen listening: GCS, raylet, the driver, a worker, the agent.
    assert {"gcs_server", "raylet", "python", "ray::RuntimeEnvAgent"} <= names, watch.seen
    assert any(n.startswith("ray::") and "Agent" not in n for n in names), watch.seen
    exposed = {k: v for k, v in watch.seen.items() if k[0] not in LOOPBACK}
    assert not exposed, f"listening beyond loopback: {exposed}"
    answered = {k: v for k, v in watch.seen.items() if v not in (REFUSED, GONE)}
    assert not answered, f"answered a caller without the token: {answered}"
    probed = [k for k, v in watch.seen.items() if v == REFUSED]
    assert {"gcs_server", "raylet", "python", "ray::RuntimeEnvAgent"} <= {n for *_, n in probed}
    assert sum(1 for *_, n in probed if n == "raylet") == 2  # node and object manager

    # One token for the run, in a file only its user reads, and in no output or log.
    assert len(watch.tokens) == 1, watch.tokens
    (path, (token, mode, dir_mode)), = watch.tokens.items()
    assert len(token) == 64 and mode == 0o600 and dir_mode == 0o700
    for text in (out, err):
        assert token not in text
    files = [f for top in (in_tmp / "runs", ray_tmp) for f in top.rglob("*")
             if f.is_file() and not f.is_socket()]
    assert len(files) > 20  # the run's files and Ray's session logs
    for file in files:
        assert token.encode() not in file.read_bytes(), file
    assert not Path(path).exists() and not Path(path).parent.exists()
    assert not (home / ".ray").exists()
    # Nothing of the run is left behind.
    assert _gone_within(tree, 15) is not None, [p for p in tree if p.is_running()]


def test_a_killed_drivers_ray_ends_with_it_and_resume_completes_at_once(in_tmp, ray_tmp):
    import psutil

    space = in_tmp / "space.yaml"
    space.write_text(json.dumps(spec(**{"name": "killed", "max_epochs": 8,
                                        "search.n_trials": 3, "search.concurrency": 2})))
    # The dying cluster's address is left in ray_tmp for resume to find, as `ray start`
    # leaves its cluster's.
    env = clean_env(RAY_TMPDIR=str(ray_tmp))
    driver = subprocess.Popen(
        [sys.executable, "-m", "hpsearch", "run", str(space), "--run-dir", "run", "--quiet"],
        cwd=in_tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = in_tmp / "run" / "optuna.db"
    old: list = []
    resumed = None
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            _, running = _finished_and_running(db) if db.exists() else (0, [])
            checkpoints = in_tmp / "run" / "checkpoints"
            if any(list((checkpoints / f"trial-{n:04d}").glob("epoch-*")) for n in running):
                break
            assert driver.poll() is None, "the run ended before the test could kill it"
            time.sleep(0.2)
        else:
            pytest.fail("no trial ever checkpointed")
        old = psutil.Process(driver.pid).children(recursive=True)
        old_names = sorted(p.name() for p in old)
        assert "ray::RuntimeEnvAgent" in old_names and "ray::DashboardAgent" in old_names
        gcs_ports = [c.laddr.port for p in old if p.name() == "gcs_server"
                     for c in p.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN]
        assert gcs_ports

        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
        # What plain ray.init() would join: the dying cluster, named as the current one.
        (ray_tmp / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{gcs_ports[0]}")
        # Resume at once, while the old run's processes may still be ending.
        resumed = subprocess.Popen(
            [sys.executable, "-m", "hpsearch", "resume", "run"], cwd=in_tmp, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        linger_s = _gone_within(old, 30)
        print(f"\nthe killed driver's Ray processes ended within {linger_s} s")
        # Ray's agents alone wait 60 s for the dead GCS before they exit.
        assert linger_s is not None and linger_s < 10, \
            [(p.pid, p.name()) for p in old if p.is_running()]
        out, err = resumed.communicate(timeout=400)
    finally:
        for proc in (driver, resumed):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        _kill_leftovers(old)
    assert resumed.returncode == 0, out[-2000:] + err[-2000:]
    assert "resuming" in out
    assert "Traceback" not in out + err
    trials = optuna.load_study(study_name="killed", storage=f"sqlite:///{db}").get_trials()
    assert len(trials) == 3
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3
    assert all(sorted(t.intermediate_values) == list(range(1, 9)) for t in trials)


#: Run inside ``unshare -n`` (a network namespace with loopback only): docs/clusters.md's
#: cluster steps with Ray 2.60's token authentication, two Ray nodes on one machine.
CLUSTER_SCRIPT = r'''
import json, os, shutil, subprocess, sys, time
from pathlib import Path

from tests.netns import loopback_only_up, started
from tests.test_e2e_netsec import probe

work = Path(sys.argv[1])
RAY = [sys.executable, "-m", "ray.scripts.scripts"]  # `ray`, whatever its script's shebang
PORT = 6379

loopback_only_up()  # Ray would use the machine's address outside the namespace

def env_for(home, **extra):
    return dict(os.environ, HOME=str(home), **extra)

homes = {k: work / k for k in ("head", "worker", "stranger")}
for h in homes.values():
    h.mkdir()
result = {}


# Head: a token (docs/clusters.md's `ray get-auth-token --generate`), then `ray start --head`.
gen = subprocess.run([*RAY, "get-auth-token", "--generate"], env=env_for(homes["head"]),
                     capture_output=True, text=True, timeout=120)
token_file = homes["head"] / ".ray" / "auth_token"
token = token_file.read_text().strip()
result["generated"] = gen.returncode == 0 and len(token) == 64
os.chmod(token_file, 0o600)
procs = []
try:
    head = subprocess.Popen(
        [*RAY, "start", "--head", f"--port={PORT}", "--num-cpus=0", "--include-dashboard=false",
         "--block"], env=env_for(homes["head"]), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    procs.append(head)
    started(head, "the head")
    result["gcs_without_token"] = probe(PORT)

    # A stranger (no token) cannot join, neither as a Ray worker nor as an hpsearch driver.
    space = work / "space.yaml"
    space.write_text(sys.argv[2])
    stranger = subprocess.run(
        [sys.executable, "-m", "hpsearch", "run", str(space),
         "--run-dir", str(work / "stranger-run"),
         "--set", f"cluster.address=127.0.0.1:{PORT}"],
        env=env_for(homes["stranger"]), cwd=work, capture_output=True, text=True, timeout=300)
    result["stranger"] = [stranger.returncode, stranger.stderr.strip().splitlines()[-1:]]
    result["stranger_wrote"] = (work / "stranger-run").exists()

    # A worker given the head's token (copied to its own ~/.ray/auth_token) joins.
    (homes["worker"] / ".ray").mkdir()
    shutil.copy(token_file, homes["worker"] / ".ray" / "auth_token")
    os.chmod(homes["worker"] / ".ray" / "auth_token", 0o600)
    worker = subprocess.Popen(
        [*RAY, "start", f"--address=127.0.0.1:{PORT}", "--num-cpus=2", "--block"],
        env=env_for(homes["worker"], RAY_AUTH_MODE="token"), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    procs.append(worker)
    started(worker, "the worker")

    # The driver on the head: cluster.address=auto finds the head and its token.
    run = subprocess.run(
        [sys.executable, "-m", "hpsearch", "run", str(space), "--run-dir", str(work / "run"),
         "--set", "cluster.address=auto", "--progress-interval", "1"],
        env=env_for(homes["head"]), cwd=work, capture_output=True, text=True, timeout=600)
    result["run"] = [run.returncode, run.stdout[-1500:], run.stderr[-1500:]]
    result["token_printed"] = token in gen.stderr + run.stdout + run.stderr + stranger.stderr
finally:
    for proc in reversed(procs):
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
print("@@result@@" + json.dumps(result))
'''


def test_the_readme_cluster_steps_with_token_authentication(in_tmp, ray_tmp):
    """``ray start --head``, a worker with the head's token, ``cluster.address: auto``."""
    from hpsearch.adapters.ray.local import reap

    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        pytest.fail("this test needs `unshare -n` (root, util-linux): a network namespace "
                    "keeps the cluster's traffic on loopback")
    script = in_tmp / "cluster_flow.py"
    script.write_text(CLUSTER_SCRIPT)
    work = in_tmp / "work"
    work.mkdir()
    space = spec(**{"name": "cluster-token", "max_epochs": 2, "search.n_trials": 2,
                    "search.concurrency": 2})
    env = clean_env(RAY_TMPDIR=str(ray_tmp))
    proc = subprocess.Popen(
        ["unshare", "-n", sys.executable, str(script), str(work), json.dumps(space)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        # Whatever of the two Ray nodes outlived the script: it writes under ray_tmp.
        reap("no-mark", [str(ray_tmp)], spare=(os.getpid(),))
    marker = [ln for ln in out.splitlines() if ln.startswith("@@result@@")]
    assert proc.returncode == 0 and marker, out[-5000:]
    result = json.loads(marker[-1][len("@@result@@"):])

    assert result["generated"]
    assert result["gcs_without_token"] == REFUSED
    code, last = result["stranger"]
    assert code == 2 and last and last[0].startswith("hpsearch: error: cluster.address: "), last
    assert "RAY_AUTH_MODE=token" in last[0]
    assert not result["stranger_wrote"]
    code, stdout, stderr = result["run"]
    assert code == 0, stdout + stderr
    assert "2/2 done: 2 complete" in stdout
    assert not result["token_printed"]
    study = optuna.load_study(study_name="cluster-token",
                              storage=f"sqlite:///{work / 'run' / 'optuna.db'}")
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 2


#: Started in a process of its own (the test process may hold the session's Ray): Ray's
#: first start fails as Ray 2.60 fails when its raylet does not register within 30 s,
#: then LocalRay.start must start again; a failure of another kind is not retried.
STARTUP_SCRIPT = r"""
import json, os, sys
import ray
from hpsearch.adapters.ray import local

real, tokens = ray.init, []
before = {k: os.environ.get(k) for k in local.RUN_ENV}

def init(*args, **kwargs):
    tokens.append(os.environ[local.AUTH_TOKEN_PATH_ENV])
    if len(tokens) == 1 or sys.argv[1] == "twice":
        raise Exception("The current node timed out during startup. This could happen "
                        "because some of the raylet failed to startup or the GCS has "
                        "become overloaded.")
    if sys.argv[1] == "other":
        raise RuntimeError("something else")
    return real(*args, **kwargs)

ray.init = init
out = {}
try:
    run = local.LocalRay(include_dashboard=False, num_cpus=1).start()
    out["answer"] = ray.get(ray.remote(lambda: 41 + 1).remote())
    run.stop()
except RuntimeError as exc:
    out["error"] = str(exc)
if sys.argv[1] == "twice":  # what the driver makes of it: one line, no traceback
    from hpsearch.driver.cluster import RaySession
    from hpsearch.errors import HpsearchError
    try:
        with RaySession(None):
            pass
    except HpsearchError as exc:
        out["driver_error"] = str(exc)
out.update(tokens=tokens, first_dir_left=os.path.exists(os.path.dirname(tokens[0])),
           env_restored=before == {k: os.environ.get(k) for k in local.RUN_ENV},
           initialized=ray.is_initialized())
print(json.dumps(out))
"""


def test_a_start_that_timed_out_in_ray_is_made_once_more(ray_tmp):
    runs = {}
    for case in ("timeout", "other", "twice"):
        done = subprocess.run([sys.executable, "-c", STARTUP_SCRIPT, case],
                              capture_output=True, text=True, timeout=240,
                              env=clean_env(RAY_TMPDIR=str(ray_tmp)))
        assert done.returncode == 0, done.stderr[-3000:]
        runs[case] = json.loads(done.stdout.strip().splitlines()[-1])
    timed_out = runs["timeout"]
    # Started on the second try, with a new token; the first try's folder is gone.
    assert timed_out["answer"] == 42 and "error" not in timed_out
    assert len(timed_out["tokens"]) == 2 and len(set(timed_out["tokens"])) == 2
    assert not timed_out["first_dir_left"]
    assert timed_out["env_restored"] and not timed_out["initialized"]
    # A failure of another kind on the second try is raised, and nothing is left set.
    other = runs["other"]
    assert other["error"] == "something else" and len(other["tokens"]) == 2
    assert other["env_restored"] and not other["initialized"]
    # Timed out twice: a RuntimeError that says so, which the driver turns into its
    # one-line error; no third try, and nothing left set.
    twice = runs["twice"]
    assert "timed out during startup on both of 2 tries" in twice["error"]
    assert len(twice["tokens"]) == 2 + 2  # two here, two more through the driver
    assert twice["driver_error"].startswith("cannot start a local Ray: Ray's node timed")
    assert twice["env_restored"] and not twice["initialized"]
