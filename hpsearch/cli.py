"""Command line: ``python -m hpsearch COMMAND ...``; returns an exit code.

Exit codes (see :mod:`hpsearch.errors`):

* 0: success; a run where some trials failed while others completed says how many
  failed and where their logs are, and still exits 0.
* 1: the run could not succeed: its first ``search.fail_fast`` trials all failed with the
  same error, or no trial of the session completed; or another runtime failure.
* 2: bad input, nothing written: the config or the trainable's import path, a read-only
  run dir, a run dir another driver holds, a study that belongs to another run dir, a
  damaged ledger; or the trainable's contract broken (found by the first trial that
  shows it; the run stops at once).
* 75: the disk filled up: the run stopped cleanly; free space and ``resume``.
* 130: interrupted by Ctrl-C, 143 by SIGTERM (``resume`` continues the run).

Errors are one line on stderr, without a traceback (tracebacks of failed trials are in
their ``logs/trial-NNNN.log``). Parsing and ``--help`` import neither Ray nor torch.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Sequence

from hpsearch.version import __version__
from hpsearch.errors import EXIT_INTERRUPTED, HpsearchError

DESCRIPTION = """\
Cost-aware hyperparameter search: Ray Tune schedules PyTorch Lightning trials,
Optuna proposes configurations and records every trial in a study.

examples:
  python -m hpsearch run search_spaces/digits_mlp.yaml
  python -m hpsearch run search_spaces/digits_mlp.yaml --set search.n_trials=4
  python -m hpsearch validate search_spaces/digits_mlp.yaml
  python -m hpsearch catalog --gpu a100 --spot
  python -m hpsearch plan search_spaces/digits_mlp.yaml --precision bf16
  python -m hpsearch report runs/digits-mlp
  python -m hpsearch dashboard runs/digits-mlp
  python -m hpsearch doctor search_spaces/digits_mlp.yaml --address 10.0.0.1:6379
  python -m hpsearch resume runs/digits-mlp
  python -m hpsearch repair runs/digits-mlp

exit codes: 0 done (some trials may have failed: the run says how many); 1 the run
could not succeed (its first trials failed alike, or none completed); 2 bad input,
refused or the trainable's contract broken, nothing written; 75 disk full (free space,
then resume); 130 Ctrl-C; 143 SIGTERM (resume continues the run)
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m hpsearch",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"hpsearch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in (_add_run, _add_resume, _add_repair, _add_catalog, _add_plan, _add_validate,
                _add_report, _add_dashboard, _add_doctor):
        add(sub)
    return parser


def _add_run(sub) -> None:
    run = sub.add_parser(
        "run",
        help="run (or continue) a search described by a space.yaml",
        description=(
            "Run a search. Results go to the run dir (default runs/<name>/): the Optuna "
            "study (optuna.db), the ledger of money (ledger.jsonl), the trials' "
            "checkpoints (checkpoints/, or checkpoint.storage), Ray Tune's experiment "
            "(tune/), the resolved config (space.yaml), the driver log (hpsearch.log) "
            "and the report (report.html, .csv, .json, .md). Running "
            "again on the same run dir continues the study: its finished trials count "
            "toward search.n_trials, its unfinished ones resume from their checkpoints."
        ),
    )
    run.add_argument("space", metavar="SPACE.yaml", help="the search description")
    run.add_argument("--run-dir", metavar="DIR", help="where results go (default runs/<name>/)")
    _add_set(run)
    _add_progress(run)


def _add_resume(sub) -> None:
    resume = sub.add_parser(
        "resume",
        help="resume a run dir after its driver stopped (Ctrl-C, crash, SIGKILL)",
        description=(
            "Resume the search of RUN_DIR with the config it ran with (its space.yaml): "
            "finished trials are kept, trials that were running continue from their "
            "latest checkpoints, the ledger and the trial count carry on. Same as "
            "`run RUN_DIR/space.yaml --run-dir RUN_DIR`."
        ),
    )
    resume.add_argument("run_dir", metavar="RUN_DIR")
    _add_set(resume)
    _add_progress(resume)


def _add_repair(sub) -> None:
    repair = sub.add_parser(
        "repair",
        help="repair a run dir's ledger.jsonl after a damaged line (keeps a backup)",
        description=(
            "Repair RUN_DIR/ledger.jsonl when a run refuses it for a corrupt line: every "
            "valid event is kept, each damaged line is dropped and reported, an "
            "interval whose open line was lost is billed from the last event before the "
            "damage, one whose close line was lost stays open (the next run closes it at "
            "the last moment it was known running). The original file is kept as "
            "ledger.jsonl.corrupt-<time>. Refused while a driver runs on RUN_DIR."
        ),
    )
    repair.add_argument("run_dir", metavar="RUN_DIR")


def _add_catalog(sub) -> None:
    catalog = sub.add_parser(
        "catalog",
        help="list the price catalogue's offers, cheapest first",
        description="List rentable offers from the price catalogue, cheapest first. Prices "
                    "are per instance-hour; a trial pays its share of the instance.",
    )
    catalog.add_argument("--gpu", metavar="NAME", help="GPU model contains NAME (a100, 4090)")
    catalog.add_argument("--spot", action="store_true", help="rank by spot price")
    catalog.add_argument("--max-price", metavar="X", type=float, help="at most X per hour")
    catalog.add_argument("--currency", metavar="CODE", help="only offers in this currency")
    catalog.add_argument("--catalog", metavar="FILE",
                         help="a CSV extending or overriding the packaged catalogue")


def _add_validate(sub) -> None:
    validate = sub.add_parser(
        "validate",
        help="check a space.yaml (and its trainable path) without running anything",
        description="Validate a space.yaml and print the resolved config with defaults.",
    )
    validate.add_argument("space", metavar="SPACE.yaml")
    validate.add_argument(
        "--run-dir", metavar="DIR",
        help="the run dir it would run in (default runs/<name>/): a search.prior naming "
             "this run's own study is refused, as run refuses it")
    _add_set(validate)
    validate.add_argument(
        "--no-import", action="store_true",
        help="do not import the trainable (skips the check of its path; fast)",
    )


def _add_report(sub) -> None:
    report = sub.add_parser(
        "report",
        help="write the cost/accuracy report of a run (HTML, CSV, JSON, Markdown)",
        description=(
            "Write the report of a study: per-trial metrics and money, the best trial, "
            "money spent, wasted and saved (estimates, with their method), the Pareto "
            "front of the metric vs cost, and plots (HTML, self-contained). Read from the "
            "Optuna storage alone: works on any storage URL and on a run in progress."
        ),
    )
    report.add_argument("source", metavar="RUN_DIR_OR_URL",
                        help="a run dir (runs/<name>) or an Optuna storage URL")
    report.add_argument("--format", default="html,csv,json,md", metavar="LIST",
                        help="comma-separated formats among html, csv, json, md "
                             "(default: all)")
    report.add_argument("--out", metavar="DIR",
                        help="where to write report.<format> (default: the run dir, or "
                             "./report for a URL)")
    report.add_argument("--study", metavar="NAME",
                        help="the study, if the storage holds several")


def _add_dashboard(sub) -> None:
    dashboard = sub.add_parser(
        "dashboard",
        help="serve a run's study in optuna-dashboard until Ctrl-C",
        description="Start optuna-dashboard on the run's storage and print its URL: "
                    "learning curves, params, states (pruned included) and each trial's "
                    "cost attributes. Runs until Ctrl-C.",
    )
    dashboard.add_argument("source", metavar="RUN_DIR_OR_URL",
                           help="a run dir (runs/<name>) or an Optuna storage URL")
    dashboard.add_argument("--port", type=int, default=8080, metavar="P",
                           help="port (default 8080)")
    dashboard.add_argument("--host", default="127.0.0.1",
                           help="address to listen on (default 127.0.0.1)")


def _positive_seconds(text: str) -> float:
    """An argparse type: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text!r}")
    return value


def _add_doctor(sub) -> None:
    doctor = sub.add_parser(
        "doctor",
        help="check this machine (and a Ray cluster) before a run: torch/CUDA, GPUs, "
             "packages, storage",
        description=(
            "Check what a run needs, one line each with what to do when it is not ok: "
            "torch and its CUDA build, the GPUs NVML sees (driver, memory) and whether "
            "torch can use them, Lightning/Ray/Optuna/optuna-dashboard, the Ray cluster "
            "(with --address or cluster.address: its resources and each node's kind; "
            "else no Ray is started), and with SPACE.yaml its run dir and Optuna storage "
            "(writable, reachable) and the price of a trial-hour. Writes nothing. Exit "
            "code 1 if a check failed, else 0."
        ),
    )
    doctor.add_argument("space", metavar="SPACE.yaml", nargs="?",
                        help="also check this search's run dir, storage, price and cluster")
    _add_set(doctor)
    doctor.add_argument("--run-dir", metavar="DIR",
                        help="the run dir to check (default runs/<name>/, or ./runs "
                             "without SPACE.yaml)")
    doctor.add_argument("--address", metavar="ADDR",
                        help="a running Ray cluster to check (HOST:PORT of the head, or "
                             "auto); default cluster.address of SPACE.yaml")
    doctor.add_argument("--timeout", metavar="S", type=_positive_seconds, default=None,
                        help="most seconds the Ray cluster may take to answer (default "
                             "30; a loaded head or a slow link needs more)")
    doctor.add_argument("--json", action="store_true",
                        help="print the checks as a JSON list of {name, status, message, "
                             "fix}")


def _add_progress(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quiet", action="store_true", help="print nothing but errors")
    parser.add_argument(
        "--progress-interval", metavar="S", type=float, default=10.0,
        help="seconds between status lines (default 10)",
    )


def _add_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set", metavar="KEY=VALUE", action="append", default=[], dest="overrides",
        help="override a key, typed like YAML (repeatable), e.g. --set search.n_trials=4",
    )


def _add_plan(sub: argparse._SubParsersAction) -> None:
    plan = sub.add_parser(
        "plan",
        help="before renting: GPU memory per trial, the GPUs that fit, the search's cost "
             "on each",
        description=(
            "Estimate, before spending anything, what a search needs and costs. Builds "
            "the trainable at one configuration of the space and trains a few batches on "
            "this machine's CPU (a few seconds; nothing is written). From that: GPU "
            "memory per trial (weights, gradients and optimizer state by precision, plus "
            "the activations autograd saved for one batch, plus a CUDA context "
            "allowance); the catalogue GPUs that fit; and the whole search's cost on each "
            "(trials x (start-up + epochs x time per epoch), each trial billed with the "
            "offer's minimum), on-demand and spot side by side, cheapest first, with the "
            "cheapest that fits recommended per currency. Times on GPUs are scaled from "
            "the CPU probe by nominal throughput (a rough guide); --throughput gives a "
            "measured one."
        ),
    )
    plan.add_argument("space", metavar="SPACE.yaml", help="the search description")
    _add_set(plan)
    plan.add_argument(
        "--point", choices=["mid", "high"], default="mid",
        help="configuration probed: mid = the middle of each range (geometric with "
             "log: true), first categorical choice; high = the top of each range and the "
             "largest numeric choice (the largest model and batch); default mid")
    plan.add_argument(
        "--precision", choices=["fp32", "fp16", "bf16"], default="fp32",
        help="training precision on the GPU: fp32, or fp16/bf16 mixed precision "
             "(Lightning's 16-mixed/bf16-mixed); default fp32")
    plan.add_argument(
        "--optimizer", choices=["adam", "adamw", "sgd"],
        help="assume this optimizer's state (adam/adamw: 2 values per parameter, sgd "
             "with momentum: 1) instead of the state measured from the model's own")
    plan.add_argument(
        "--throughput", metavar="SAMPLES_PER_S[@GPU_MODEL]",
        help="a training throughput you measured (samples per second of one trial), "
             "e.g. 1200@A100-80GB: scaled to the other GPUs by nominal throughput; "
             "without @GPU_MODEL taken as is for every GPU")
    plan.add_argument("--trials", metavar="N",
                      help="trials of the search (default search.n_trials)")
    plan.add_argument("--epochs", metavar="N",
                      help="epochs per trial (default max_epochs: no trial pruned)")
    plan.add_argument("--currency", metavar="CUR",
                      help="only offers in this currency (default pricing.currency, else "
                           "all, one recommendation per currency)")
    plan.add_argument("--probe-batches", metavar="N", default="8",
                      help="training batches timed on CPU after one warm-up (default 8)")
    plan.add_argument("--json", action="store_true",
                      help="print the plan as JSON (memory in bytes, times in seconds, "
                           "every offer, the recommendation per currency)")


def _count(option: str, value: str | None) -> int | None:
    """``--trials N`` and the like: an integer >= 1, or None when not given."""
    from hpsearch.errors import ConfigError

    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(option, "must be an integer >= 1", value) from None
    if number < 1:
        raise ConfigError(option, "must be an integer >= 1", value)
    return number


def _plan(args: argparse.Namespace) -> int:
    import json
    import os

    from hpsearch.money import catalog as catalog_mod
    from hpsearch.spec import config as config_mod
    from hpsearch.tools import plan as plan_mod
    from hpsearch.tools.plan_json import to_json
    from hpsearch.tools.plan_point import representative_params
    from hpsearch.tools.plan_speed import parse_throughput
    from hpsearch.tools.plan_text import render
    from hpsearch.report.progress import text_table

    trials = _count("--trials", args.trials)
    epochs = _count("--epochs", args.epochs)
    probe_batches = _count("--probe-batches", args.probe_batches)
    config = config_mod.load(args.space, args.overrides)
    catalog = catalog_mod.load(config.pricing.catalog)
    throughput = None
    if args.throughput is not None:
        models = sorted({o.gpu_model for o in catalog.offers.values() if o.gpu_model})
        throughput = parse_throughput(args.throughput, models)
    currency = args.currency or config.pricing.currency
    options = dict(precision=args.precision, optimizer=args.optimizer,
                   throughput=throughput)
    currency = plan_mod.check_options(
        catalog, trials=trials or 1, epochs=epochs or 1, currency=currency, **options)
    params = representative_params(config.space, args.point)
    threads = max(1, round(config.resources.cpu))
    if sys.stderr.isatty() and not args.json:
        print(f"probing {config.trainable} on CPU ({threads} thread(s))...",
              file=sys.stderr, flush=True)
    from hpsearch.adapters.trial.probe import probe

    figures = probe(config.trainable, params, precision=args.precision,
                    probe_batches=probe_batches, threads=threads)
    plan = plan_mod.make_plan(config, catalog, figures, trials=trials, epochs=epochs,
                              point=args.point, currency=currency,
                              node_cpus=float(os.cpu_count() or 1), **options)
    if args.json:
        print(json.dumps(to_json(plan), indent=2))
    else:
        for line in render(plan, text_table):
            print(line)
    return 0


def _validate(args: argparse.Namespace) -> int:
    import yaml

    from hpsearch.spec import config as config_mod
    from hpsearch.spec import study_storage

    from hpsearch.money import pricing
    from hpsearch.money.fmt import fmt_money

    config = config_mod.load(args.space, args.overrides)
    if config.storage is not None:
        study_storage.check_storage(config.storage)
    config_mod.check_training_cpus(config)
    from hpsearch.adapters import nvml

    gpu = nvml.for_pricing(config)
    price = pricing.resolve(config, gpu=gpu)
    if not args.no_import:
        from hpsearch.spec.trainable import resolve

        resolve(config.trainable)
    from pathlib import Path

    from hpsearch.driver.prepare import prior_text, read_prior
    from hpsearch.driver.rundir import default_run_dir, storage_url_for

    run_path = Path(args.run_dir) if args.run_dir else default_run_dir(config.name)
    prior = read_prior(config, storage_url_for(config, run_path.absolute()))
    sys.stdout.write(yaml.safe_dump(config.to_dict(), sort_keys=False))
    for warning in config.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"ok: {args.space} is valid ({len(config.space)} parameters){prior_text(prior)}; "
          f"a trial-hour costs {fmt_money(price.per_hour, price.currency)} on "
          f"{price.instance}{' (spot)' if price.spot else ''}", file=sys.stderr)
    if price.note:
        print(price.note, file=sys.stderr)
    reason = pricing.auto_reason(config, gpu=gpu)
    if reason:
        print(f"pricing.spot: auto chose {'spot' if price.spot else 'on-demand'}: {reason}",
              file=sys.stderr)
    return 0


def _catalog(args: argparse.Namespace) -> int:
    from hpsearch.money import catalog as catalog_mod
    from hpsearch.report.progress import text_table

    catalog = catalog_mod.load(args.catalog)
    offers = catalog.search(gpu=args.gpu, spot=args.spot, max_price=args.max_price,
                            currency=args.currency.upper() if args.currency else None)
    if not offers:
        print("no offer matches", file=sys.stderr)
        return 1

    def price(value: float | None) -> str:
        return "-" if value is None else f"{value:g}"

    def vm(offer) -> str:
        if not offer.gpu_only:
            return "incl."
        known = [v for v in (offer.vm_on_demand_per_hour, offer.vm_spot_per_hour)
                 if v is not None]
        return "+" + "/".join(f"{v:g}" for v in known) if known else "extra, unknown"

    rows = [[o.key, o.gpu_model or "-", str(o.gpu_count), price(o.gpu_memory_gb),
             o.currency, price(o.on_demand_per_hour), price(o.spot_per_hour), vm(o),
             o.band, f"{o.billing_granularity_s}s/min {o.min_billing_s}s",
             o.region or "-", o.snapshot_date] for o in offers]
    header = ["instance", "gpu", "n", "mem_gb", "cur", "on_demand/h", "spot/h", "vm/h",
              "interrupt", "billing", "region", "snapshot"]
    for line in text_table(header, rows):
        print(line)
    if any(o.gpu_only for o in offers):
        print("vm/h: a GPU-only row's price leaves out the VM it is attached to (+ its "
              "on-demand/spot price where the catalogue knows it); interrupt: AWS Spot "
              "Instance Advisor band, unknown where the provider publishes none")
    return 0


def _report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from hpsearch.report.writers import parse_formats, write

    formats = parse_formats(args.format)
    from hpsearch.adapters.optuna.results import load_report

    report, source = load_report(args.source, args.study)
    out = Path(args.out) if args.out else (source.run_dir or Path("report"))
    # A failed write raises ReportWriteError: one line naming the file and the cause
    # ("disk full at PATH"), the report files already there unchanged.
    paths = write(report, out, formats, version=__version__)
    for path in paths:
        print(path)
    return 0


def _dashboard(args: argparse.Namespace) -> int:
    from hpsearch.adapters.optuna.dashboard import check_port, serve
    from hpsearch.adapters.optuna.results import choose_study, resolve_source, study_names

    check_port(args.host, args.port)
    source = resolve_source(args.source)
    names = study_names(source)
    if not names:
        choose_study(names, None, source, args.source)  # raises: the storage has no study
    return serve(source.url, args.host, args.port,
                 out=lambda line: print(line, flush=True))


def _doctor(args: argparse.Namespace) -> int:
    from hpsearch.tools import doctor
    from hpsearch.tools.doctor_checks import exit_code, render, summary, to_json

    checks = doctor.diagnose(args.space, args.overrides, args.run_dir, args.address,
                             **({} if args.timeout is None
                                else {"ray_timeout_s": args.timeout}))
    if args.json:
        print(to_json(checks))
    else:
        for line in render(checks):
            print(line)
        print(summary(checks))
    return exit_code(checks)


def _repair(args: argparse.Namespace) -> int:
    from pathlib import Path

    from hpsearch.errors import ConfigError
    from hpsearch.recovery.faults import RunLock
    from hpsearch.money.ledger_repair import repair

    run_dir = Path(args.run_dir)
    ledger = run_dir / "ledger.jsonl"
    if not ledger.is_file():
        raise ConfigError("RUN_DIR", "is not a run dir with a ledger (no ledger.jsonl)",
                          args.run_dir)
    with RunLock(run_dir):  # never under a running driver
        result = repair(ledger)
    for line in result.lines():
        print(line)
    return 0


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from hpsearch.driver import run
    from hpsearch.errors import ConfigError

    if args.command == "resume":
        args.space = Path(args.run_dir) / "space.yaml"
        if not args.space.is_file():
            raise ConfigError("RUN_DIR", "is not a run dir (it has no space.yaml)",
                              args.run_dir)
    emit = None if args.quiet else (lambda line: print(line, flush=True))
    run(args.space, args.overrides, args.run_dir, emit=emit,
        progress_interval_s=args.progress_interval)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the command; return the process exit code."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "validate":
            return _validate(args)
        if args.command == "catalog":
            return _catalog(args)
        if args.command == "plan":
            return _plan(args)
        if args.command == "report":
            return _report(args)
        if args.command == "dashboard":
            return _dashboard(args)
        if args.command == "doctor":
            return _doctor(args)
        if args.command == "repair":
            return _repair(args)
        return _run(args)
    except HpsearchError as exc:
        print(f"hpsearch: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("hpsearch: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def console(argv: Sequence[str] | None = None) -> int:
    """:func:`main` as a command (``hpsearch``, ``python -m hpsearch``): once it has
    returned, Ctrl-C and SIGTERM are ignored. What is left is the interpreter's
    teardown (Ray's exit hooks among it), which Ctrl-C held down must not turn into a
    traceback and another exit code than the one the command chose."""
    code = main(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return code
