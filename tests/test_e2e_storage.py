"""Spot clusters without a shared disk, for real on this machine.

- ``test_a_spot_cluster_without_a_shared_disk_resumes_from_the_object_store``: a Ray
  head (the driver's node) and two worker nodes started with ``ray start`` and Ray
  2.60's token authentication, in a network namespace of the test's own (loopback
  only); each worker runs in a mount namespace of its own with a private tmpfs over the
  folder of the run dirs, so no worker sees the driver's run dir, as on rented nodes
  with their own disks. A real S3 API server (moto) on 127.0.0.1 holds the checkpoints.
  With ``checkpoint.storage`` left at the run dir the run is refused before anything is
  written; with ``s3://`` the trial starts on the spot node, the spot node is killed
  mid-trial (every process of it, SIGKILL), and the trial resumes on the on-demand node
  from the object store, with the same curve as an uninterrupted run; the study and the
  ledger are right.
- ``test_a_node_that_joins_without_reaching_the_storage_gets_no_trial``: with
  ``ray.cluster_utils.Cluster``, a node joins mid-run whose environment points S3 at a
  closed port: it is probed, the user is told, and no trial trains on it.

Only 127.0.0.1 is ever connected to.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import optuna
import pytest
from optuna.trial import TrialState

import hpsearch

from .conftest import REPO
from .test_e2e import load_study
from .test_e2e_netsec import clean_env, ray_tmp  # noqa: F401 (a fixture)
from .test_e2e_preemption import fixed_trial

pytestmark = pytest.mark.slow

MAX_EPOCHS = 40


def cluster_trial(name: str) -> dict:
    """One trial with fixed params on a spot node (on-demand allowed after it goes)."""
    cfg = fixed_trial(name, REPO / "no-crash")
    cfg.update({"max_epochs": MAX_EPOCHS,
                "pricing": {"instance": "aws:p3.2xlarge", "spot": True},
                "preemption": {"spot_wait_s": 0, "on_demand_fallback": True},
                "checkpoint": {"every_epochs": 1}})
    return cfg


#: Run inside ``unshare -n`` (loopback only), as root.
SCRIPT = r'''
import json, os, shutil, sqlite3, subprocess, sys, time
from pathlib import Path

from tests.s3server import S3Server

work, space_json, refused_json = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
RAY = [sys.executable, "-m", "ray.scripts.scripts"]
PORT = 6379
INSTANCE = "hps_instance=aws:p3.2xlarge"

from tests.netns import kill_tree, loopback_only_up, started
loopback_only_up()

runs = work / "runs"          # the run dirs: on the driver's disk only
runs.mkdir()
homes = {k: work / f"home-{k}" for k in ("head", "spot", "on_demand")}
for h in homes.values():
    (h / ".ray").mkdir(parents=True)
result = {}
procs = []


with S3Server() as s3:
    # The head detects a dead node within a few seconds.
    fast = {"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "4",
            "RAY_health_check_initial_delay_ms": "1000"}
    head_env = dict(os.environ, HOME=str(homes["head"]), **s3.env, **fast)
    subprocess.run([*RAY, "get-auth-token", "--generate"], env=head_env, check=True,
                   capture_output=True, timeout=120)
    token = homes["head"] / ".ray" / "auth_token"
    os.chmod(token, 0o600)
    try:
        head = subprocess.Popen([*RAY, "start", "--head", f"--port={PORT}", "--num-cpus=0",
                                 "--include-dashboard=false", "--block"], env=head_env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        procs.append(head)
        started(head, "the head")
        workers = {}
        for kind, declared in (("spot", "hps_spot"), ("on_demand", "hps_on_demand")):
            shutil.copy(token, homes[kind] / ".ray" / "auth_token")
            env = dict(os.environ, HOME=str(homes[kind]), RAY_AUTH_MODE="token", **s3.env)
            # Its own mount namespace: a private, empty tmpfs over the run dirs' folder.
            cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                   'mount -t tmpfs -o size=256m hps-node-disk "$0" && exec "$@"', str(runs),
                   *RAY, "start", f"--address=127.0.0.1:{PORT}", "--num-cpus=1",
                   "--resources", json.dumps({declared: 1000, INSTANCE: 1000}), "--block"]
            workers[kind] = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                             stderr=subprocess.STDOUT, text=True,
                                             start_new_session=True)
            procs.append(workers[kind])
            started(workers[kind], f"the {kind} worker")
        # What a worker sees at the run dirs' path: its own empty disk.
        (runs / "driver-only").write_text("x")
        peek = subprocess.run(["nsenter", "-t", str(workers["spot"].pid), "-m", "ls", "-A",
                               str(runs)], capture_output=True, text=True)
        result["worker_sees"] = [peek.returncode, peek.stdout.split()]
        (runs / "driver-only").unlink()

        def hpsearch_run(space, run_dir, timeout):
            path = work / f"{run_dir}.json"
            path.write_text(space)
            return subprocess.run(
                [sys.executable, "-m", "hpsearch", "run", str(path), "--run-dir",
                 str(runs / run_dir), "--set", "cluster.address=auto",
                 "--progress-interval", "1"],
                env=head_env, cwd=work, capture_output=True, text=True, timeout=timeout)

        # 1. The checkpoints left at the run dir: refused before anything is spent.
        t0 = time.monotonic()
        refused = hpsearch_run(refused_json, "refused", 300)
        result["refused"] = [refused.returncode, refused.stdout[-2000:],
                             refused.stderr.strip().splitlines()[-1:],
                             (runs / "refused").exists(), time.monotonic() - t0]

        # 2. On the object store; the spot node is killed mid-trial.
        db = runs / "spot" / "optuna.db"
        killed = {}
        path = work / "spot.json"
        path.write_text(space_json)
        driver = subprocess.Popen(
            [sys.executable, "-m", "hpsearch", "run", str(path), "--run-dir",
             str(runs / "spot"), "--set", "cluster.address=auto", "--progress-interval", "1"],
            env=head_env, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(driver)
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and driver.poll() is None:
            time.sleep(0.2)
            try:
                with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as con:
                    epochs = con.execute(
                        "SELECT COUNT(*) FROM trial_intermediate_values").fetchone()[0]
            except sqlite3.Error:
                continue
            if epochs >= 3:
                killed["at_epochs"] = epochs
                killed["pids"] = kill_tree(workers["spot"].pid)
                break
        out, err = driver.communicate(timeout=600)
        result["run"] = [driver.returncode, out[-30000:], err[-5000:]]
        result["killed"] = killed
        result["objects"] = s3.objects()
    finally:
        for proc in reversed(procs):
            kill_tree(proc.pid)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
print("@@result@@" + json.dumps(result))
'''


def test_a_spot_cluster_without_a_shared_disk_resumes_from_the_object_store(
        ray_cluster, in_tmp, ray_tmp):  # noqa: F811
    from hpsearch.adapters.ray.local import reap

    if subprocess.run(["unshare", "-n", "-m", "true"], capture_output=True).returncode != 0:
        pytest.fail("this test needs root and util-linux's unshare (network and mount "
                    "namespaces): it stands in for nodes with disks of their own")
    # The curve to match: the same trial, uninterrupted, on this machine.
    clean = load_study(hpsearch.run(cluster_trial("clean"), run_dir=in_tmp / "clean",
                                    emit=None)).trials[0]
    assert clean.state == TrialState.COMPLETE

    script = in_tmp / "spot_cluster.py"
    script.write_text(SCRIPT)
    work = in_tmp / "work"
    work.mkdir()
    on_s3 = cluster_trial("spot")
    on_s3["checkpoint"]["storage"] = "s3://ckpt/hpsearch"
    proc = subprocess.Popen(
        ["unshare", "-n", sys.executable, str(script), str(work), json.dumps(on_s3),
         json.dumps(cluster_trial("refused"))],
        cwd=REPO, env=clean_env(RAY_TMPDIR=str(ray_tmp)), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=1200)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reap("no-mark", [str(ray_tmp)], spare=(os.getpid(),))
    marker = [ln for ln in out.splitlines() if ln.startswith("@@result@@")]
    assert proc.returncode == 0 and marker, out[-6000:]
    result = json.loads(marker[-1][len("@@result@@"):])
    print("\n" + json.dumps({k: v for k, v in result.items() if k != "objects"}, indent=1))

    # A worker does not see the driver's run dirs.
    code, seen = result["worker_sees"]
    assert code == 0 and seen == [], seen

    # 1. Refused, with what to configure, before anything was written.
    code, stdout, last, wrote, seconds = result["refused"]
    assert code == 2, stdout + str(last)
    assert last and last[0].startswith("hpsearch: error: checkpoint.storage: node "), last
    assert "cannot reach the checkpoint storage the run dir's checkpoints/" in last[0]
    assert "set checkpoint.storage to an object store" in last[0]
    assert not wrote
    assert "Search 'refused'" not in stdout  # no trial started

    # 2. The trial moved from the killed spot node to the on-demand one, from S3.
    code, stdout, stderr = result["run"]
    assert code == 0, stdout + stderr
    assert result["killed"].get("pids"), "the spot node was never killed"
    assert "Checkpoints: s3://ckpt/hpsearch/spot-" in stdout
    assert "1/1 done: 1 complete" in stdout
    run_dir = work / "runs" / "spot"
    study = optuna.load_study(study_name="spot", storage=f"sqlite:///{run_dir / 'optuna.db'}")
    (trial,) = study.trials
    attrs = trial.user_attrs
    assert trial.state == TrialState.COMPLETE
    assert attrs["preemptions"] == 1 and attrs.get("failures", 0) == 0
    assert len(attrs["nodes"]) == 2 and attrs["nodes"][0] != attrs["nodes"][1]
    assert attrs["resumed_from_epochs"][0] >= 2
    assert sorted(trial.intermediate_values) == list(range(1, MAX_EPOCHS + 1))
    assert trial.intermediate_values == clean.intermediate_values
    assert trial.value == clean.value
    # One per epoch; the killed attempt's last one may be written after the last
    # result that reached the driver (which carries the count).
    assert attrs["checkpoints"] >= MAX_EPOCHS - 1 and attrs["checkpoint_bytes"] > 0
    assert attrs["checkpoint_writes"] > attrs["checkpoints"]
    # The checkpoints are on S3, none on the driver's disk.
    objects = result["objects"]
    manifests = [k for k in objects if k.startswith("hpsearch/spot-")
                 and "/trial-0000/epoch-" in k and k.endswith(".json")]
    # keep_last 2, and the best by val_loss (min) wherever it fell.
    values = clean.intermediate_values
    best = min(values, key=lambda epoch: (values[epoch], -epoch))
    kept = {int(k.rsplit("epoch-", 1)[1].split(".")[0]) for k in manifests}
    assert kept == {MAX_EPOCHS - 1, MAX_EPOCHS, best}, sorted(objects)
    assert len(manifests) == len(kept)
    assert not (run_dir / "checkpoints").exists()
    assert not [k for k in objects if ".hpsearch-probe" in k]  # the probe cleaned up
    # The ledger: billed on the spot node until it went, then on demand.
    events = [json.loads(ln) for ln in (run_dir / "ledger.jsonl").read_text().splitlines()]
    # An interval opens on a rented node the trial fits and is moved (a "place" event)
    # to the node its first result names: the kind it was billed at is the last one.
    spot_of = {e["node"]: e["spot"] for e in events if e["event"] == "node"}
    billed = []
    for e in events:
        if e["event"] == "open":
            billed.append((e["trial"], e["spot"]))
        elif e["event"] == "place":
            billed[-1] = (e["trial"], spot_of[e["node"]])
    closed = [e["outcome"] for e in events if e["event"] == "close"]
    assert billed == [(0, True), (0, False)], billed
    assert closed == ["preempted", "done"], closed
    assert study.user_attrs["checkpoint_storage"].startswith("s3://ckpt/hpsearch/spot-")
    assert study.user_attrs["storage_price"]["service"] == "s3-standard"


NODE_SCRIPT = r'''
import json, logging, sqlite3, sys, threading, time
import ray
from ray.cluster_utils import Cluster
import os
from tests.s3server import S3Server
import hpsearch
from tests.test_e2e import spec

with S3Server() as s3:
    os.environ.update(s3.env)  # the nodes' environment: they reach the server
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    good = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False,
             logging_level=logging.ERROR)
    joined, lines, outcome = {}, [], {}
    # Slowed to 0.5 s an epoch: the search outlasts the new node's probe (its worker
    # starting, a refused connection) on a fast machine too.
    cfg = spec(**{"name": "joins", "max_epochs": 12, "search.n_trials": 3,
                  "trainable": "tests.fault_trainables:slow", "space.sleep_s": 0.5,
                  "search.concurrency": 2, "checkpoint.storage": "s3://ckpt/joins"})

    def run():
        outcome["result"] = hpsearch.run(cfg, emit=lines.append, progress_interval_s=2)

    # The search in a thread: Ray adds nodes from the main thread only.
    search = threading.Thread(target=run)
    search.start()
    db = "runs/joins/optuna.db"
    while search.is_alive():
        time.sleep(0.2)
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as con:
                n = con.execute("SELECT COUNT(*) FROM trial_intermediate_values").fetchone()[0]
        except sqlite3.Error:
            continue
        if n >= 1:
            # Its S3 endpoint is a closed port: it cannot reach the checkpoints.
            bad = cluster.add_node(num_cpus=1,
                                   env_vars={"AWS_ENDPOINT_URL": "http://127.0.0.1:1"})
            joined["bad"] = bad.node_id
            break
    search.join()
    result = outcome["result"]
    trials = [{"state": t.state.name, "nodes": t.user_attrs.get("nodes")}
              for t in result.study.trials]
    print(json.dumps({"trials": trials, "bad": joined.get("bad"), "good": good.node_id,
                      "lines": lines}), flush=True)
    ray.shutdown()
    cluster.shutdown()
'''


def test_a_node_that_joins_without_reaching_the_storage_gets_no_trial(in_tmp):
    script = in_tmp / "joins.py"
    script.write_text(NODE_SCRIPT)
    proc = subprocess.run([sys.executable, str(script)], cwd=in_tmp,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    bad = out["bad"]
    assert bad, "the second node never joined"
    assert [t["state"] for t in out["trials"]] == ["COMPLETE"] * 3
    assert all(t["nodes"] == [out["good"]] for t in out["trials"]), out["trials"]
    said = [ln for ln in out["lines"] if f"node {bad[:8]} cannot reach the checkpoint" in ln]
    assert len(said) == 1, out["lines"]
    assert "AWS_ENDPOINT_URL" in said[0]  # what to configure
