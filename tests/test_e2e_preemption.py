"""Preemption end to end: real Ray, real Lightning, trial processes really killed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from optuna.trial import TrialState

import hpsearch
from hpsearch.spec import raw_yaml

from .conftest import REPO
from .test_e2e import load_study, spec

pytestmark = pytest.mark.slow


def ledger_intervals(run_dir: Path) -> dict[int, list[dict]]:
    """Billed intervals per trial, each with its outcome."""
    out: dict[int, list[dict]] = defaultdict(list)
    for line in (run_dir / "ledger.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["event"] == "open":
            out[event["trial"]].append({"start_s": event["start_s"], "outcome": "open"})
        elif event["event"] == "close":
            out[event["trial"]][-1]["outcome"] = event["outcome"]
    return out


def fixed_trial(name: str, crash_dir: Path, *, trainable="tests.trainables:crash_once",
                **extra_space) -> dict:
    """One trial with fixed params and val_loss as the objective (exact comparisons)."""
    space = {
        "lr": {"type": "categorical", "choices": [0.01]},
        "dropout": {"type": "categorical", "choices": [0.3]},
        "crash_dir": {"type": "categorical", "choices": [str(crash_dir)]},
        "crash_epoch": {"type": "categorical", "choices": [-1]},
    }
    for key, value in extra_space.items():
        space[key] = {"type": "categorical", "choices": [value]}
    return spec(**{"name": name, "trainable": trainable, "max_epochs": 6,
                   "objective": {"metric": "val_loss", "mode": "min"}, "space": space,
                   "search.n_trials": 1, "search.concurrency": 1})


def test_preempted_trials_restart_from_their_checkpoints_and_all_finish(ray_cluster, in_tmp):
    script = [{"trial": 0, "epoch": 2}, {"trial": 1, "epoch": 3}, {"trial": 3, "epoch": 1}]
    cfg = spec(**{"name": "spot", "max_epochs": 5, "search.n_trials": 6,
                  "search.concurrency": 2, "preemption.simulate.at": script,
                  "preemption.simulate.signal": "kill", "checkpoint.every_epochs": 1})
    lines: list[str] = []
    result = hpsearch.run(cfg, emit=lines.append)

    trials = load_study(result).get_trials()
    assert len(trials) == 6, "no Optuna trial lost or duplicated"
    assert all(t.state == TrialState.COMPLETE for t in trials)
    preempted = {s["trial"]: s["epoch"] for s in script}
    assert len(preempted) / len(trials) >= 0.3
    intervals = ledger_intervals(result.run_dir)
    for t in trials:
        assert sorted(t.intermediate_values) == [1, 2, 3, 4, 5]
        assert "failures" not in t.user_attrs, "a preemption is not a failure"
        if t.number in preempted:
            epoch = preempted[t.number]
            assert t.user_attrs["preemptions"] == 1
            # Killed right after epoch E's checkpoint: it resumes at epoch E.
            assert t.user_attrs["resumed_from_epochs"] == [epoch]
            assert [i["outcome"] for i in intervals[t.number]] == ["preempted", "done"]
            assert t.user_attrs["wasted_cost"] > 0
            assert any(f"trial {t.number} preempted after epoch {epoch}" in ln for ln in lines)
        else:
            assert "preemptions" not in t.user_attrs
            assert [i["outcome"] for i in intervals[t.number]] == ["done"]
            assert t.user_attrs["wasted_cost"] == 0


def test_a_preemption_loses_at_most_one_checkpoint_interval_and_resumes_exactly(
        ray_cluster, in_tmp):
    crash_dir = in_tmp / "unused"
    clean = load_study(hpsearch.run(fixed_trial("clean", crash_dir), emit=None)).trials[0]
    cfg = fixed_trial("preempted", crash_dir)
    cfg = raw_yaml.apply_overrides(cfg, {
        "checkpoint.every_epochs": 2,
        "preemption.simulate.at": [{"trial": 0, "epoch": 3}]})
    preempted = load_study(hpsearch.run(cfg, emit=None)).trials[0]

    assert preempted.user_attrs["preemptions"] == 1
    (resumed_at,) = preempted.user_attrs["resumed_from_epochs"]
    assert 3 - resumed_at <= 2, "lost more than one checkpoint interval"
    assert resumed_at == 2  # the checkpoint of epoch 2; epoch 3 was not due
    assert preempted.intermediate_values == clean.intermediate_values
    assert preempted.value == clean.value


class _Metadata(BaseHTTPRequestHandler):
    """AWS-style spot/instance-action: 404 until the notice, which is served once."""

    polls = 0
    notice_after = 4

    def do_GET(self):  # noqa: N802 (http.server's name)
        cls = type(self)
        cls.polls += 1
        if cls.polls == cls.notice_after:
            body = json.dumps({"action": "terminate", "time": "2026-11-30T00:00:00Z"})
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body.encode())
        else:
            self.send_response(404)
            self.end_headers()

    def log_message(self, *args):
        pass


def test_an_interruption_notice_checkpoints_and_restarts_without_loss(ray_cluster, in_tmp):
    server = HTTPServer(("127.0.0.1", 0), _Metadata)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/latest/meta-data/spot/instance-action"
    try:
        cfg = raw_yaml.apply_overrides(
            fixed_trial("notice", in_tmp / "unused"),
            {"max_epochs": 40, "preemption.notice_url": url,
             "preemption.notice_poll_s": 0.2, "preemption.grace_s": 60})
        trial = load_study(hpsearch.run(cfg, emit=None)).trials[0]
    finally:
        server.shutdown()

    assert trial.state == TrialState.COMPLETE
    assert trial.user_attrs["preemptions"] == 1
    assert sorted(trial.intermediate_values) == list(range(1, 41))
    # It finished the epoch in hand and checkpointed it before stopping: nothing lost.
    assert trial.user_attrs["wasted_cost"] == 0
    assert len(trial.user_attrs["resumed_from_epochs"]) == 1


def test_a_trial_on_a_removed_node_resumes_on_another_node(in_tmp):
    """ray.cluster_utils.Cluster: the node a trial runs on vanishes (a spot node)."""
    script = in_tmp / "cluster_run.py"
    script.write_text(CLUSTER_SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(script)], cwd=in_tmp, env=env,
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    assert outcome["state"] == "COMPLETE"
    assert outcome["preemptions"] == 1
    assert outcome["resumed_from"][0] >= 2
    assert len(set(outcome["nodes"])) == 2, "the trial should have moved to another node"


CLUSTER_SCRIPT = r'''
import json, logging, sqlite3, threading, time
from pathlib import Path
import optuna
import ray
from ray.cluster_utils import Cluster
import hpsearch
from hpsearch.errors import RunFailed
from tests.test_e2e import spec

cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
nodes = [cluster.add_node(num_cpus=1) for _ in range(2)]
cluster.wait_for_nodes()
ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False,
         logging_level=logging.ERROR)
cfg = spec(**{"name": "nodes", "max_epochs": 60, "search.n_trials": 1,
              "search.concurrency": 1, "checkpoint.every_epochs": 1})
db = "runs/nodes/optuna.db"
removed = {}
done = threading.Event()

def remove_the_node():
    while not done.is_set():
        time.sleep(0.2)
        try:  # read-only, while the driver writes
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as con:
                epochs = con.execute("SELECT COUNT(*) FROM trial_intermediate_values").fetchone()[0]
                row = con.execute("SELECT value_json FROM trial_user_attributes "
                                  "WHERE key = 'node'").fetchone()
        except sqlite3.OperationalError:
            continue
        if epochs >= 2 and row:
            node_id = json.loads(row[0])
            for node in nodes:
                if node.node_id == node_id:
                    cluster.remove_node(node)
                    removed["node"] = node_id
                    return

remover = threading.Thread(target=remove_the_node, daemon=True)
remover.start()
result = hpsearch.run(cfg, emit=None)
done.set()
remover.join()  # a removal under way ends before cluster.shutdown() removes nodes
trial = result.study.trials[0]
print(json.dumps({"state": trial.state.name, "preemptions": trial.user_attrs.get("preemptions"),
                  "resumed_from": trial.user_attrs.get("resumed_from_epochs"),
                  "nodes": trial.user_attrs.get("nodes"), "removed": removed.get("node"),
                  "error": trial.user_attrs.get("error")}), flush=True)
ray.shutdown()
cluster.shutdown()
'''


def test_spot_nodes_take_spot_trials_and_on_demand_takes_over_when_they_vanish(in_tmp):
    """Node kinds declared with custom resources; the spot node is taken back mid-run."""
    script = in_tmp / "kinds_run.py"
    script.write_text(KINDS_SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(script)], cwd=in_tmp, env=env,
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    spot_node, on_demand_node = out["spot_node"], out["on_demand_node"]
    # Fallback allowed: the trial moved to the on-demand node and was billed there.
    fallback = out["fallback"]
    assert fallback["state"] == "COMPLETE" and fallback["preemptions"] == 1
    assert fallback["nodes"] == [spot_node, on_demand_node]
    # Each interval is the trial's share of its node: its 1 CPU of the node's 1.
    prices = [(i["instance"], i["spot"], round(i["price_per_hour"], 6))
              for i in fallback["intervals"]]
    assert prices == [("aws:p3.2xlarge", True, 0.95), ("aws:p3.2xlarge", False, 3.06)]
    # The report splits every node's money into work kept, wasted and idle.
    nodes = {n["node"]: n for n in fallback["report"]["nodes"]}
    assert set(nodes) >= {spot_node, on_demand_node}
    for node in nodes.values():
        assert node["kept_cost"] + node["wasted_cost"] + node["idle_cost"] == \
            pytest.approx(node["cost"], abs=1e-12)
        assert node["idle_cost"] >= -1e-12
    spot, od = nodes[spot_node], nodes[on_demand_node]
    assert spot["spot"] and spot["lost"] and not od["spot"] and not od["lost"]
    assert spot["billed_s"] >= 60 and od["billed_s"] >= 60  # p3.2xlarge's minimum
    assert spot["kept_cost"] > 0 and od["kept_cost"] > 0  # the trial ran on both
    assert spot["wasted_cost"] == pytest.approx(fallback["report"]["wasted_cost"])
    assert od["wasted_cost"] == 0
    assert od["idle_cost"] > 0  # on-demand capacity paid while the trial ran on spot
    summary = fallback["report"]
    assert sum(n["cost"] for n in nodes.values()) == pytest.approx(summary["total_cost"])
    assert summary["kept_cost"] + summary["wasted_cost"] + summary["idle_cost"] == \
        pytest.approx(summary["total_cost"])
    # Strict spot: no spot node and no fallback, the trial fails with the reason, and
    # the run, whose only trial failed, says it could not succeed.
    strict = out["strict"]
    assert strict["state"] == "FAIL"
    assert "no spot node alive" in strict["error"]
    assert strict["raised"].startswith("RunFailed: no trial completed: 1 failed")


KINDS_SCRIPT = r'''
import json, logging, sqlite3, threading, time
from pathlib import Path
import optuna
import ray
from ray.cluster_utils import Cluster
import hpsearch
from hpsearch.errors import RunFailed
from tests.test_e2e import spec

INSTANCE = "hps_instance=aws:p3.2xlarge"
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
spot = cluster.add_node(num_cpus=1, resources={"hps_spot": 1000, INSTANCE: 1000})
on_demand = cluster.add_node(num_cpus=1, resources={"hps_on_demand": 1000, INSTANCE: 1000})
cluster.wait_for_nodes()
ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False,
         logging_level=logging.ERROR)

def take_back_after(node, db, epochs):
    """Removes ``node`` once ``epochs`` epochs are in the study; returns a function that
    stops watching and waits for a removal under way (the run can end while Ray still
    takes the node down: cluster.shutdown() must not remove it a second time)."""
    done = threading.Event()
    def watch():
        while not done.is_set():
            time.sleep(0.2)
            try:
                with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as con:
                    n = con.execute("SELECT COUNT(*) FROM trial_intermediate_values").fetchone()[0]
            except sqlite3.OperationalError:
                continue
            if n >= epochs:
                cluster.remove_node(node)
                return
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    def finish():
        done.set()
        thread.join()
    return finish

def one(name, overrides):
    cfg = spec(**{"name": name, "max_epochs": 40, "search.n_trials": 1,
                  "search.concurrency": 1, "pricing": {"instance": "aws:p3.2xlarge",
                                                       "spot": True},
                  "preemption.spot_wait_s": 0, **overrides})
    run_dir, raised = Path("runs") / name, None
    try:
        hpsearch.run(cfg, emit=None)
    except RunFailed as exc:
        raised = f"RunFailed: {exc}"
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{run_dir / 'optuna.db'}")
    t = study.trials[0]
    intervals = [json.loads(l) for l in (run_dir / "ledger.jsonl").read_text().splitlines()]
    opened, rented = [], {}
    for e in intervals:
        if e["event"] == "node":
            rented[e["node"]] = e
        elif e["event"] == "open":
            opened.append(dict(e))
        elif e["event"] == "place":
            node = rented[e["node"]]
            opened[-1].update(instance=node["instance"], spot=node["spot"],
                              price_per_hour=node["price_per_hour"] * e["share"])
    report = json.loads((run_dir / "report.json").read_text())["summary"] \
        if (run_dir / "report.json").exists() else None
    return {"state": t.state.name, "preemptions": t.user_attrs.get("preemptions"),
            "nodes": t.user_attrs.get("nodes"), "error": t.user_attrs.get("error"),
            "intervals": opened, "raised": raised, "report": report}

finish = take_back_after(spot, "runs/fallback/optuna.db", 2)
fallback = one("fallback", {"preemption.on_demand_fallback": True})
finish()
spot2 = cluster.add_node(num_cpus=1, resources={"hps_spot": 1000, INSTANCE: 1000})
cluster.wait_for_nodes()
finish = take_back_after(spot2, "runs/strict/optuna.db", 2)
strict = one("strict", {})
finish()
print(json.dumps({"spot_node": spot.node_id, "on_demand_node": on_demand.node_id,
                  "fallback": fallback, "strict": strict}), flush=True)
ray.shutdown()
cluster.shutdown()
'''


def test_a_trial_preempted_after_its_last_checkpoint_still_completes(ray_cluster, in_tmp):
    # Killed right after its last epoch was checkpointed: the restart has nothing to
    # train and reports the checkpoint's epoch, so the study still hears how it ended.
    cfg = spec(**{"name": "last", "max_epochs": 3, "search.n_trials": 1,
                  "search.concurrency": 1, "preemption.simulate.at": [{"trial": 0, "epoch": 3}]})
    (trial,) = load_study(hpsearch.run(cfg, emit=None)).get_trials()
    if "preemptions" not in trial.user_attrs:
        pytest.fail("the kill came too late: the trial had already ended")
    assert trial.state == TrialState.COMPLETE
    assert sorted(trial.intermediate_values) == [1, 2, 3]
    assert trial.value == trial.intermediate_values[3]
