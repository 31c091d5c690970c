"""Shared fixtures: one real local Ray cluster for the whole session."""

from __future__ import annotations

import atexit
import functools
import gc
import importlib
import importlib.abc
import importlib.machinery
import logging
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def ray_cluster():
    """A real local Ray with 2 CPUs; hpsearch.run joins it instead of starting its own."""
    import ray

    from hpsearch.adapters.ray.local import LocalRay

    saved = {name: os.environ.get(name)
             for name in ("RAY_USAGE_STATS_ENABLED", "PYTHONPATH")}
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Trial processes import tests.trainables: the repo root must be on their path.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
    )
    try:
        # A fresh cluster, never one another process left running (not another pytest
        # worker's either); protected as a run's own Ray is (loopback only, a token for
        # this session, ended with this process), so a test's subprocess joins it with
        # cluster.address=<its address> and the token's environment it inherits.
        cluster = LocalRay(num_cpus=2, include_dashboard=False, log_to_driver=False,
                           logging_level=logging.ERROR).start()
        try:
            yield ray
        finally:
            cluster.stop()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


#: How long a test that used :func:`ray_cluster` may take to give its CPUs back after it
#: ends: Tune removes a run's placement groups as it returns, and the raylet frees them
#: a moment later (well under a second here); a minute allows a loaded machine.
RAY_RELEASE_S = 60.0


def _ray_leftovers(ray) -> dict:
    """The session cluster's resources not back in its pool: name -> amount held."""
    total, free = ray.cluster_resources(), ray.available_resources()
    return {name: total[name] - free.get(name, 0.0) for name in ("CPU", "GPU", "memory")
            if name in total and free.get(name, 0.0) < total[name] - 1e-9}


@pytest.fixture(autouse=True)
def _gives_ray_back(request):
    """A test that used :func:`ray_cluster` leaves all its resources free again.

    Every later test on the same cluster needs them: a trial that asks for both CPUs
    would otherwise wait for ever behind whatever this test left (an actor, a placement
    group), far from its cause. So the leak fails the test that made it, naming what
    is held and by whom."""
    yield
    if "ray_cluster" not in request.fixturenames:
        return
    import time

    import ray

    if not ray.is_initialized():
        return
    deadline = time.monotonic() + RAY_RELEASE_S
    try:
        while (held := _ray_leftovers(ray)) and time.monotonic() < deadline:
            time.sleep(0.2)
    except Exception:  # Ray no longer answers this process: the test's failure says why
        return
    if held:
        pytest.fail(f"{request.node.nodeid} left Ray resources held {RAY_RELEASE_S:.0f} s "
                    f"after it ended: {held}; {_ray_holders(ray)}", pytrace=False)


def _ray_holders(ray) -> str:
    """What holds the session cluster's resources, read from its GCS through this
    driver's own connection (the state API would look for a dashboard this cluster does
    not run, or for whichever other cluster on the machine it finds first)."""
    from ray._private import state

    try:
        actors = [f"{a['ActorClassName']} (pid {a['Pid']}, {a['State']})"
                  for a in state.actors().values() if a["State"] != "DEAD"]
        groups = [f"{pg_id[:8]} {pg['state']} {list(pg['bundles'].values())}"
                  for pg_id, pg in ray.util.placement_group_table().items()
                  if pg["state"] != "REMOVED"]
        # A bundle the raylet still reserves shows as a CPU_group_<id> resource, also
        # after the GCS removed its group (a removal that raced a starting worker).
        bundles = sorted({name.rsplit("_", 1)[-1][:8] for name in ray.cluster_resources()
                          if "_group_" in name})
    except Exception as error:  # the leak is the finding; a failed listing only says so
        return f"holders unknown ({type(error).__name__}: {error})"
    return (f"actors alive: {actors or 'none'}; placement groups: {groups or 'none'}; "
            f"bundles reserved: {bundles or 'none'}")


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run with the working directory in a fresh temporary folder."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


#: A RAM disk where the machine has one: SQLite commits there skip the disk's fsync,
#: which dominates the fast tests' studies (about 8 ms a commit, far more on a busy disk).
RAM_DISK = Path("/dev/shm")


def _ram_disk() -> bool:
    """Whether :data:`RAM_DISK` is there and writable."""
    return RAM_DISK.is_dir() and os.access(RAM_DISK, os.W_OK)


def _fast_run(config) -> bool:
    """Whether this session runs the fast set (``-m "not slow"``)."""
    return (config.getoption("markexpr", "") or "").strip() == "not slow"


#: pytest's documented variable for the root of ``tmp_path`` folders.
_TEMPROOT = "PYTEST_DEBUG_TEMPROOT"


def pytest_configure(config) -> None:
    """The fast set's ``tmp_path`` folders live on the RAM disk too, where there is one
    and no root was chosen: on this machine's disk (ext4 mounted with ``discard``) each
    folder costs about 4 ms to make and later delete, about 1 s a fast run. pytest keeps
    the last three sessions' folders there as on the disk. The variable is unset again
    at the end of the session."""
    if _fast_run(config) and _ram_disk() and _TEMPROOT not in os.environ:
        os.environ[_TEMPROOT] = str(RAM_DISK)
        config.add_cleanup(lambda: os.environ.pop(_TEMPROOT, None))
    # The collector as it was, once the session is over (see _freeze_what_is_alive): a
    # cleanup added now runs after those of the plugins configured later, so pytest's
    # last collections for unraisable exceptions still skip the frozen libraries.
    config.add_cleanup(gc.unfreeze)


@pytest.fixture
def fast_dir(request):
    """A fresh folder of this test's own on a RAM disk (``tmp_path`` where there is none),
    removed after the test: for files written often and read back at once (SQLite
    studies), whose fsync on a real disk costs more than the test itself. (``tmp_path``
    is not made where the RAM disk is used: each of its folders costs a later session
    about 4 ms to delete on this machine's disk.)"""
    if not _ram_disk():
        yield request.getfixturevalue("tmp_path")
        return
    path = Path(tempfile.mkdtemp(prefix="hpsearch-test-", dir=RAM_DISK))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def _empty_optuna_db(tmp_path_factory) -> Path:
    """An SQLite file with Optuna's schema and no study, made by Optuna once a session
    (on the RAM disk where there is one: creating the schema commits a dozen times, about
    0.4 s of fsync on a real disk)."""
    import optuna

    on_ram = _ram_disk()
    folder = (Path(tempfile.mkdtemp(prefix="hpsearch-schema-", dir=RAM_DISK)) if on_ram
              else tmp_path_factory.mktemp("optuna-schema"))
    try:
        path = folder / "empty.db"
        storage = optuna.storages.RDBStorage(f"sqlite:///{path}")
        storage.remove_session()
        storage.engine.dispose()
        yield path
    finally:
        if on_ram:
            shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def new_sqlite(fast_dir, _empty_optuna_db):
    """``new_sqlite(name)``: the URL of a new SQLite storage in :func:`fast_dir`, its
    schema already made (a copy of :func:`_empty_optuna_db`: creating Optuna's tables
    costs about 0.1 s of CPU a file). For tests of what is stored, not of how a file is
    first created."""

    def make(name: str = "optuna.db") -> str:
        path = fast_dir / name
        shutil.copyfile(_empty_optuna_db, path)
        return f"sqlite:///{path}"

    return make


class FastTestLeftItsLane(AssertionError):
    """A test not marked ``slow`` started a subprocess or a Ray cluster."""


class _Lane:
    """Which fast test runs now (None: a slow one, or between tests), and what it tried.

    ``pytest -m "not slow"`` starts no subprocess and no Ray: a test that needs either is
    marked ``slow`` (CI runs those too). The guards below are installed once per session
    and let everything through while no fast test runs; each refusal is also remembered,
    so a test whose code swallows the error (``except Exception``) still fails.
    """

    test: str | None = None
    tried: list[str] = []

    @classmethod
    def refuse(cls, what: str) -> None:
        if cls.test is None:
            return
        cls.tried.append(what)
        raise FastTestLeftItsLane(f"{cls.test} {what}: mark it @pytest.mark.slow")


# Every process a Python program starts goes through one of these: subprocess.Popen
# (and asyncio's subprocesses, which use it), os.fork (multiprocessing's "fork"),
# os.posix_spawn, os.system, os.exec*, os.spawn*: all raise audit events.
_PROCESS_EVENTS = frozenset({"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn",
                             "os.spawn", "os.exec", "os.system"})


def _audit(event: str, args: tuple) -> None:
    if event in _PROCESS_EVENTS and _Lane.test is not None:
        _Lane.refuse(f"starts a subprocess ({event})")


sys.addaudithook(_audit)


def _guard_fork_exec() -> None:
    """multiprocessing's "spawn" and "forkserver" start interpreters through
    ``_posixsubprocess.fork_exec``, which raises no audit event: guard it by name (both
    ``subprocess`` and ``multiprocessing.util`` look it up on the module at each call)."""
    import _posixsubprocess

    original = _posixsubprocess.fork_exec

    @functools.wraps(original)
    def fork_exec(*args, **kwargs):
        _Lane.refuse("starts a subprocess (fork_exec)")
        return original(*args, **kwargs)

    _posixsubprocess.fork_exec = fork_exec


_guard_fork_exec()


def _warm_font_cache() -> None:
    """Build matplotlib's font cache before any test runs: the first import of
    ``matplotlib.font_manager`` on a new machine runs ``fc-list`` (a subprocess), which
    would fail whichever fast test happened to import matplotlib first (Lightning and
    the report do) on a clean CI machine, and only there."""
    try:
        import matplotlib.font_manager  # noqa: F401
    except ImportError:
        pass


_warm_font_cache()


def _guard_ray_init(ray) -> None:
    """``ray.init`` refuses while a fast test runs: joining a running cluster starts no
    process, so the process guards alone would miss it."""
    original = ray.init
    if getattr(original, "lane_guard", False):
        return

    @functools.wraps(original)
    def init(*args, **kwargs):
        _Lane.refuse("starts or joins Ray (ray.init)")
        return original(*args, **kwargs)

    init.lane_guard = True
    ray.init = init


class _GuardRayOnImport(importlib.abc.MetaPathFinder):
    """Guards ``ray.init`` as soon as ``ray`` is imported, without importing it here
    (about 0.4 s that a fast test file which never touches Ray should not pay)."""

    def find_spec(self, name, path, target=None):
        if name != "ray":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_guard(module):
            exec_module(module)
            _guard_ray_init(module)

        spec.loader.exec_module = exec_and_guard
        return spec


def _import_without_assertion_rewriting(name: str) -> None:
    """Import ``name`` (a library) past pytest's assertion rewriting.

    pytest rewrites the assertions of every module of a distribution that provides a
    pytest plugin, hypothesis's 70-odd modules among them, and caches none of it where
    PYTHONDONTWRITEBYTECODE is set: about 0.5 s of every run, for assertions that are the
    library's, not the tests'. Test modules are rewritten as always.
    """
    if name in sys.modules:
        return
    rewriters = [f for f in sys.meta_path if type(f).__name__ == "AssertionRewritingHook"]
    at = [sys.meta_path.index(f) for f in rewriters]
    for finder in rewriters:
        sys.meta_path.remove(finder)
    try:
        importlib.import_module(name)
    except ImportError:  # not installed: the test files that need it say so
        pass
    finally:
        for index, finder in zip(at, rewriters):
            sys.meta_path.insert(index, finder)


_import_without_assertion_rewriting("hypothesis.strategies")

if "ray" in sys.modules:
    _guard_ray_init(sys.modules["ray"])
sys.meta_path.insert(0, _GuardRayOnImport())


def _is_fast(item) -> bool:
    return item.get_closest_marker("slow") is None


#: A module-level ``pytestmark = pytest.mark.slow``: every test of that file is slow.
_ALL_SLOW = re.compile(r"^pytestmark\s*=\s*pytest\.mark\.slow\s*$", re.MULTILINE)


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    """Under ``-m "not slow"``, a test file marked slow as a whole is not imported: all
    its tests would be deselected, and importing it (its assertions rewritten, with no
    cache where PYTHONDONTWRITEBYTECODE is set) costs the fast run about 0.4 s. Such a
    file is then not counted as deselected; any other ``-m`` collects everything."""
    if not _fast_run(config):
        return None
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    try:
        text = collection_path.read_text(encoding="utf-8")
    except OSError:
        return None
    return True if _ALL_SLOW.search(text) else None


def _left_its_lane(nodeid: str) -> FastTestLeftItsLane | None:
    """The refusal a fast test swallowed (its code caught the error), once; else None."""
    tried, _Lane.tried = _Lane.tried, []
    return FastTestLeftItsLane(f"{nodeid} {tried[0]}: mark it @pytest.mark.slow") \
        if tried else None


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item):
    """Arm the lane before any fixture of a fast test is set up (a module- or
    session-scoped fixture that starts a process counts against the test using it)."""
    _Lane.test = item.nodeid if _is_fast(item) else None
    _Lane.tried = []
    try:
        return (yield)
    except BaseException:
        _Lane.tried = []  # reported already: the refusal, or what it caused
        raise


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A refusal the test's code caught still fails the test, in its own report."""
    try:
        result = yield
    except BaseException:
        _Lane.tried = []  # reported already: the refusal, or what it caused
        raise
    error = _left_its_lane(item.nodeid)
    if error is not None:
        raise error
    return result


@pytest.fixture(autouse=True)
def _fast_tests_stay_in_process(request):
    """Fails a fast test whose fixtures started (or tried to start) a subprocess or Ray
    and caught the refusal; disarms the lane before the module and session fixtures are
    torn down (a slow test's Ray cluster stops without a guard)."""
    yield
    error = _left_its_lane(request.node.nodeid)
    _Lane.test = None
    if error is not None:
        pytest.fail(str(error), pytrace=False)


# ---------------------------------------------------------------------------------------
# The cyclic garbage collector. Each full collection walks every object alive, and most
# of them are the libraries' (optuna, hypothesis, scipy, ray.tune, ...: some 400,000
# objects once imported): the fast run made about 30 full collections, about 3 s of it.
# Objects alive once the tests are collected, and again after a test that imported many
# modules, are moved to the collector's permanent generation (gc.freeze, after a
# collection, so no garbage is kept), which full collections skip. Nothing a test
# creates is frozen before the test has ended; refcounting still frees frozen objects.

#: Modules imported since the last freeze that make it worth another.
_FREEZE_AFTER_MODULES = 50
_frozen_at_modules = 0


def _freeze_what_is_alive() -> None:
    """Collect, then move every object still alive to the permanent generation."""
    global _frozen_at_modules
    gc.collect()
    gc.freeze()
    _frozen_at_modules = len(sys.modules)


def _freeze_after_imports() -> None:
    if len(sys.modules) - _frozen_at_modules >= _FREEZE_AFTER_MODULES:
        _freeze_what_is_alive()


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    """Make ``@pytest.mark.xdist_group`` work with ``--dist loadgroup`` on pytest 9.

    pytest-xdist (3.8) tags a grouped test for its scheduler by appending ``@<group>``
    to ``item._nodeid`` in each worker; pytest 9 reads a node's id from ``item._id``
    instead, so the tag never reached the scheduler and grouped tests were handed out
    one by one like the rest. Once every implementation of this hook (xdist's
    included) has run, a tagged id is copied to where pytest 9 reads it. Outside
    xdist, or on a pytest that still reads ``_nodeid``, this changes nothing.
    """
    result = yield
    for item in items:
        tagged = item.__dict__.get("_nodeid")
        if isinstance(tagged, str) and tagged != item.nodeid and hasattr(item, "_id"):
            from _pytest.nodeid import coerce_node_id

            item._id = coerce_node_id(tagged)
    return result


class SessionWatchdog:
    """The processes a session's tests start end with it, however it ends.

    A test cluster (``ray start --block`` in a session of its own, an S3 server, a
    subprocess driver) is ended by its test's ``finally``; a pytest process killed
    outright (SIGKILL, a CI timeout's SIGTERM, which runs no teardown) used to leave
    it running. When slow tests are collected, each pytest process (each xdist
    worker) marks its environment, which every process it starts inherits, and starts
    the run's own watchdog (:mod:`hpsearch.adapters.ray.local`) with that mark: when
    this process ends, by any means, the watchdog ends every process still carrying
    it. (The session's Ray, :func:`ray_cluster`, has its own mark and watchdog while
    it runs; processes started then carry that one.) :attr:`mark` is what a test that
    builds a clean environment puts back (``tests/test_e2e_netsec.py``).
    """

    mark: str | None = None
    _dog = None
    _saved: str | None = None

    @classmethod
    def start(cls) -> None:
        import secrets

        from hpsearch.adapters.ray import local

        cls.mark = f"pytest-{os.getpid()}-{secrets.token_hex(6)}"
        cls._saved = os.environ.get(local.MARK_ENV)
        cls._dog = local._Watchdog(cls.mark, tempfile.mkdtemp(prefix="hps-test-dog-"))
        os.environ[local.MARK_ENV] = cls.mark

    @classmethod
    def stop(cls) -> None:
        """End what is left of the session's processes (normally nothing)."""
        if cls._dog is None:
            return
        from hpsearch.adapters.ray import local

        if cls._saved is None:
            os.environ.pop(local.MARK_ENV, None)
        else:
            os.environ[local.MARK_ENV] = cls._saved
        cls._dog.close()
        cls._dog = cls.mark = None


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session) -> None:
    SessionWatchdog.stop()


def pytest_collectreport(report) -> None:
    _freeze_after_imports()  # a test file imported, with what it imports


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session) -> None:
    if any(item.get_closest_marker("slow") for item in session.items):
        SessionWatchdog.start()  # only slow tests start processes
    _freeze_what_is_alive()


def pytest_runtest_logfinish(nodeid, location) -> None:
    _freeze_after_imports()


# At interpreter exit, once every other exit handler registered after this one has run,
# everything still alive is frozen again: the interpreter's own finalization then skips
# its collections over it (1.1 s of every fast run's exit here) and frees it by refcount.
atexit.register(gc.freeze)
