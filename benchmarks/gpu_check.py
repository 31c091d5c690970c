"""The real CUDA path on a machine with an NVIDIA GPU: the checks of ``gpu_check.sh``.

    python -m benchmarks.gpu_check CHECK --out DIR

``benchmarks/gpu_check.sh`` runs them in this order, each under its own time budget
(the script's header lists them), and sums them up; one check alone is for a rerun:

- ``doctor``: ``python -m hpsearch doctor`` on the GPU example: no check fails, and
  torch uses the GPUs NVML lists.
- ``plan``: ``python -m hpsearch plan search_spaces/digits_gpu.yaml --json``: its
  memory estimate per trial and the offer it recommends.
- ``digits``: a short ``python -m hpsearch run`` of the GPU example (4 trials, 3
  epochs, ``resources.gpu=0.25``: the trials share a GPU, no pruning): every trial
  completes on CUDA (GPU ids from Ray, torch memory on the device, no CPU fallback in
  the trial logs) with its NVML utilisation and memory in the study.
- ``oom``: ``benchmarks/gpu_oom.yaml``: a trial that really runs out of GPU memory at
  its first batch size (:mod:`benchmarks.gpu_trainables`) climbs the ladder's
  ``halve_batch`` rung once and completes; the study records the rung.
- ``report``: ``python -m hpsearch report`` on the digits run: the money paid for idle
  GPU time is in the report, and each trial's GPU use.
- ``sampler``: :class:`hpsearch.adapters.nvml.GpuSampler` on the first GPU while a
  matmul loop keeps it busy, then idle: busy reads higher.
- ``plan_vs_peak``: plan's memory estimate at the digits trial that reserved the most
  GPU memory, against that real peak (torch's caching allocator, per process).
- ``ddp``: with two or more GPUs, one trial of the GPU example on two GPUs (DDP).

Each check prints one line, ``PASS <check>: <figures>`` or ``FAIL <check>: <why>``,
and exits 0 on PASS, 1 on FAIL. The hpsearch commands run as a user runs them (a child
``python -m hpsearch ...`` in the repository root), their output in
``DIR/<check>.cli.log`` and ``DIR/<check>.cli.err``; run dirs and report files go
under ``DIR``. The judges (``judge_*``) take plain data and are tested on CPU
(``tests/test_gpu_check.py``); the checks need a GPU, so CI does not run them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from hpsearch import keys

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "search_spaces" / "digits_gpu.yaml"
OOM_SPACE = ROOT / "benchmarks" / "gpu_oom.yaml"

#: The short digits run: few trials, few epochs, four to a GPU, every trial to its end.
DIGITS_TRIALS = 4
DIGITS_EPOCHS = 3
DIGITS_GPU = 0.25
DIGITS_SETS = (f"search.n_trials={DIGITS_TRIALS}", f"max_epochs={DIGITS_EPOCHS}",
               f"resources.gpu={DIGITS_GPU}", "pruning.policy=none")

#: Where each check's run dir goes under ``--out``.
DIGITS_DIR = "digits-gpu"
OOM_DIR = "gpu-oom"
DDP_DIR = "gpu-ddp"
REPORT_DIR = "report"

#: The report's row for the money paid while trials' GPUs were idle (its Markdown).
IDLE_ROW = "Paid for idle GPU time (estimate)"
#: What the trial runner logs when a GPU trial trains on CPU after all.
CPU_FALLBACK = "training on CPU"


@dataclass(frozen=True)
class Verdict:
    """One check's outcome: passed or not, and the figures or the reason."""

    ok: bool
    text: str

    def line(self, name: str) -> str:
        """``PASS <name>: <text>`` or ``FAIL <name>: <text>``: what the script prints."""
        return f"{'PASS' if self.ok else 'FAIL'} {name}: {self.text}"


def passed(text: str) -> Verdict:
    return Verdict(True, text)


def failed(text: str) -> Verdict:
    return Verdict(False, text)


# ---------------------------------------------------------------------------------------
# Running hpsearch as a user does, and reading what it left.


def hpsearch_cli(args: Sequence[str], out: Path, name: str) -> tuple[int, str, str]:
    """Run ``python -m hpsearch ARGS`` in the repository root as a user would, its
    stdout and stderr written as they come to ``out/<name>.cli.log`` and
    ``out/<name>.cli.err``; ``(exit code, stdout, stderr)``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    log, err = out / f"{name}.cli.log", out / f"{name}.cli.err"
    with open(log, "w", encoding="utf-8") as stdout, \
            open(err, "w", encoding="utf-8") as stderr:
        stderr.write(f"$ python -m hpsearch {' '.join(args)}\n")
        stderr.flush()
        code = subprocess.run([sys.executable, "-m", "hpsearch", *args], cwd=ROOT, env=env,
                              stdin=subprocess.DEVNULL, stdout=stdout,
                              stderr=stderr).returncode
    return (code, log.read_text(encoding="utf-8", errors="replace"),
            err.read_text(encoding="utf-8", errors="replace"))


def last_line(text: str) -> str:
    """The last non-empty line of ``text`` (a command's output), or ``(no output)``."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def exited(what: str, code: int, stderr: str) -> Verdict:
    """A command that failed: its exit code and the last line of its stderr (where the
    CLI's one-line errors go)."""
    return failed(f"{what} exited {code}: {last_line(stderr)}")


def study_trials(run_dir: Path) -> list[dict[str, Any]]:
    """The trials of a run dir's study as plain data: ``number``, ``state`` (name),
    ``value``, ``params``, ``attrs`` (user attributes) and ``steps`` (epochs
    reported)."""
    import optuna

    from hpsearch.adapters.optuna.results import resolve_source

    source = resolve_source(run_dir)
    study = optuna.load_study(study_name=source.name_hint, storage=source.url)
    return [{"number": t.number, "state": t.state.name, "value": t.value,
             "params": dict(t.params), "attrs": dict(t.user_attrs),
             "steps": sorted(t.intermediate_values)} for t in study.get_trials()]


def trial_logs(run_dir: Path) -> str:
    """Every trial log of a run dir (``logs/trial-*.log``), concatenated."""
    return "".join(p.read_text(encoding="utf-8", errors="replace")
                   for p in sorted((run_dir / "logs").glob("trial-*.log")))


def visible_gpus() -> int:
    """GPUs NVML lists that ``CUDA_VISIBLE_DEVICES`` leaves visible."""
    from hpsearch.adapters import nvml

    count = nvml.inventory().count
    visible = nvml.visible_indices()
    return count if visible is None else len([i for i in visible if i < count])


def gpu_ids(attrs: Mapping[str, Any]) -> list[str]:
    """The GPU ids a trial's attributes name (the study keeps them comma-joined:
    ``"0"``, ``"0,1"``); empty when Ray gave it none."""
    return [g for g in str(attrs.get(keys.ATTR_GPU_IDS) or "").split(",") if g]


def _span(values: Sequence[float], unit: str, digits: int = 0) -> str:
    low, high = min(values), max(values)
    if round(low, digits) == round(high, digits):
        return f"{low:.{digits}f}{unit}"
    return f"{low:.{digits}f}-{high:.{digits}f}{unit}"


# ---------------------------------------------------------------------------------------
# The judges: plain data in, a verdict out (the tests feed them made-up cases).


def judge_doctor(code: int, stdout: str, stderr: str) -> Verdict:
    """``doctor --json``'s output: no check failed and torch uses NVML's GPUs."""
    try:
        checks = {c["name"]: c for c in json.loads(stdout)}
    except (ValueError, KeyError, TypeError):
        return failed(f"doctor --json printed no check list (exit {code}): "
                      f"{last_line(stderr)}")
    bad = [f"{c['name']}: {c['message']}" for c in checks.values() if c["status"] == "fail"]
    if bad:
        return failed("; ".join(bad)[:600])
    cuda, nvml = checks.get("cuda"), checks.get("nvml")
    if cuda is None or nvml is None or nvml["status"] != "ok":
        return failed(f"NVML: {nvml['message'] if nvml else 'no nvml check'}")
    if cuda["status"] != "ok" or not cuda["message"].startswith("torch uses the"):
        return failed(f"cuda: {cuda['message']}")
    if code != 0:
        return failed(f"doctor exited {code} with no failed check")
    warnings = [name for name, c in checks.items() if c["status"] == "warn"]
    figures = [checks["torch"]["message"], nvml["message"]]
    if "pricing" in checks:
        figures.append(checks["pricing"]["message"])
    if warnings:
        figures.append(f"warnings: {', '.join(warnings)}")
    return passed("; ".join(figures))


def judge_plan(code: int, stdout: str, stderr: str) -> Verdict:
    """``plan --json``'s output: an estimate per trial, printed with what it stands on."""
    if code != 0:
        return exited("plan", code, stderr)
    try:
        plan = json.loads(stdout)
        memory = plan["memory"]
    except (ValueError, KeyError, TypeError):
        return failed(f"plan --json printed no plan: {last_line(stdout)}")
    mib = 2**20
    params = ", ".join(f"{k} {v}" for k, v in plan["params"].items())
    recs = "; ".join(f"{r['instance']} ({r['gpu']}, {r['kind']}) {r['cost']:.4g} {cur}"
                     for cur, r in (plan.get("recommendation") or {}).items()
                     if r.get("cost") is not None)
    if not memory.get("total_bytes"):
        return failed(f"no memory estimate at {params}")
    return passed(f"estimate {memory['total_bytes'] / mib:.0f} MiB per trial "
                  f"({memory['training_bytes'] / mib:.1f} MiB training + "
                  f"{memory['cuda_context_bytes'] / mib:.0f} MiB CUDA allowance) at "
                  f"{params}; {plan['trials']} trials x {plan['epochs']} epochs cheapest on "
                  f"{recs or 'no offer'}")


#: The run's first line says how many trials it runs at once.
AT_ONCE = re.compile(r"trial\(s\), (\d+) at a time")


def judge_digits(trials: Sequence[Mapping[str, Any]], logs: str, n_gpus: int,
                 stdout: str = "") -> Verdict:
    """The short digits run (``trials``: :func:`study_trials`; ``logs``: its trial
    logs; ``stdout``: what ``run`` printed): every trial completed on CUDA, several at
    a time on the one GPU when there is one, with NVML's utilisation and memory in the
    study."""
    if len(trials) != DIGITS_TRIALS:
        return failed(f"{len(trials)} trials in the study, {DIGITS_TRIALS} wanted")
    problems = []
    for t in trials:
        a, n = t["attrs"], t["number"]
        if t["state"] != "COMPLETE":
            problems.append(f"trial {n} {t['state']}: {a.get(keys.ATTR_ERROR, '')}"[:200])
        elif not gpu_ids(a):
            problems.append(f"trial {n} had no GPU from Ray")
        elif not (a.get(keys.ATTR_GPU_TORCH_PEAK_MIB) or 0) > 0:
            problems.append(f"trial {n} allocated no CUDA memory (torch peak "
                            f"{a.get(keys.ATTR_GPU_TORCH_PEAK_MIB)})")
        elif a.get(keys.ATTR_GPU_UTIL) is None or a.get(keys.ATTR_GPU_MEM_PEAK_MIB) is None:
            problems.append(f"trial {n}: NVML sampled nothing (utilisation "
                            f"{a.get(keys.ATTR_GPU_UTIL)}, memory "
                            f"{a.get(keys.ATTR_GPU_MEM_PEAK_MIB)})")
    if CPU_FALLBACK in logs:
        problems.append(f"a trial log says '{CPU_FALLBACK}'")
    ids = sorted({g for t in trials for g in gpu_ids(t["attrs"])})
    at_once = AT_ONCE.search(stdout)
    if not problems and n_gpus == 1 and len(ids) != 1:
        problems.append(f"one GPU, but the trials had GPU ids {ids}")
    if not problems and n_gpus == 1 and at_once and int(at_once[1]) < 2:
        problems.append(f"the run took {at_once[1]} trial at a time: none shared the GPU")
    if problems:
        return failed("; ".join(problems))
    attrs = [t["attrs"] for t in trials]
    values = [t["value"] for t in trials]
    return passed(
        f"{len(trials)}/{DIGITS_TRIALS} COMPLETE on CUDA, resources.gpu={DIGITS_GPU} on GPU "
        f"id(s) {', '.join(ids)}{f' ({at_once[1]} at a time)' if at_once else ''}; NVML "
        f"mean utilisation "
        f"{_span([a[keys.ATTR_GPU_UTIL] for a in attrs], '%')}, device memory peak "
        f"{_span([a[keys.ATTR_GPU_MEM_PEAK_MIB] for a in attrs], ' MiB')}; torch peak "
        f"{_span([a[keys.ATTR_GPU_TORCH_PEAK_MIB] for a in attrs], ' MiB')}; val_acc "
        f"{_span(values, '', 3)}; cost {sum(a.get(keys.ATTR_COST) or 0 for a in attrs):.4g} "
        f"{attrs[0].get(keys.ATTR_CURRENCY) or ''}".rstrip())


def judge_oom(trials: Sequence[Mapping[str, Any]], logs: str, first_batch: int,
              max_epochs: int) -> Verdict:
    """The OOM trial: a real CUDA OOM at ``first_batch``, one ``halve_batch`` rung in the
    study, then every epoch at half the batch, holding the half batch's ballast."""
    from benchmarks.gpu_trainables import OOM_RECORD, parse_oom_record

    if len(trials) != 1:
        return failed(f"{len(trials)} trials in the study, 1 wanted")
    (t,) = trials
    a = t["attrs"]
    rung = f"halve_batch: batch size {first_batch} -> {first_batch // 2}"
    steps = a.get(keys.ATTR_OOM_STEPS)
    if steps != [rung]:
        return failed(f"the study's oom_steps are {steps}, wanted ['{rung}']: "
                      f"{a.get(keys.ATTR_ERROR, '')}"[:400])
    if t["state"] != "COMPLETE" or t["steps"] != list(range(1, max_epochs + 1)):
        return failed(f"trial {t['number']} {t['state']} after epochs {t['steps']} "
                      f"(wanted 1-{max_epochs}): {a.get(keys.ATTR_ERROR, '')}"[:400])
    record = parse_oom_record(logs)
    if record is None:
        return failed(f"no '{OOM_RECORD}' line in the trial log: the OOM did not come "
                      "from the ballast's allocation")
    if "out of memory" not in record["error"].lower() or record["batch"] != first_batch:
        return failed(f"the ballast's error at batch {record['batch']}: {record['error']}")
    half_need_mib = record["per_sample"] * (first_batch // 2) / 2**20
    peak = a.get(keys.ATTR_GPU_TORCH_PEAK_MIB) or 0.0
    if peak < half_need_mib:
        return failed(f"torch's peak {peak:.0f} MiB is below the half batch's ballast "
                      f"{half_need_mib:.0f} MiB: it did not train with it")
    return passed(f"CUDA OOM at batch {first_batch} ({record['need_gib']:.1f} GiB asked, "
                  f"{record['free_gib']:.1f} GiB free: {record['error'][:120]}); the study "
                  f"records '{rung}'; COMPLETE after {max_epochs} epochs at batch "
                  f"{first_batch // 2} holding {half_need_mib / 1024:.1f} GiB (torch peak "
                  f"{peak / 1024:.1f} GiB, val_acc {t['value']:.3f})")


def idle_row(markdown: str) -> str | None:
    """The value of the report's idle-GPU money row in ``report.md``, or None."""
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] == IDLE_ROW:
            return cells[1]
    return None


def judge_report(markdown: str | None, document: Mapping[str, Any] | None) -> Verdict:
    """The report of the digits run (``report.md``'s text, ``report.json``'s data): the
    idle-GPU money line, from sampled GPU use."""
    if markdown is None or document is None:
        return failed("no report.md or report.json written")
    row = idle_row(markdown)
    if row is None:
        return failed(f"report.md has no '{IDLE_ROW}' row")
    summary = document.get("summary") or {}
    if summary.get("idle_gpu_cost") is None:
        return failed(f"'{IDLE_ROW}': {row}")
    rows = document.get("trials") or []
    sampled = [r for r in rows if r.get("gpu_util_mean") is not None
               and r.get("gpu_mem_peak_mib") is not None]
    if len(sampled) != len(rows) or not rows:
        return failed(f"{len(sampled)} of {len(rows)} trials have GPU use in the report")
    return passed(f"{IDLE_ROW}: {row}; GPU use of {len(sampled)}/{len(rows)} trials in "
                  f"the report")


def judge_sampler(figures: Mapping[str, Any]) -> Verdict:
    """The sampler's busy against idle readings."""
    busy, idle = figures["busy"], figures["idle"]
    text = (f"busy {busy['util_mean']}% vs idle {idle['util_mean']}% mean utilisation "
            f"({busy['n_samples']} and {idle['n_samples']} samples of GPU "
            f"{busy['gpu_indices']}), memory peak busy {busy['mem_peak_mib']} MiB")
    if busy["util_mean"] is None or idle["util_mean"] is None:
        return failed(f"NVML sampled nothing: {text}")
    if not busy["util_mean"] > idle["util_mean"]:
        return failed(text)
    return passed(text)


def judge_plan_vs_peak(params: Mapping[str, Any], estimate: Mapping[str, float],
                       peak_mib: float) -> Verdict:
    """plan's estimate at one trial's params against the memory torch reserved in that
    trial: an estimate below the real peak would let a trial be placed where it does not
    fit."""
    total, training = estimate["total_mib"], estimate["training_mib"]
    text = (f"estimate {total:.0f} MiB ({training:.1f} MiB training + CUDA allowance) "
            f"vs torch's real peak {peak_mib:.1f} MiB "
            f"({total / peak_mib:.2f}x) at {', '.join(f'{k} {v}' for k, v in params.items())}")
    return passed(text) if total >= peak_mib else failed(f"under-estimate: {text}")


def judge_ddp(trials: Sequence[Mapping[str, Any]], logs: str) -> Verdict:
    """One trial on two GPUs: it completed with two GPU ids."""
    if len(trials) != 1:
        return failed(f"{len(trials)} trials in the study, 1 wanted")
    (t,) = trials
    ids = gpu_ids(t["attrs"])
    if t["state"] != "COMPLETE" or len(ids) != 2 or CPU_FALLBACK in logs:
        return failed(f"trial {t['state']} on GPU ids {ids}"
                      f"{'; a log says ' + CPU_FALLBACK if CPU_FALLBACK in logs else ''}: "
                      f"{t['attrs'].get(keys.ATTR_ERROR, '')}"[:400])
    return passed(f"COMPLETE with DDP on GPU ids {', '.join(ids)}, val_acc "
                  f"{t['value']:.3f}")


# ---------------------------------------------------------------------------------------
# The checks.


def check_doctor(out: Path) -> Verdict:
    return judge_doctor(*hpsearch_cli(["doctor", str(EXAMPLE), "--run-dir",
                                       str(out / DIGITS_DIR), "--json"], out, "doctor"))


def check_plan(out: Path) -> Verdict:
    return judge_plan(*hpsearch_cli(["plan", str(EXAMPLE), "--json"], out, "plan"))


def _sets(values: Sequence[str]) -> list[str]:
    return [arg for value in values for arg in ("--set", value)]


def check_digits(out: Path) -> Verdict:
    run_dir = out / DIGITS_DIR
    code, stdout, stderr = hpsearch_cli(["run", str(EXAMPLE), "--run-dir", str(run_dir),
                                         *_sets(DIGITS_SETS), "--progress-interval", "5"],
                                        out, "digits")
    if code != 0:
        return exited("hpsearch run", code, stderr)
    return judge_digits(study_trials(run_dir), trial_logs(run_dir), visible_gpus(), stdout)


def check_oom(out: Path) -> Verdict:
    from hpsearch.spec import config as config_mod

    run_dir = out / OOM_DIR
    code, _, stderr = hpsearch_cli(["run", str(OOM_SPACE), "--run-dir", str(run_dir),
                                    "--progress-interval", "5"], out, "oom")
    if code != 0:
        return exited("hpsearch run", code, stderr)
    config = config_mod.load(OOM_SPACE)
    (first,) = config.space["batch_size"].choices
    return judge_oom(study_trials(run_dir), trial_logs(run_dir), int(first),
                     config.max_epochs)


def check_report(out: Path) -> Verdict:
    report_dir = out / REPORT_DIR
    code, _, stderr = hpsearch_cli(["report", str(out / DIGITS_DIR), "--format", "md,json",
                                    "--out", str(report_dir)], out, "report")
    if code != 0:
        return exited("hpsearch report", code, stderr)
    md, js = report_dir / "report.md", report_dir / "report.json"
    return judge_report(md.read_text(encoding="utf-8") if md.is_file() else None,
                        json.loads(js.read_text(encoding="utf-8")) if js.is_file() else None)


def check_sampler(out: Path) -> Verdict:
    import torch

    from hpsearch.adapters.nvml import GpuSampler, visible_indices

    index = (visible_indices() or [0])[0]  # the NVML index of torch's cuda:0
    x = torch.randn(8192, 8192, device="cuda")
    with GpuSampler(indices=[index], interval_s=0.1) as busy_sampler:
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            x @ x
            torch.cuda.synchronize()
    busy = busy_sampler.stop()
    del x
    torch.cuda.empty_cache()
    time.sleep(1.0)
    with GpuSampler(indices=[index], interval_s=0.1) as idle_sampler:
        time.sleep(2.0)
    return judge_sampler({"busy": busy, "idle": idle_sampler.stop()})


def check_plan_vs_peak(out: Path) -> Verdict:
    from hpsearch.adapters.trial import probe
    from hpsearch.money import catalog
    from hpsearch.spec import config as config_mod
    from hpsearch.tools import plan

    run_dir = out / DIGITS_DIR
    if not (run_dir / "optuna.db").is_file():
        return failed(f"no digits run in {run_dir} to compare with (see the digits check)")
    peaks = [t for t in study_trials(run_dir)
             if t["state"] == "COMPLETE" and t["attrs"].get(keys.ATTR_GPU_TORCH_PEAK_MIB)]
    if not peaks:
        return failed("no completed digits trial recorded torch's peak memory")
    top = max(peaks, key=lambda t: t["attrs"][keys.ATTR_GPU_TORCH_PEAK_MIB])
    config = config_mod.load(EXAMPLE, ["pricing.instance=local-gpu"])  # memory only
    # Memory comes from one training step; more threads only shorten the CPU probe.
    figures = probe.probe(config.trainable, top["params"], probe_batches=2,
                          threads=min(8, os.cpu_count() or 1))
    made = plan.make_plan(config, catalog.load(None), figures)
    return judge_plan_vs_peak(top["params"],
                              {"total_mib": made.memory.total_mib,
                               "training_mib": made.memory.training_bytes / 2**20},
                              float(top["attrs"][keys.ATTR_GPU_TORCH_PEAK_MIB]))


def check_ddp(out: Path) -> Verdict:
    if visible_gpus() < 2:
        return failed("fewer than two GPUs visible: DDP needs two")
    run_dir = out / DDP_DIR
    code, _, stderr = hpsearch_cli(["run", str(EXAMPLE), "--run-dir", str(run_dir),
                                    *_sets(["search.n_trials=1", "max_epochs=2",
                                            "resources.gpu=2", "pruning.policy=none"]),
                                    "--progress-interval", "5"], out, "ddp")
    if code != 0:
        return exited("hpsearch run", code, stderr)
    return judge_ddp(study_trials(run_dir), trial_logs(run_dir))


CHECKS: dict[str, Callable[[Path], Verdict]] = {
    "doctor": check_doctor, "plan": check_plan, "digits": check_digits, "oom": check_oom,
    "report": check_report, "sampler": check_sampler, "plan_vs_peak": check_plan_vs_peak,
    "ddp": check_ddp,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("check", choices=list(CHECKS))
    parser.add_argument("--out", required=True, help="the folder for run dirs and logs")
    args = parser.parse_args(argv)
    out = Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    try:
        verdict = CHECKS[args.check](out)
    except Exception as exc:  # one line for the summary; the traceback for the log
        traceback.print_exc()
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        verdict = failed(f"{type(exc).__name__}: {first}"[:400])
    print(verdict.line(args.check), flush=True)
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
