"""The composition root: config -> study, Ray cluster, scheduler, runner -> results.

``run()`` validates everything it can before writing anything: the config, the
trainable's import path, compatibility with an existing study in the run dir, and that
some Ray node can hold one trial. Only then does it create the run dir:

    runs/<name>/
      space.yaml      the resolved config of the latest session (defaults filled in)
      ledger.jsonl    billed intervals of every trial (money spent and wasted)
      optuna.db       the Optuna study (unless ``storage`` points elsewhere)
      checkpoints/    trial-NNNN/: each trial's checkpoints (atomic, checksummed)
      tune/session-N  Ray Tune's experiment: per-attempt results and errors
      logs/           trial-NNNN.log: each trial's log records (Lightning, warnings)
      hpsearch.log    the driver's log (Ray and Tune warnings, trial errors)

Faults (see :mod:`hpsearch.faults`): one driver per run dir (a second is refused, exit
2); a read-only run dir is refused up front (exit 2); SIGTERM is handled like Ctrl-C
(exit 143 instead of 130); a full disk stops the run cleanly with every unfinished
trial resumable (exit 75); a study belongs to the run dir whose ledger holds its money
(another run dir on a shared study is refused, exit 2).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from hpsearch import config as config_mod
from hpsearch import faults, keys
from hpsearch.budget import fmt_money
from hpsearch.errors import EXIT_INTERRUPTED, ConfigError, HpsearchError
from hpsearch.ledger import FAILED, PREEMPTED
from hpsearch.progress import Progress, top_table

log = logging.getLogger("hpsearch")



class RunAborted(HpsearchError):
    """The run stopped because every trial would fail the same way (a setup error)."""

    exit_code = ConfigError.exit_code


class RunInterrupted(HpsearchError):
    """The run was interrupted (Ctrl-C: exit code 130, SIGTERM: 143); finished trials
    are kept in the study, unfinished ones resume from their checkpoints."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, message: str, exit_code: int = EXIT_INTERRUPTED):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class RunResult:
    """What :func:`run` returns.

    Attributes:
        study: The Optuna study holding every trial of the run.
        best_trial: The best COMPLETE trial (``optuna.trial.FrozenTrial``), or None.
        run_dir: Where the run's files are.
        storage_url: The Optuna storage URL (for ``optuna-dashboard``).
        spent: Money the whole study has spent (all sessions), in ``currency``.
        currency: The run's currency.
        stop_reason: Why the session stopped before ``n_trials`` (budget), or None.
    """

    study: Any
    best_trial: Any
    run_dir: Path
    storage_url: str
    spent: float = 0.0
    currency: str = "USD"
    stop_reason: str | None = None


def default_run_dir(name: str) -> Path:
    return Path("runs") / name


def storage_url_for(config: config_mod.Config, run_dir: Path) -> str:
    return config.storage or f"sqlite:///{run_dir / 'optuna.db'}"


def display_path(path: Path) -> str:
    """``path`` relative to the working directory when it is below it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def display_url(url: str, run_dir: Path) -> str:
    if url.startswith("sqlite:///"):
        return "sqlite:///" + display_path(Path(url[len("sqlite:///"):]))
    return url


def _sqlite_file(url: str) -> Path | None:
    if url.startswith("sqlite:///"):
        return Path(url[len("sqlite:///"):])
    return None


def _check_existing_study(config: config_mod.Config, url: str, ledger=None,
                          run_path: Path | None = None) -> bool:
    """Raise if the study in ``url`` cannot be continued with ``config`` from this run
    dir's ``ledger``; True if it exists.

    A study's money is in the ledger of the run dir it ran from, whose id the study
    records. Another run dir on the same (shared) study would start from zero money and
    overspend its budget: it is refused. A run dir moved or copied with its SQLite study
    keeps its ledger and so its id, and continues. A study from before ids (or made by
    hand) is taken over unless it has trials billed in a ledger that is not this one.
    """
    from hpsearch.adapters.study import check_compatible, existing_study_record

    db_file = _sqlite_file(url)
    if db_file is not None and not db_file.exists():
        return False  # opening it would create it: nothing to check
    record = existing_study_record(url, config.name)
    if record is None:
        return False
    attrs, billed = record
    check_compatible(dict(attrs.get(keys.ATTR_CONFIG) or {}), config)
    if ledger is not None:
        _check_owner(config, url, attrs, billed, ledger, run_path)
    return True


def _check_owner(config, url: str, attrs: Mapping[str, Any], billed: set[int], ledger,
                 run_path: Path | None) -> None:
    """Refuse to run study ``config.name`` from a run dir whose ledger is not its own."""
    owner = attrs.get(keys.ATTR_LEDGER_ID)
    where = attrs.get(keys.ATTR_RUN_DIR)
    if owner is not None and owner == ledger.id:
        return
    elsewhere = where is not None and run_path is not None and Path(where) != run_path
    if owner is None:
        foreign = sorted(billed - set(ledger.trials()))
        if not foreign:
            return
        why = (f"its trials {', '.join(map(str, foreign[:5]))}"
               f"{' ...' if len(foreign) > 5 else ''} were billed in another run dir's "
               f"ledger, so its money would restart from zero here")
    elif elsewhere:
        why = (f"it belongs to run dir {display_path(Path(where))}, whose ledger.jsonl "
               f"holds its money")
    else:
        why = ("its money is in another ledger than this run dir's ledger.jsonl (replaced "
               "or deleted?), so it would restart from zero here")
    hint = (f"continue it there (--run-dir {display_path(Path(where))})" if elsewhere
            else "continue it from the run dir it ran in")
    shown = display_path(run_path) if run_path is not None else "this run dir"
    raise ConfigError(
        "storage", f"study '{config.name}' cannot be run from {shown}: {why}; {hint}, or "
        f"give this search another name", display_url(url, run_path or Path(".")))


def _concurrency(config: config_mod.Config, resources: Mapping[str, float]) -> int:
    """Trials at once: as configured, else as many as the cluster's resources hold."""
    if config.search.concurrency is not None:
        return config.search.concurrency
    fits = [resources.get("CPU", 1.0) // config.resources.cpu]
    if config.resources.gpu > 0:
        fits.append(resources.get("GPU", 0.0) // config.resources.gpu)
    return max(1, int(min(fits)))


def _check_fits(config: config_mod.Config, nodes: list[dict[str, Any]]) -> None:
    """A trial asking for more than any node has would pend forever: refuse it now."""
    alive = [n.get("Resources", {}) for n in nodes if n.get("Alive")]
    for key, field in (("CPU", "resources.cpu"), ("GPU", "resources.gpu")):
        want = config.resources.cpu if key == "CPU" else config.resources.gpu
        if want <= 0:
            continue
        most = max((r.get(key, 0.0) for r in alive), default=0.0)
        if want > most:
            where = f"the largest Ray node has {most:g}" if most else f"no Ray node has a {key}"
            raise ConfigError(field, f"no trial could ever start: {where}", want)


class _WorkerDeathNotices:
    """Keeps Ray's "(raylet) A worker died or was killed ..." notices off the console.

    Ray prints one to stdout for every trial process that dies; hpsearch handles those
    deaths itself (a preemption restarts the trial, a failure is recorded) and says so in
    one line of its own, so the notice goes to hpsearch.log instead.
    """

    MARK = "A worker died or was killed"

    def __init__(self, stream):
        self.stream = stream
        self.swallow_newline = False

    def write(self, text: str) -> int:
        if self.MARK in text:
            log.info("ray: %s", text.strip())
            self.swallow_newline = True
            return len(text)
        if self.swallow_newline and text == "\n":
            self.swallow_newline = False
            return len(text)
        self.swallow_newline = False
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


class _RaySession:
    """Starts a local Ray (or joins ``cluster.address``); shuts down only what it started."""

    def __init__(self, address: str | None):
        self.address = address
        self.started = False

    def __enter__(self):
        import ray

        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        if not ray.is_initialized():
            try:
                ray.init(
                    address=self.address,
                    include_dashboard=False,
                    log_to_driver=False,
                    # Ray's start-up notices are not the user's business; real
                    # problems surface as errors or in hpsearch.log.
                    logging_level=logging.ERROR,
                )
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ConfigError(
                    "cluster.address", f"cannot reach the Ray cluster: {exc}", self.address
                ) from None
            self.started = True
        return ray

    def __exit__(self, *exc_info) -> None:
        if self.started:
            import ray

            ray.shutdown()


def _next_session(tune_dir: Path) -> str:
    n = 1
    while (tune_dir / f"session-{n}").exists():
        n += 1
    return f"session-{n}"


#: Loggers whose records go to hpsearch.log only (Tune prints every trial's traceback).
_FILE_ONLY_LOGGERS = ("ray.tune", "ray.train")


class _LogFile(logging.FileHandler):
    """hpsearch.log, silent when a record cannot be written (a full disk stops the run
    with its own one-line error; a traceback per log record would bury it)."""

    def handleError(self, record: logging.LogRecord) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            return
        super().handleError(record)


def _attach_log(run_dir: Path) -> logging.Handler:
    handler = _LogFile(run_dir / "hpsearch.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("hpsearch").addHandler(handler)
    logging.getLogger("hpsearch").setLevel(logging.INFO)
    for name in _FILE_ONLY_LOGGERS:
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING)
        logger.propagate = False
    # The new output engine ignores verbose=0 and prints its own tables.
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    # hpsearch checks the objective itself (a trial that never logs it aborts the run
    # with a clear error); Tune's check would crash the whole run on a restart's final
    # bookkeeping result instead.
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    return handler


def _detach_log(handler: logging.Handler) -> None:
    logging.getLogger("hpsearch").removeHandler(handler)
    for name in _FILE_ONLY_LOGGERS:
        logger = logging.getLogger(name)
        logger.removeHandler(handler)
        logger.propagate = True
    handler.close()


def _trial_dirname(trial: Any) -> str:
    """Tune folders named after the Optuna trial: ``trial-0007-<ray id>``."""
    from hpsearch.adapters.runner import trial_name

    return f"{trial_name(int(trial.config.get(keys.TRIAL_NUMBER, -1)))}-{trial.trial_id}"


def _state_rows(study: Any) -> list[dict[str, Any]]:
    """The study's finished trials, best first (COMPLETE, then PRUNED, then FAIL)."""
    from optuna.trial import TrialState

    sign = -1.0 if study.direction.name == "MAXIMIZE" else 1.0
    order = {TrialState.COMPLETE: 0, TrialState.PRUNED: 1, TrialState.FAIL: 2}
    rows = []
    for t in study.get_trials(deepcopy=False):
        if t.state not in order:
            continue
        value = t.value
        if value is None and t.intermediate_values:
            value = t.intermediate_values[max(t.intermediate_values)]
        rows.append({
            "number": t.number,
            "state": t.state.name,
            "value": value,
            "epochs": t.user_attrs.get(keys.ATTR_EPOCHS, len(t.intermediate_values)),
            "params": t.params,
            "_key": (order[t.state], sign * value if value is not None else float("inf")),
        })
    rows.sort(key=lambda r: r["_key"])
    return rows


class _Signals:
    """SIGTERM handled like Ctrl-C, for the span of a run (the previous handler restored).

    The first SIGTERM (or Ctrl-C) asks Ray Tune to stop gracefully (it saves its
    experiment state and stops the trials); a second one interrupts at once. Either way
    the driver closes the ledger's open intervals and exits with the resume hint: 130
    after Ctrl-C, 143 after SIGTERM. Ray's own driver handler would ``sys.exit(15)``
    wherever the main thread is, leaving the ledger open.
    """

    def __init__(self):
        self.terminated = False
        self._previous = None

    def __enter__(self) -> "_Signals":
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._on_term)
        return self

    def _on_term(self, signum, frame) -> None:
        self.terminated = True
        log.warning("SIGTERM received: stopping the run as after Ctrl-C")
        # Whatever handles Ctrl-C now: Tune's graceful stop during fit(), else Python's
        # KeyboardInterrupt.
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            handler(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt

    @property
    def exit_code(self) -> int:
        return faults.EXIT_TERMINATED if self.terminated else EXIT_INTERRUPTED

    def __exit__(self, *exc_info) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None


class _SignalsHeld:
    """Ignores SIGINT and SIGTERM for a few lines of bookkeeping (closing the ledger
    after an interruption must not itself be interrupted); restores them on exit."""

    def __enter__(self) -> "_SignalsHeld":
        self._saved = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._saved[sig] = signal.signal(sig, signal.SIG_IGN)
        return self

    def __exit__(self, *exc_info) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)


def _disk_full(exc: BaseException, run_path: Path, url: str) -> faults.DiskFull | None:
    """The :class:`~hpsearch.faults.DiskFull` to raise for ``exc``, or None."""
    if isinstance(exc, faults.DiskFull):
        return exc
    if isinstance(exc, HpsearchError):
        return None  # already says what happened
    cause = faults.disk_full_cause(exc)
    if cause is None:
        return None
    where = cause.path
    if where is None:
        text = "".join(str(e) for e in (exc, exc.__cause__, exc.__context__) if e).lower()
        sqlite = _sqlite_file(url)
        where = str(sqlite) if sqlite is not None and "database or disk" in text else None
    return faults.DiskFull(where or run_path, run_path)


class LightningBackend:
    """How trials run: the default backend trains the trainable with Lightning.

    A backend supplies the Ray Tune function each trial runs, the clock money is counted
    on, and any Tune callbacks it needs. The benchmark's replay backend swaps in
    recorded learning curves and a simulated clock, so the whole scheduling path
    (sampler, pruning policy, cost model, budget, study) runs unchanged on them.
    """

    def check(self, config) -> None:
        """Validate what this backend needs before anything is written."""
        from hpsearch.trainable import resolve

        resolve(config.trainable)

    def trainable(self, spec):
        from hpsearch.adapters import runner

        return runner.train

    def clock(self) -> float:
        """Seconds on the clock the ledger bills by (wall-clock time: it outlives runs)."""
        return time.time()

    def callbacks(self) -> list:
        return []


def _largest_node_cpus(nodes: list[dict[str, Any]]) -> float | None:
    cpus = [n.get("Resources", {}).get("CPU", 0.0) for n in nodes if n.get("Alive")]
    return max(cpus) if cpus else None


def run(
    source: str | Path | Mapping[str, Any],
    overrides: Mapping[str, Any] | list[str] | None = None,
    run_dir: str | Path | None = None,
    *,
    emit: Callable[[str], None] | None = print,
    progress_interval_s: float = 10.0,
    backend: Any = None,
) -> RunResult:
    """Run (or continue) a search: the Python form of ``python -m hpsearch run``.

    Args:
        source: Path to a ``space.yaml`` or the same content as a mapping.
        overrides: ``{"search.n_trials": 3}`` or ``["search.n_trials=3"]``.
        run_dir: Where results go; default ``runs/<name>/``. An existing run dir with a
            compatible study is continued: its finished trials count toward
            ``search.n_trials`` and its ledger toward ``budget.max_cost``.
        emit: Receives progress lines; ``None`` for silence.
        progress_interval_s: Least seconds between two status lines.
        backend: How trials run; default :class:`LightningBackend` (for benchmarks).

    Returns:
        A :class:`RunResult` with the study, the best trial and the run dir.

    Raises:
        ConfigError: Bad input, or a run dir that cannot be used as it is (read-only,
            held by another driver: :class:`~hpsearch.faults.RunDirBusy`, or a study
            that belongs to another run dir); nothing was written.
        LedgerCorrupt: A damaged line inside the ledger (``hpsearch repair`` mends it).
        RunAborted: Trials cannot run as configured (e.g. the objective is never logged).
        RunInterrupted: Ctrl-C or SIGTERM; finished trials are kept, unfinished ones
            resume from their checkpoints.
        DiskFull: A write failed for lack of space; the run stopped cleanly and
            ``resume`` continues it once space is freed.
    """
    from hpsearch import pricing
    from hpsearch.ledger import Ledger

    out = emit or (lambda line: None)
    backend = backend or LightningBackend()
    config = config_mod.load(source, overrides)
    backend.check(config)
    currency = pricing.resolve(config).currency  # unknown instance: before anything starts
    run_path = Path(run_dir) if run_dir is not None else default_run_dir(config.name)
    run_path = run_path.absolute()
    url = storage_url_for(config, run_path)
    faults.check_writable(run_path, _sqlite_file(url))
    # The lock comes first, so that a second driver is refused at once, before it
    # starts Ray or reads anything. A run dir made only to hold it is removed again if
    # the run cannot start (bad input writes nothing).
    made = _missing_dirs(run_path)
    run_path.mkdir(parents=True, exist_ok=True)
    lock = faults.RunLock(run_path)
    started = False
    try:
        lock.acquire()
        ledger = Ledger(run_path / LEDGER_FILE, currency=currency)  # reads only
        continuing = _check_existing_study(config, url, ledger, run_path)
        with _RaySession(config.cluster.address) as ray:
            nodes = ray.nodes()
            _check_fits(config, nodes)
            price = pricing.resolve(config, node_cpus=_largest_node_cpus(nodes))
            concurrency = _concurrency(config, ray.cluster_resources())
            started = True
            try:
                with _Signals() as signals:
                    handler = _attach_log(run_path)
                    try:
                        session = _Session(config, run_path, url, price, ledger, out,
                                           backend, signals)
                        return session.run(continuing, concurrency, progress_interval_s)
                    finally:
                        _detach_log(handler)
            except KeyboardInterrupt:
                # Ctrl-C (or SIGTERM) outside Tune's loop: nothing is left half done.
                raise RunInterrupted(_interrupted_text(run_path),
                                     signals.exit_code) from None
            except Exception as exc:
                full = _disk_full(exc, run_path, url)
                if full is None:
                    raise
                raise full from None
    except BaseException:
        if not started and lock.held and made:
            lock.release()
            _remove_made(run_path, made)
        raise
    finally:
        lock.release()


def _missing_dirs(path: Path) -> list[Path]:
    """``path`` and its parents that do not exist yet, deepest first."""
    missing = []
    while not path.exists() and path.parent != path:
        missing.append(path)
        path = path.parent
    return missing


def _remove_made(run_path: Path, made: list[Path]) -> None:
    """Undo the folders made for a run that never started (only if still empty)."""
    try:
        (run_path / faults.LOCK_FILE).unlink()
    except OSError:
        return
    for folder in made:
        try:
            folder.rmdir()
        except OSError:
            return


def _interrupted_text(run_path: Path, unfinished: int | None = None) -> str:
    what = (f"{unfinished} unfinished trial(s) will resume from their checkpoints"
            if unfinished is not None else
            "unfinished trials will resume from their checkpoints")
    return (f"interrupted: {what}: run the same command again (or python -m hpsearch "
            f"resume {display_path(run_path)})")


#: The ledger's file in the run dir.
LEDGER_FILE = "ledger.jsonl"


class _Session:
    """One invocation of ``run`` on a run dir: wires the adapters and runs the Tuner."""

    def __init__(self, config, run_path: Path, url: str, price, ledger,
                 out: Callable[[str], None], backend, signals: _Signals | None = None):
        from hpsearch.budget import Accountant

        self.config = config
        self.run_path = run_path
        self.url = url
        self.price = price
        self.out = out
        self.backend = backend
        self.accountant = Accountant(price, config.budget, ledger, config.max_epochs,
                                     backend.clock)
        self.stop_reason: str | None = None
        self.signals = signals or _Signals()

    def run(self, continuing: bool, concurrency: int, progress_interval_s: float) -> RunResult:
        import yaml

        from hpsearch.adapters.study import StudyRecorder

        config, out = self.config, self.out
        (self.run_path / "space.yaml").write_text(
            yaml.safe_dump(config.to_dict(), sort_keys=False))
        recorder = StudyRecorder(config, self.url)
        ledger = self.accountant.ledger
        failing = True
        try:
            owner = recorder.study.user_attrs.get(keys.ATTR_LEDGER_ID)
            if owner is not None and owner != ledger.id:
                # Another run dir took the study between the check and now.
                _check_owner(config, self.url, recorder.study.user_attrs, set(), ledger,
                             self.run_path)
            recorder.study.set_user_attr(keys.ATTR_LEDGER_ID, ledger.ensure_id())
            recorder.study.set_user_attr(keys.ATTR_RUN_DIR, str(self.run_path))
            recorder.study.set_user_attr(keys.ATTR_PRICE, self.price.to_dict())
            orphans = recorder.unfinished_numbers()
            self.accountant.ledger.close_all(self.backend.clock(), FAILED, at_last_event=True)
            done_before = recorder.finished_count()
            new_trials = max(0, config.search.n_trials - done_before - len(orphans))
            if continuing and (done_before or orphans):
                out(f"Continuing study '{config.name}' in {display_path(self.run_path)}: "
                    f"{done_before} trial(s) finished, "
                    f"{fmt_money(self.accountant.spent(), self.price.currency)} spent"
                    + (f"; resuming {len(orphans)} unfinished trial(s) "
                       f"({', '.join(map(str, orphans))}) from their checkpoints"
                       if orphans else ""))
            if new_trials + len(orphans) == 0:
                out(f"The study already has {done_before} finished trial(s) >= "
                    f"search.n_trials ({config.search.n_trials}); raise it with "
                    f"--set search.n_trials=N to run more.")
            else:
                self._fit(recorder, new_trials, orphans, concurrency, progress_interval_s)
            result = self._summarise(recorder)
            failing = False
            return result
        finally:
            try:
                recorder.study.set_user_attr(keys.ATTR_SPENT, self.accountant.spent())
            except Exception:
                if not failing:
                    raise
                # Already failing (a full disk, say): that error is the one to report.
                log.warning("could not record the study's spend", exc_info=True)
            recorder.close()

    def _fit(self, recorder, new_trials: int, restarts: list[int], concurrency: int,
             progress_interval_s: float) -> None:
        from ray import tune

        from hpsearch.adapters import runner
        from hpsearch.adapters.ray_alive import AliveCallback
        from hpsearch.adapters.ray_progress import ProgressCallback
        from hpsearch.adapters.ray_scheduler import build_scheduler
        from hpsearch.adapters.ray_nodes import Placement
        from hpsearch.adapters.ray_preemption import PreemptionCallback
        from hpsearch.adapters.ray_search import AbortStopper, StudyCallback, StudySearcher
        from hpsearch.checkpoint import CheckpointStore
        from hpsearch.decisions import StopRecord
        from hpsearch.preemption import SimulatedPreemptions

        config, out, price = self.config, self.out, self.price
        budget = config.budget
        limits = ", ".join(f"{name} {value:g}" for name, value in (
            ("max_cost", budget.max_cost), ("max_cost_per_trial", budget.max_cost_per_trial),
            ("max_wall_s", budget.max_wall_s)) if value is not None) or "none"
        remaining = new_trials + len(restarts)
        out(f"Search '{config.name}': {remaining} trial(s), {concurrency} at a time, "
            f"{config.max_epochs} epochs max, pruning: {config.pruning.policy}")
        out(f"Pricing: {price.instance}{' (spot)' if price.spot else ''} at "
            f"{fmt_money(price.per_hour, price.currency)}/trial-hour; budget: {limits}")
        if price.note:
            out(f"  ({price.note})")
        out(f"Run dir: {display_path(self.run_path)}   Study: "
            f"{display_url(self.url, self.run_path)}")
        log.info("session start: %d trials, concurrency %d, price %s", remaining,
                 concurrency, price)
        accountant = self.accountant  # not self: Tune pickles its callbacks' state

        def shown_spent() -> str:
            # What the console shows is first written down (an alive event), so that
            # a driver killed right after never bills less on resume than it showed.
            now = accountant.heartbeat(force=True)
            return fmt_money(accountant.ledger.spent(now), price.currency)

        progress = Progress(config.objective.metric, remaining, out, time.monotonic,
                            progress_interval_s, spent=shown_spent)
        progress.tally.mode = config.objective.mode

        def ended(number, state, last_result, error):
            last = last_result or {}
            progress.trial_ended(number, state.name, int(last.get(keys.EPOCH, 0)),
                                 last.get(config.objective.metric), error)
            if error:
                log.warning("trial %s failed: %s", number, error)

        def restarted(number, outcome, reason, last_result):
            # An attempt killed before it reported has no result: ask the study and the
            # trial's checkpoints instead.
            epoch = int(last_result.get(keys.EPOCH, 0)
                        or recorder.attr(number, keys.ATTR_EPOCHS, 0) or 0)
            entries = CheckpointStore(checkpoints / runner.trial_name(number)).entries()
            kept = entries[-1].epoch if entries else 0
            if outcome == "moved":
                out(f"  trial {number}: {reason}")
                log.warning("trial %s: %s", number, reason)
                return
            what = "preempted" if outcome == PREEMPTED else "failed"
            out(f"  trial {number} {what} after epoch {epoch} ({reason}); restarting from "
                f"its checkpoint at epoch {kept}")
            log.warning("trial %s %s after epoch %s: %s", number, what, epoch, reason)

        preemption = config.preemption
        simulated = SimulatedPreemptions(preemption.simulate.rate_per_hour,
                                         preemption.simulate.at, config.search.seed)
        preemption_cb = None
        if simulated.rate_per_hour > 0 or simulated.at:
            preemption_cb = PreemptionCallback(simulated, recorder, preemption.simulate.signal)
        checkpoints = self.run_path / "checkpoints"
        import ray

        placement = Placement(config, price, ray.nodes)
        searcher = StudySearcher(recorder, self.accountant, config.objective.metric,
                                 config.objective.mode, new_trials, restarts, placement)
        study_cb = StudyCallback(
            recorder, self.accountant, searcher,
            max_failures=config.search.max_failures, max_restarts=preemption.max_restarts,
            store_for=lambda n: CheckpointStore(checkpoints / runner.trial_name(n)),
            preemptions=preemption_cb, placement=placement, on_end=ended,
            on_restart=restarted)
        rate = preemption.rate_per_hour
        if rate is None:
            rate = preemption.simulate.rate_per_hour
        spec = runner.TrialSpec(
            trainable=config.trainable,
            metric=config.objective.metric,
            max_epochs=config.max_epochs,
            cpu=config.resources.cpu,
            gpu=config.resources.gpu,
            devices=config.resources.processes,
            log_dir=str(self.run_path / "logs"),
            price_per_hour=price.per_hour,
            checkpoint_dir=str(checkpoints),
            mode=config.objective.mode,
            keep_last=config.checkpoint.keep_last,
            every_epochs=config.checkpoint.every_epochs,
            mtbp_s=3600.0 / rate if rate else None,
            notice_url=preemption.notice_url,
            notice_poll_s=preemption.notice_poll_s,
            grace_s=preemption.grace_s,
            oom_ladder=config.oom.ladder,
            oom_min_batch_size=config.oom.min_batch_size,
            oom_batch_param=config.oom.batch_size_param,
        )
        trainable = tune.with_resources(
            tune.with_parameters(self.backend.trainable(spec), spec=spec),
            placement.resources({"cpu": config.resources.cpu, "gpu": config.resources.gpu}),
        )
        tune_dir = self.run_path / "tune"
        tuner = tune.Tuner(
            trainable,
            param_space={},
            tune_config=tune.TuneConfig(
                metric=config.objective.metric,
                mode=config.objective.mode,
                search_alg=searcher,
                scheduler=build_scheduler(config, recorder, self.accountant, placement),
                # Restarts are new Ray trials of the same Optuna trial: the searcher,
                # not this count, says when the session is done.
                num_samples=1_000_000,
                max_concurrent_trials=concurrency,
                reuse_actors=True,
                trial_dirname_creator=_trial_dirname,
            ),
            run_config=tune.RunConfig(
                name=_next_session(tune_dir),
                storage_path=str(tune_dir),
                verbose=0,
                log_to_file=True,
                stop=AbortStopper(study_cb),
                callbacks=[study_cb, ProgressCallback(progress), AliveCallback(self.accountant),
                           *self.backend.callbacks(),
                           *([preemption_cb] if preemption_cb else [])],
                # hpsearch restarts trials itself (StudyCallback): a preemption must not
                # use up a failure retry, and checkpoints live in the run dir.
                failure_config=tune.FailureConfig(max_failures=0),
            ),
        )
        stdout, sys.stdout = sys.stdout, _WorkerDeathNotices(sys.stdout)
        try:
            tuner.fit()
        except BaseException as exc:
            self._stopped_by(exc, recorder)
            raise
        finally:
            sys.stdout = stdout
        if study_cb.disk_full is not None:
            # A trial could not write its checkpoint: it and the others stay resumable.
            self._close_ledger()
            raise faults.DiskFull(study_cb.disk_full, self.run_path)
        with _SignalsHeld():
            out(progress.status())
            leftover = recorder.unfinished()
            self.accountant.ledger.close_all(self.backend.clock(), FAILED)
        self.stop_reason = self.accountant.run_stop_reason() or searcher.closed_reason
        if study_cb.abort_reason:
            for trial_id in leftover:
                recorder.fail(trial_id, "run aborted")
            raise RunAborted(study_cb.abort_reason)
        for number in searcher.restarts:  # the budget closed before they could restart
            recorder.prune_waiting(number, StopRecord("budget", 0, self.stop_reason or
                                                      "the session ended"))
        if leftover:
            with _SignalsHeld():
                for trial_id in leftover:
                    recorder.detach(trial_id)
            raise RunInterrupted(_interrupted_text(self.run_path, len(leftover)),
                                 self.signals.exit_code)

    def _close_ledger(self) -> bool:
        """Close every open interval now, as failed (their work since the last
        checkpoint is lost: they resume from it). False if the ledger could not be
        written (a full disk): the next run closes them at their last alive event."""
        with _SignalsHeld():
            try:
                self.accountant.ledger.close_all(self.backend.clock(), FAILED)
                return True
            except OSError:
                log.warning("could not close the ledger's open intervals", exc_info=True)
                return False

    def _stopped_by(self, exc: BaseException, recorder) -> None:
        """``tuner.fit()`` raised: a second Ctrl-C/SIGTERM, a full disk, or a bug.

        The trials that were running stay RUNNING in the study (the next run resumes
        them) and their intervals are closed now, so no money goes unbilled. Raises the
        error to report (RunInterrupted, DiskFull) or returns to let ``exc`` propagate.
        """
        interrupted = isinstance(exc, KeyboardInterrupt)
        full = None if interrupted else _disk_full(exc, self.run_path, self.url)
        self._close_ledger()
        if interrupted:
            raise RunInterrupted(_interrupted_text(self.run_path, len(recorder.unfinished())),
                                 self.signals.exit_code) from None
        if full is not None:
            raise full from None

    def _summarise(self, recorder) -> RunResult:
        config, out, currency = self.config, self.out, self.price.currency
        study = recorder.study
        rows = _state_rows(study)
        best = next((r for r in rows if r["state"] == "COMPLETE"), None)
        out("")
        if rows:
            out(f"Top trials of study '{config.name}' ({len(rows)} finished):")
            for line in top_table(rows, config.objective.metric, config.space):
                out("  " + line)
        if best is not None:
            out(f"Best: trial {best['number']} {config.objective.metric}={best['value']:.4g}")
        else:
            out("No trial completed.")
        ledger = self.accountant.ledger
        cap = config.budget.max_cost
        out(f"Spent: {fmt_money(ledger.spent(), currency)}"
            f" (wasted {fmt_money(ledger.wasted(), currency)})"
            + (f" of budget.max_cost {fmt_money(cap, currency)}" if cap is not None else ""))
        if self.stop_reason:
            hint = (" Raise the budget and run the same command again to continue the "
                    "study." if "budget." in self.stop_reason else "")
            out(f"Stopped early: {self.stop_reason}.{hint}")
        try:
            from hpsearch.adapters.results import write_study_report

            report_files = [p.name for p in write_study_report(study, self.run_path)]
            out(f"Report: {display_path(self.run_path / report_files[0])}")
        except Exception:  # noqa: BLE001 - the study is the record; a report is derived
            log.exception("writing the report failed")
            report_files = []
            out(f"Report: not written (see hpsearch.log); retry with python -m hpsearch "
                f"report {display_path(self.run_path)}")
        out(f"Results: {display_path(self.run_path)}/ (space.yaml, ledger.jsonl, "
            + "".join(f"{name}, " for name in report_files)
            + "tune/, logs/, hpsearch.log)")
        out(f"Dashboard: optuna-dashboard {display_url(self.url, self.run_path)}")
        best_trial = study.best_trial if best is not None else None
        return RunResult(study=study, best_trial=best_trial, run_dir=self.run_path,
                         storage_url=self.url, spent=ledger.spent(), currency=currency,
                         stop_reason=self.stop_reason)
