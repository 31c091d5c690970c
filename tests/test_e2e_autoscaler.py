"""Ray's autoscaler replaces a spot node taken back, and the search goes on on the new one.

The cluster is Ray's own local stand-in for a cloud: the autoscaler of a ``ray start
--head --autoscaling-config=...`` head (autoscaler v2, as Ray's own tests of it run)
with the fake multi-node provider (``FakeMultiNodeProvider``: each node it launches is a
real raylet on this machine), configured like ``clusters/aws-spot.yaml``: a head with no
CPUs, one worker type that declares ``hps_spot`` and ``hps_instance=aws:p3.2xlarge``,
``min_workers: 1``. Ray 2.60's wheel does not ship the provider's ``example.yaml`` (so
``ray.cluster_utils.AutoscalingCluster`` cannot be used; it would also ``ray stop
--force`` every Ray of the machine): the provider is named as an ``external`` one,
whose defaults are Ray's minimal ones. Token authentication is on (the head's token,
``RAY_AUTH_MODE=token`` for everything that joins), in a network namespace of the
test's own (loopback only); the checkpoints are on a real S3 API server (moto) on
127.0.0.1.

The trial starts on the spot node; the node is killed mid-trial (its raylet and every
process under it, SIGKILL); with no on-demand node and no fallback allowed the trial
waits for a spot node; the autoscaler finds the node dead, launches a new one (its
``min_workers``), hpsearch probes it and the trial resumes there from S3, with the same
``val_loss`` at every epoch as an uninterrupted run. What this does not show: a cloud's
real node launch (minutes, not seconds), nor disks that vanish (these nodes share this
machine's disk: ``tests/test_e2e_storage.py`` covers that).
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
from .test_e2e_storage import MAX_EPOCHS, cluster_trial

pytestmark = pytest.mark.slow

#: Run inside ``unshare -n`` (loopback only), as root.
SCRIPT = r'''
import json, os, sqlite3, subprocess, sys, time
from pathlib import Path

import psutil

work, space_json = Path(sys.argv[1]), sys.argv[2]
# Unique to this script's run: reap() below ends every process on the machine that
# carries the mark (PIDs are not in the namespace's keeping), a concurrent run's too.
MARK = f"hps-autoscaler-test-{os.getpid()}"
FAKE_HEAD = "f" * 51 + "00000"   # FakeMultiNodeProvider's head node id
RAY = [sys.executable, "-m", "ray.scripts.scripts"]
PORT = 6379

from tests.netns import kill_tree, loopback_only_up
loopback_only_up()

from tests.s3server import S3Server

home = work / "home"
(home / ".ray").mkdir(parents=True)
runs = work / "runs"
runs.mkdir()
config = {
    "cluster_name": "fake-spot", "max_workers": 1, "upscaling_speed": 1.0,
    "idle_timeout_minutes": 5,
    "provider": {
        "type": "external",
        "module": "ray.autoscaler._private.fake_multi_node.node_provider.FakeMultiNodeProvider",
        "gcs_address": f"127.0.0.1:{PORT}", "head_node_id": FAKE_HEAD,
        "launch_multiple": True, "use_node_id_as_ip": True,
        "disable_node_updaters": True, "disable_launch_config_check": True},
    "head_node_type": "ray.head.default",
    "available_node_types": {
        "ray.head.default": {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0},
        "gpu_spot": {"resources": {"CPU": 1, "hps_spot": 1000,
                                   "hps_instance=aws:p3.2xlarge": 1000},
                     "node_config": {}, "min_workers": 1, "max_workers": 1}},
    "file_mounts": {}, "cluster_synced_files": [], "file_mounts_sync_continuously": False,
    "initialization_commands": [], "setup_commands": [], "head_setup_commands": [],
    "worker_setup_commands": [], "head_start_ray_commands": [],
    "worker_start_ray_commands": [], "auth": {},
}
(work / "autoscaling.json").write_text(json.dumps(config))
result = {}
procs = []


def raylet_of(node_id):
    for p in psutil.process_iter(["name", "cmdline"]):
        if "raylet" in (p.info["name"] or "") and node_id in " ".join(p.info["cmdline"] or []):
            return p.pid
    return None

with S3Server() as s3:
    fast = {"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "4",
            "RAY_health_check_initial_delay_ms": "1000"}
    env = dict(os.environ, HOME=str(home), HPSEARCH_RAY_RUN=MARK, **s3.env, **fast)
    subprocess.run([*RAY, "get-auth-token", "--generate"], env=env, check=True,
                   capture_output=True, timeout=120)
    os.chmod(home / ".ray" / "auth_token", 0o600)
    # The autoscaler (and every node it launches) inherits the head's environment: the
    # token's mode, the S3 endpoint.
    head_env = dict(env, RAY_AUTH_MODE="token", RAY_FAKE_CLUSTER="1",
                    AUTOSCALER_UPDATE_INTERVAL_S="1", RAY_enable_autoscaler_v2="1",
                    RAY_CLOUD_INSTANCE_ID=FAKE_HEAD, RAY_OVERRIDE_NODE_ID_FOR_TESTING=FAKE_HEAD)
    try:
        head = subprocess.Popen(
            [*RAY, "start", "--head", f"--port={PORT}", "--num-cpus=0",
             "--include-dashboard=false",
             f"--autoscaling-config={work / 'autoscaling.json'}", "--block"],
            env=head_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True)
        procs.append(head)
        lines = []
        for line in head.stdout:
            lines.append(line)
            if "Ray runtime started" in line:
                break
        else:
            raise SystemExit("the head did not start: " + "".join(lines[-40:]))
        # This process watches the nodes: a driver of the cluster, with the token.
        os.environ.update(HOME=str(home), RAY_AUTH_MODE="token")
        import ray
        ray.init(address=f"127.0.0.1:{PORT}", logging_level="ERROR", log_to_driver=False)

        def spot_nodes():
            return [n["NodeID"] for n in ray.nodes() if n["Alive"]
                    and "hps_spot" in (n.get("Resources") or {})]

        deadline = time.monotonic() + 180
        while not spot_nodes() and time.monotonic() < deadline:
            time.sleep(0.5)
        result["first"] = spot_nodes()

        db = runs / "spot" / "optuna.db"
        path = work / "spot.json"
        path.write_text(space_json)
        driver = subprocess.Popen(
            [sys.executable, "-m", "hpsearch", "run", str(path), "--run-dir",
             str(runs / "spot"), "--set", "cluster.address=auto", "--progress-interval", "1"],
            env=env, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(driver)
        killed = {}
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
                (node,) = result["first"]
                raylet = raylet_of(node)
                killed = {"at_epochs": epochs, "node": node, "raylet": raylet,
                          "pids": kill_tree(raylet) if raylet else [],
                          "at": time.monotonic()}
                break
        # The replacement: a new spot node, launched by the autoscaler.
        while killed and time.monotonic() < deadline and driver.poll() is None:
            now = [n for n in spot_nodes() if n != killed["node"]]
            if now:
                killed["replaced_by"], killed["replaced_after_s"] = \
                    now[0], time.monotonic() - killed["at"]
                break
            time.sleep(0.5)
        out, err = driver.communicate(timeout=600)
        result["run"] = [driver.returncode, out[-30000:], err[-5000:]]
        result["killed"] = killed
        result["last"] = spot_nodes()
        result["objects"] = s3.objects()
        ray.shutdown()
    finally:
        for proc in reversed(procs):
            kill_tree(proc.pid)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        from hpsearch.adapters.ray.local import reap
        reap(MARK, [os.environ.get("RAY_TMPDIR", "/tmp/ray")])
print("@@result@@" + json.dumps(result))
'''


def test_the_autoscaler_replaces_a_spot_node_taken_back_and_the_trial_resumes_on_it(
        ray_cluster, in_tmp, ray_tmp):  # noqa: F811
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        pytest.fail("this test needs root and util-linux's unshare (a network namespace): "
                    "its cluster listens on 127.0.0.1:6379")
    clean = load_study(hpsearch.run(cluster_trial("clean"), run_dir=in_tmp / "clean",
                                    emit=None)).trials[0]
    assert clean.state == TrialState.COMPLETE

    script = in_tmp / "autoscaled.py"
    script.write_text(SCRIPT)
    work = in_tmp / "work"
    work.mkdir()
    space = cluster_trial("spot")
    space["checkpoint"]["storage"] = "s3://ckpt/hpsearch"
    # Only spot nodes exist: the trial waits for the autoscaler's replacement.
    space["preemption"] = {"spot_wait_s": 300, "on_demand_fallback": False}
    proc = subprocess.Popen(
        ["unshare", "-n", sys.executable, str(script), str(work), json.dumps(space)],
        cwd=REPO, env=clean_env(RAY_TMPDIR=str(ray_tmp)), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=1200)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    marker = [ln for ln in out.splitlines() if ln.startswith("@@result@@")]
    assert proc.returncode == 0 and marker, out[-6000:]
    result = json.loads(marker[-1][len("@@result@@"):])
    print("\n" + json.dumps({k: v for k, v in result.items() if k != "objects"}, indent=1))

    (first,) = result["first"]
    killed = result["killed"]
    assert killed.get("pids") and killed["node"] == first, killed
    # The autoscaler launched a new spot node in the killed one's place.
    replacement = killed.get("replaced_by")
    assert replacement and replacement != first, killed
    assert result["last"] == [replacement]

    code, stdout, stderr = result["run"]
    assert code == 0, stdout + stderr
    assert "1/1 done: 1 complete" in stdout
    run_dir = work / "runs" / "spot"
    study = optuna.load_study(study_name="spot", storage=f"sqlite:///{run_dir / 'optuna.db'}")
    (trial,) = study.trials
    attrs = trial.user_attrs
    assert trial.state == TrialState.COMPLETE
    assert attrs["preemptions"] == 1 and attrs.get("failures", 0) == 0
    # It ran on the spot node, then on its replacement, resumed from its checkpoint.
    assert attrs["nodes"] == [first, replacement], attrs["nodes"]
    assert attrs["resumed_from_epochs"][0] >= 2
    assert sorted(trial.intermediate_values) == list(range(1, MAX_EPOCHS + 1))
    assert trial.intermediate_values == clean.intermediate_values
    assert not (run_dir / "checkpoints").exists()
    assert any(k.startswith("hpsearch/spot-") and k.endswith(".json") for k in result["objects"])
    # Billed on spot both times: no on-demand node was ever used.
    events = [json.loads(ln) for ln in (run_dir / "ledger.jsonl").read_text().splitlines()]
    opened = [(e["trial"], e["spot"]) for e in events if e["event"] == "open"]
    closed = [e["outcome"] for e in events if e["event"] == "close"]
    assert opened == [(0, True), (0, True)], opened
    assert closed == ["preempted", "done"], closed
