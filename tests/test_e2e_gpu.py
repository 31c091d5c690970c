"""Fractional GPUs: Ray's declared (fake) GPUs on this CPU machine place trials."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .conftest import REPO

pytestmark = pytest.mark.slow

FRACTIONS = r'''
import json, logging
import ray
import hpsearch
from tests.test_e2e import spec

# Two declared GPUs (none physically here); trials reserve half a GPU each.
ray.init(address="local", num_cpus=4, num_gpus=2, include_dashboard=False,
         log_to_driver=False, logging_level=logging.ERROR)
cfg = spec(**{"name": "fractions", "max_epochs": 6, "search.n_trials": 4,
              "search.concurrency": None, "resources": {"cpu": 0.5, "gpu": 0.5},
              "pricing": {"instance": "aws:p3.2xlarge"}})
lines = []
result = hpsearch.run(cfg, emit=lines.append)
trials = result.study.get_trials()
ledger = [json.loads(l) for l in (result.run_dir / "ledger.jsonl").read_text().splitlines()]
print(json.dumps({
    "states": [t.state.name for t in trials],
    "gpu_ids": [t.user_attrs.get("gpu_ids") for t in trials],
    "intervals": [[e["trial"], e.get("start_s"), None] for e in ledger if e["event"] == "open"],
    "closes": [[e["trial"], e["at_s"]] for e in ledger if e["event"] == "close"],
    "first_line": lines[0],
    "price": next(e for e in ledger if e["event"] == "open")["price_per_hour"],
}), flush=True)
ray.shutdown()
'''


def test_half_gpu_trials_share_the_declared_gpus_two_by_two(in_tmp):
    script = in_tmp / "half_gpu_run.py"  # not fractions.py: that shadows the stdlib
    script.write_text(FRACTIONS)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(script)], cwd=in_tmp, env=env,
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["states"] == ["COMPLETE"] * 4
    # Concurrency comes from the resources: 2 GPUs / 0.5 = 4 trials at once.
    assert "4 trial(s), 4 at a time" in out["first_line"]
    assert sorted(out["gpu_ids"]) == ["0", "0", "1", "1"]
    # All four ran at once: every trial started before any ended.
    last_start = max(start for _, start, _ in out["intervals"])
    first_end = min(end for _, end in out["closes"])
    assert last_start < first_end
    # The machine is billed as the p3.2xlarge it declares (3.06 USD per hour); each
    # trial pays its share of it: half a GPU of the node's two declared GPUs.
    assert out["price"] == pytest.approx(3.06 * 0.5 / 2)
