"""Command line: ``python -m hpsearch COMMAND ...``; returns an exit code.

Exit codes: 0 success; 2 bad input (nothing written) or a run aborted because its trials
cannot run as configured; 1 any other failure; 130 interrupted. Errors are one line on
stderr, without a traceback. Parsing and ``--help`` import neither Ray nor torch.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from hpsearch import __version__
from hpsearch.errors import EXIT_INTERRUPTED, HpsearchError

DESCRIPTION = """\
Cost-aware hyperparameter search: Ray Tune schedules PyTorch Lightning trials,
Optuna proposes configurations and records every trial in a study.

examples:
  python -m hpsearch run search_spaces/digits_mlp.yaml
  python -m hpsearch run search_spaces/digits_mlp.yaml --set search.n_trials=4
  python -m hpsearch validate search_spaces/digits_mlp.yaml
  python -m hpsearch catalog --gpu a100 --spot
  python -m hpsearch report runs/digits-mlp
  python -m hpsearch dashboard runs/digits-mlp
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m hpsearch",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"hpsearch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    run = sub.add_parser(
        "run",
        help="run (or continue) a search described by a space.yaml",
        description=(
            "Run a search. Results go to the run dir (default runs/<name>/): the Optuna "
            "study (optuna.db), Ray Tune's experiment with checkpoints (tune/), the "
            "resolved config (space.yaml) and the driver log (hpsearch.log). Running "
            "again on the same run dir continues the study: its finished trials count "
            "toward search.n_trials, its unfinished ones resume from their checkpoints."
        ),
    )
    run.add_argument("space", metavar="SPACE.yaml", help="the search description")
    run.add_argument("--run-dir", metavar="DIR", help="where results go (default runs/<name>/)")
    _add_set(run)
    _add_progress(run)

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

    validate = sub.add_parser(
        "validate",
        help="check a space.yaml (and its trainable path) without running anything",
        description="Validate a space.yaml and print the resolved config with defaults.",
    )
    validate.add_argument("space", metavar="SPACE.yaml")
    _add_set(validate)
    validate.add_argument(
        "--no-import", action="store_true",
        help="do not import the trainable (skips the check of its path; fast)",
    )

    report = sub.add_parser(
        "report",
        help="write the cost/accuracy report of a run (HTML, CSV, JSON, Markdown)",
        description=(
            "Write the report of a study: per-trial metrics and money, the best trial, "
            "money spent, wasted and saved (estimates, with their method), the Pareto "
            "front of accuracy vs cost, and plots (HTML, self-contained). Read from the "
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
    return parser


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


def _validate(args: argparse.Namespace) -> int:
    import yaml

    from hpsearch import config as config_mod

    from hpsearch import pricing
    from hpsearch.budget import fmt_money

    config = config_mod.load(args.space, args.overrides)
    price = pricing.resolve(config)
    if not args.no_import:
        from hpsearch.trainable import resolve

        resolve(config.trainable)
    sys.stdout.write(yaml.safe_dump(config.to_dict(), sort_keys=False))
    print(f"ok: {args.space} is valid ({len(config.space)} parameters); a trial-hour costs "
          f"{fmt_money(price.per_hour, price.currency)} on {price.instance}"
          f"{' (spot)' if price.spot else ''}", file=sys.stderr)
    reason = pricing.auto_reason(config)
    if reason:
        print(f"pricing.spot: auto chose {'spot' if price.spot else 'on-demand'}: {reason}",
              file=sys.stderr)
    return 0


def _catalog(args: argparse.Namespace) -> int:
    from hpsearch import catalog as catalog_mod
    from hpsearch.progress import text_table

    catalog = catalog_mod.load(args.catalog)
    offers = catalog.search(gpu=args.gpu, spot=args.spot, max_price=args.max_price,
                            currency=args.currency.upper() if args.currency else None)
    if not offers:
        print("no offer matches", file=sys.stderr)
        return 1

    def price(value: float | None) -> str:
        return "-" if value is None else f"{value:g}"

    rows = [[o.key, o.gpu_model or "-", str(o.gpu_count), price(o.gpu_memory_gb),
             o.currency, price(o.on_demand_per_hour), price(o.spot_per_hour),
             o.interruption_band or "-", f"{o.billing_granularity_s}s/min {o.min_billing_s}s",
             o.region or "-", o.snapshot_date] for o in offers]
    header = ["instance", "gpu", "n", "mem_gb", "cur", "on_demand/h", "spot/h", "interrupt",
              "billing", "region", "snapshot"]
    for line in text_table(header, rows):
        print(line)
    return 0


def _report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from hpsearch.errors import ConfigError
    from hpsearch.report_writers import parse_formats, write

    formats = parse_formats(args.format)
    from hpsearch.adapters.results import load_report

    report, source = load_report(args.source, args.study)
    out = Path(args.out) if args.out else (source.run_dir or Path("report"))
    try:
        paths = write(report, out, formats, version=__version__)
    except OSError as exc:
        raise ConfigError("--out", f"cannot write the report ({exc.strerror})",
                          str(out)) from None
    for path in paths:
        print(path)
    return 0


def _dashboard(args: argparse.Namespace) -> int:
    from hpsearch.adapters.dashboard import check_port, serve
    from hpsearch.adapters.results import choose_study, resolve_source, study_names

    check_port(args.host, args.port)
    source = resolve_source(args.source)
    names = study_names(source)
    if not names:
        choose_study(names, None, source, args.source)  # raises: the storage has no study
    return serve(source.url, args.host, args.port,
                 out=lambda line: print(line, flush=True))


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
        if args.command == "report":
            return _report(args)
        if args.command == "dashboard":
            return _dashboard(args)
        return _run(args)
    except HpsearchError as exc:
        print(f"hpsearch: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("hpsearch: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
