"""``python -m hpsearch doctor``: the real command on this machine, and its checks on
plain data.

The command runs for real: no GPU and no NVIDIA driver here (the GPU-specific lines are
asserted only where that holds), a run dir or SQLite file under a regular file (root
ignores permissions, a file in the path stops everyone), an address where no Ray head
listens, and a real Ray cluster (``ray.cluster_utils.Cluster``, in this process) whose
nodes declare their kind with hpsearch's custom resources.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest

from hpsearch.adapters import nvml
from hpsearch.money import nodekinds
from hpsearch.tools import (doctor, doctor_checks, doctor_cluster, doctor_machine,
                            doctor_packages, doctor_storage)
from hpsearch.money.catalog import packaged
from hpsearch.adapters.system import ClusterInfo, NodeInfo, TorchInfo
from hpsearch.tools.doctor_checks import FAIL, OK, WARN, Check

from .test_cli_errors import GOOD, hpsearch
from .test_gpu import NO_NVML, no_driver


def lines_of(proc) -> dict[str, str]:
    """``{check name: its line}`` of the doctor's text output."""
    out = {}
    for line in proc.stdout.splitlines():
        if line.startswith("["):
            name = line[7:].split(":", 1)[0]
            out.setdefault(name, line)
    return out


def fix_after(proc, name: str) -> str:
    lines = proc.stdout.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("[") and line[7:].startswith(name + ":"):
            following = lines[i + 1] if i + 1 < len(lines) else ""
            return following.strip() if following.startswith("       fix: ") else ""
    raise AssertionError(f"no {name} line in {proc.stdout}")


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.fixture
def space(tmp_path) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(GOOD)
    return path


# ---------------------------------------------------------------------------------------
# The command on this machine.


@pytest.mark.slow
def test_doctor_here_exits_zero_and_writes_nothing(tmp_path):
    import torch

    start = time.monotonic()
    proc = hpsearch("doctor", cwd=tmp_path)
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = lines_of(proc)
    for name in ("python", "hpsearch", "torch", "nvml", "cuda", "lightning", "ray",
                 "optuna", "optuna-dashboard", "ray cluster", "run dir"):
        assert name in lines, proc.stdout
    assert lines["torch"].startswith(f"[ok]   torch: torch {torch.__version__}")
    if torch.version.cuda is None:
        assert "CPU-only build (no CUDA): trials train on CPU" in lines["torch"]
    if NO_NVML:
        assert lines["nvml"].startswith("[warn] nvml: NVML library not found")
        assert "nvidia-smi" in fix_after(proc, "nvml")
        assert lines["cuda"] == "[ok]   cuda: no GPU: trials train on CPU (`resources.gpu: 0`)"
    assert lines["optuna-dashboard"].startswith("[ok]   optuna-dashboard: optuna-dashboard ")
    assert "no cluster address: `run` starts a local Ray" in lines["ray cluster"]
    assert proc.stdout.splitlines()[-1].endswith(" 0 failed")
    assert tree(tmp_path) == []  # not even runs/
    assert elapsed < 30, f"doctor took {elapsed:.1f} s"


@pytest.mark.slow
def test_doctor_json_is_a_list_of_checks(tmp_path):
    proc = hpsearch("doctor", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    checks = json.loads(proc.stdout)
    assert isinstance(checks, list) and checks
    for check in checks:
        assert set(check) == {"name", "status", "message", "fix"}
        assert check["status"] in (OK, WARN, FAIL)
        assert check["message"]
        assert check["fix"] or check["status"] == OK
    names = [c["name"] for c in checks]
    assert names[:5] == ["python", "hpsearch", "torch", "nvml", "cuda"]
    assert "optuna-dashboard" in names
    if NO_NVML:
        nvml_check = checks[names.index("nvml")]
        assert nvml_check["status"] == WARN and "NVML library not found" in nvml_check["message"]


@pytest.mark.slow
def test_doctor_with_a_space_checks_run_dir_storage_and_price(tmp_path, space):
    proc = hpsearch("doctor", str(space), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = lines_of(proc)
    assert lines["space.yaml"].endswith("cli-test, 2 parameter(s)")
    assert lines["run dir"].startswith("[ok]   run dir: runs/cli-test will be created")
    assert lines["storage"] == ("[ok]   storage: sqlite:///runs/cli-test/optuna.db (SQLite; "
                                "will be created, in the run dir)")
    assert lines["pricing"].startswith("[ok]   pricing: a trial-hour costs ")
    assert "local:local-cpu" in lines["pricing"]
    assert tree(tmp_path) == ["space.yaml"]


@pytest.mark.slow
@no_driver
def test_doctor_prices_auto_with_its_note(tmp_path, space):
    proc = hpsearch("doctor", str(space), "--set", "pricing.instance=auto", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("on local:local-cpu; pricing.instance auto: no GPU detected"
            in lines_of(proc)["pricing"])


@pytest.mark.slow
def test_doctor_fails_when_the_sqlite_file_sits_under_a_file(tmp_path, space):
    afile = tmp_path / "afile"
    afile.write_text("not a directory\n")
    before = tree(tmp_path)
    proc = hpsearch("doctor", str(space), "--set", f"storage=sqlite:///{afile}/x.db",
                    cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = lines_of(proc)["storage"]
    assert line.startswith("[FAIL] storage: sqlite:///afile/x.db: the SQLite file cannot be")
    assert f"{afile} is a file, not a directory" in line
    assert "--set storage=" in fix_after(proc, "storage")
    assert lines_of(proc)["run dir"].startswith("[ok]")
    assert proc.stdout.splitlines()[-1].endswith(" 1 failed")
    assert tree(tmp_path) == before and afile.read_text() == "not a directory\n"


@pytest.mark.slow
def test_doctor_fails_when_the_run_dir_sits_under_a_file(tmp_path, space):
    afile = tmp_path / "afile"
    afile.write_text("x")
    before = tree(tmp_path)
    proc = hpsearch("doctor", str(space), "--run-dir", str(afile / "run"), cwd=tmp_path)
    assert proc.returncode == 1
    lines = lines_of(proc)
    assert lines["run dir"].startswith("[FAIL] run dir: afile/run cannot be created")
    assert "--run-dir" in fix_after(proc, "run dir")
    assert lines["storage"].startswith("[FAIL] storage:")
    assert "fix the run dir" in fix_after(proc, "storage")
    assert tree(tmp_path) == before


@pytest.mark.slow
def test_doctor_fails_on_an_unreachable_database(tmp_path, space):
    start = time.monotonic()
    proc = hpsearch("doctor", str(space), "--set",
                    "storage=postgresql://user:pw@127.0.0.1:1/optuna", cwd=tmp_path)
    assert proc.returncode == 1
    assert lines_of(proc)["storage"].startswith(
        "[FAIL] storage: postgresql://user:pw@127.0.0.1:1/optuna: cannot connect: ")
    assert "reachable" in fix_after(proc, "storage")
    assert time.monotonic() - start < 60
    assert tree(tmp_path) == ["space.yaml"]


@pytest.mark.slow
def test_doctor_reports_a_bad_space_as_a_failed_check(tmp_path, space):
    proc = hpsearch("doctor", str(space), "--set", "max_epochs=0", cwd=tmp_path)
    assert proc.returncode == 1
    assert lines_of(proc)["space.yaml"].startswith("[FAIL] space.yaml: max_epochs:")
    assert "validate" in fix_after(proc, "space.yaml")
    assert "storage" not in lines_of(proc)


@pytest.mark.slow
def test_doctor_fails_fast_on_an_unreachable_ray_address(tmp_path):
    start = time.monotonic()
    proc = hpsearch("doctor", "--address", "127.0.0.1:1", cwd=tmp_path)
    elapsed = time.monotonic() - start
    assert proc.returncode == 1
    line = lines_of(proc)["ray cluster"]
    assert line.startswith("[FAIL] ray cluster: cannot reach the Ray cluster at 127.0.0.1:1: "
                           "nothing accepts connections at 127.0.0.1:1")
    assert "ray start --head" in fix_after(proc, "ray cluster")
    assert elapsed < 20, f"took {elapsed:.1f} s"


@pytest.mark.slow
def test_cluster_probe_gives_up_on_a_port_where_no_ray_head_answers():
    from hpsearch.adapters.system import cluster_info

    # Something listens (and accepts), but it is not Ray: ray.init would wait forever.
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        start = time.monotonic()
        info = cluster_info(f"127.0.0.1:{server.getsockname()[1]}", timeout_s=4)
        elapsed = time.monotonic() - start
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        server.close()
    assert "no Ray head answered within 4 s" in info.error
    assert 4 <= elapsed < 15
    assert doctor_cluster.cluster_checks(info)[0].status == FAIL


#: Two Ray nodes in a process of their own (``ray.cluster_utils.Cluster``): the head
#: declares a spot kind and an instance, the other node no kind. It prints the head's
#: address, then holds the cluster until its standard input closes.
TWO_NODES = """
import sys
from ray.cluster_utils import Cluster

cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {
    %r: 1, %r: 1}})
try:
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    print(cluster.address, flush=True)
    sys.stdin.read()
finally:
    cluster.shutdown()
"""


@pytest.mark.slow
def test_doctor_lists_a_real_clusters_node_kinds(tmp_path, space):
    import subprocess
    import sys

    from .test_e2e_netsec import clean_env

    instance = "aws:g4dn.xlarge"
    # Neither the cluster nor the doctor shares this process's Ray: a Cluster made in a
    # process that a session's Ray already holds (ray_cluster, the session token in its
    # environment) never answered the probe (seen under three workers, reproduced).
    env = clean_env()
    holder = subprocess.Popen(
        [sys.executable, "-c", TWO_NODES % (nodekinds.SPOT,
                                            f"{nodekinds.INSTANCE_PREFIX}{instance}")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env, cwd=tmp_path)
    try:
        address = holder.stdout.readline().strip()
        assert address, holder.stderr.read()[-3000:] if holder.poll() is not None else ""
        # Joining takes the probe seconds here, and more while other workers' tests
        # load the machine: the test allows longer than the default 30 s.
        proc = subprocess.run([sys.executable, "-m", "hpsearch", "doctor", str(space),
                               "--address", address, "--timeout", "120"],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=240)
    finally:
        holder.stdin.close()
        try:
            holder.wait(timeout=60)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    head = [line for line in lines if line.startswith("[ok]   ray cluster: ")]
    assert head and "2 alive node(s); CPU 2, GPU 0, memory " in head[0], proc.stdout
    nodes = [line for line in lines if line[7:].startswith("ray node ")]
    assert len(nodes) == 2, proc.stdout
    spot = [line for line in nodes if ": spot, instance aws:g4dn.xlarge; CPU 1, GPU 0" in line]
    assert len(spot) == 1 and spot[0].startswith("[ok]"), proc.stdout
    other = [line for line in nodes if line not in spot][0]
    assert other.startswith("[warn]") and "undeclared kind" in other
    assert "other nodes declare their kind" in other
    assert f'"{nodekinds.ON_DEMAND}": 1000' in proc.stdout
    assert tree(tmp_path) == ["space.yaml"]


# ---------------------------------------------------------------------------------------
# The checks on plain data.


def card(index: int = 0, name: str = "NVIDIA H100 80GB HBM3") -> nvml.Gpu:
    return nvml.Gpu(index, name, f"GPU-{index}", 81559.0, 1024.0, 80535.0, 0.0, 30.0)


TWO_GPUS = nvml.Inventory(True, (card(0), card(1)), "550.54.15", "12.4", "2 GPU(s)")
NO_GPU = nvml.Inventory(False, message="NVML library not found (libnvidia-ml.so): ...")
CPU_TORCH = TorchInfo("2.13.0+cpu")
CUDA_TORCH = TorchInfo("2.13.0+cu124", "12.4", True, ("NVIDIA H100 80GB HBM3",) * 2)


def test_check_status_is_validated_and_rendered():
    with pytest.raises(ValueError, match="status"):
        Check("x", "bad", "y")
    checks = [Check("a", OK, "fine", "ignored"), Check("b", WARN, "hmm", "do this"),
              Check("c", FAIL, "broken", "do that")]
    assert doctor_checks.render(checks) == [
        "[ok]   a: fine",
        "[warn] b: hmm",
        "       fix: do this",
        "[FAIL] c: broken",
        "       fix: do that",
    ]
    assert doctor_checks.exit_code(checks) == 1
    assert doctor_checks.exit_code(checks[:2]) == 0
    assert doctor_checks.summary(checks) == "1 ok, 1 warning(s), 1 failed"
    assert json.loads(doctor_checks.to_json(checks))[2] == {
        "name": "c", "status": "fail", "message": "broken", "fix": "do that"}


def test_cuda_check_nvml_gpus_with_a_cpu_only_torch_fails():
    check = doctor_machine.cuda_check(CPU_TORCH, TWO_GPUS, env={})
    assert check.status == FAIL
    assert "NVML sees 2 GPU(s) but torch 2.13.0+cpu is a CPU-only build" in check.message
    assert "CUDA build" in check.fix and "download.pytorch.org" in check.fix


def test_cuda_check_cuda_build_that_cannot_start_fails_with_the_driver_version():
    info = TorchInfo("2.13.0+cu128", "12.8", False, (), "The NVIDIA driver is too old")
    check = doctor_machine.cuda_check(info, TWO_GPUS, env={})
    assert check.status == FAIL
    assert "cannot use them: The NVIDIA driver is too old" in check.message
    assert "driver supports CUDA 12.4" in check.fix


def test_cuda_check_gpus_hidden_by_cuda_visible_devices_warns():
    info = TorchInfo("2.13.0+cu124", "12.4", False)
    check = doctor_machine.cuda_check(info, TWO_GPUS, env={"CUDA_VISIBLE_DEVICES": ""})
    assert check.status == WARN and "CUDA_VISIBLE_DEVICES=''" in check.message


def test_cuda_check_all_gpus_used_is_ok():
    assert doctor_machine.cuda_check(CUDA_TORCH, TWO_GPUS, env={}).status == OK
    fewer = TorchInfo("2.13.0+cu124", "12.4", True, ("NVIDIA H100 80GB HBM3",))
    assert doctor_machine.cuda_check(fewer, TWO_GPUS, env={}).status == WARN
    masked = doctor_machine.cuda_check(fewer, TWO_GPUS, env={"CUDA_VISIBLE_DEVICES": "1"})
    assert masked.status == OK and "CUDA_VISIBLE_DEVICES='1'" in masked.message


def test_cuda_check_without_gpus_is_ok_either_way():
    assert doctor_machine.cuda_check(CPU_TORCH, NO_GPU, env={}).status == OK
    assert doctor_machine.cuda_check(TorchInfo(None, error="ImportError: x"), NO_GPU,
                                     env={}).status == FAIL


def test_torch_and_nvml_checks():
    assert doctor_machine.torch_check(TorchInfo(None, error="ModuleNotFoundError: torch")
                                      ).status == FAIL
    assert "CPU-only build" in doctor_machine.torch_check(CPU_TORCH).message
    assert "2 x NVIDIA H100 80GB HBM3" in doctor_machine.torch_check(CUDA_TORCH).message
    nvml_ok = doctor_machine.nvml_check(TWO_GPUS)
    assert nvml_ok.status == OK
    assert nvml_ok.message.startswith("driver 550.54.15, CUDA 12.4: 0: NVIDIA H100 80GB HBM3 "
                                   "(80 GiB, 1.0 GiB used), 1: ")
    assert doctor_machine.nvml_check(NO_GPU).status == WARN
    empty = nvml.Inventory(True, (), "550.54.15", "12.4", "no GPU")
    assert doctor_machine.nvml_check(empty).status == WARN


def test_package_check():
    def version(dist):
        return {"ray": "2.60.0", "optuna": "3.6.1"}.get(dist)

    wanted = {"ray": ">=2.40,<3", "optuna": ">=4.0,<6"}
    assert doctor_packages.package_check("ray", "ray", "ray[tune]", True, version,
                                         wanted).status == OK
    old = doctor_packages.package_check("optuna", "optuna", "optuna", True, version, wanted)
    assert old.status == FAIL and old.fix == "pip install 'optuna>=4.0,<6'"
    missing = doctor_packages.package_check("optuna-dashboard", "optuna-dashboard",
                                            "optuna-dashboard", False, version, wanted)
    assert missing.status == WARN and missing.fix == "pip install optuna-dashboard"
    lightning = doctor_packages.package_check("lightning", "pytorch-lightning",
                                              "pytorch-lightning", True, version, {})
    assert lightning.status == FAIL


def node(node_id: str, resources: dict, alive: bool = True) -> NodeInfo:
    return NodeInfo(node_id, alive, "10.0.0." + node_id[-1], {"CPU": 4.0, **resources})


def test_cluster_checks_node_kinds():
    info = ClusterInfo("10.0.0.1:6379", "", {"CPU": 12.0, "GPU": 1.0, "memory": 2 ** 33},
                       (node("aaaaaaaa1", {nodekinds.SPOT: 1000.0,
                                           "hps_instance=aws:p3.2xlarge": 1000.0, "GPU": 1}),
                        node("bbbbbbbb2", {nodekinds.ON_DEMAND: 1000.0}),
                        node("cccccccc3", {}),
                        node("dddddddd4", {nodekinds.SPOT: 1}, alive=False)), 0.5)
    checks = doctor_cluster.cluster_checks(info, packaged())
    assert checks[0] == Check("ray cluster", OK, "10.0.0.1:6379: 3 alive node(s), 1 dead; "
                                                 "CPU 12, GPU 1, memory 8.0 GiB (0.5 s)")
    by_node = {c.name: c for c in checks[1:]}
    assert by_node["ray node 10.0.0.1 (aaaaaaaa)"] == Check(
        "ray node 10.0.0.1 (aaaaaaaa)", OK, "spot, instance aws:p3.2xlarge; CPU 4, GPU 1")
    assert by_node["ray node 10.0.0.2 (bbbbbbbb)"].message == "on-demand; CPU 4, GPU 0"
    undeclared = by_node["ray node 10.0.0.3 (cccccccc)"]
    assert undeclared.status == WARN and "no trial is placed on this one" in undeclared.message
    assert len(checks) == 4  # the dead node is not listed


def test_cluster_checks_without_declared_kinds_and_with_unknown_instances():
    plain = ClusterInfo("auto", "", {"CPU": 4.0}, (node("aaaaaaaa1", {}),))
    only = doctor_cluster.cluster_checks(plain, packaged())[1]
    assert only.status == OK and "runs any trial at the configured price" in only.message
    unknown = ClusterInfo("auto", "", {"CPU": 4.0},
                          (node("aaaaaaaa1", {"hps_instance=p3.2xlarg": 1.0}),))
    bad = doctor_cluster.cluster_checks(unknown, packaged())[1]
    assert bad.status == FAIL and "did you mean" in bad.message and "catalog" in bad.fix


def test_cluster_checks_reports_an_error_with_the_fix():
    checks = doctor_cluster.cluster_checks(ClusterInfo("h:1",
                                                       error="nothing accepts connections"))
    assert checks == [Check("ray cluster", FAIL, "cannot reach the Ray cluster at h:1: "
                                                 "nothing accepts connections",
                            doctor_cluster.UNREACHABLE_FIX)]


def test_writable_probe_leaves_nothing_behind(tmp_path):
    assert doctor_storage.writable(tmp_path / "a" / "b" / "c") is None
    assert doctor_storage.writable(tmp_path) is None
    (tmp_path / "f").write_text("")
    assert doctor_storage.writable(tmp_path / "f" / "sub") == (
        f"{tmp_path / 'f'} is a file, not a directory")
    assert tree(tmp_path) == ["f"]


def test_rdb_error_opens_existing_sqlite_studies_without_writing(tmp_path, new_sqlite):
    import optuna

    from hpsearch.adapters.system import rdb_error

    empty = tmp_path / "empty.db"
    assert rdb_error(f"sqlite:///{empty}") is None
    url = new_sqlite("study.db")
    optuna.create_study(storage=url, study_name="s")
    assert rdb_error(url) is None
    import sqlite3

    with sqlite3.connect(empty) as db:  # connecting created the file, but no table
        assert db.execute("select count(*) from sqlite_master").fetchone() == (0,)
    assert rdb_error("nosuchdialect://x").startswith("NoSuchModuleError")


def test_cluster_checks_a_trial_that_fits_no_node_fails():
    from .test_gpu import make

    info = ClusterInfo("auto", "", {"CPU": 4.0}, (node("aaaaaaaa1", {}),))
    cfg = make({"instance": "aws:p3.2xlarge"}, {"gpu": 1})
    fits = doctor_cluster.cluster_checks(info, packaged(), cfg)[-1]
    assert fits.name == "trial fits" and fits.status == FAIL
    assert fits.message == ("resources.gpu: no trial could ever start: no Ray node has a "
                            "GPU (got 1.0)")
    assert doctor_cluster.cluster_checks(info, packaged(), make({"instance": "local-cpu"})
                                         )[-1].name != "trial fits"


@pytest.mark.slow
@no_driver
def test_gpu_trials_on_a_machine_without_gpus_fail_the_local_ray_check(tmp_path, space):
    proc = hpsearch("doctor", str(space), "--set", "resources.gpu=0.25", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout
    assert lines_of(proc)["ray cluster"].startswith("[FAIL] ray cluster:")
    assert "resources.gpu=0.25, so none could start here" in proc.stdout
    assert "resources.gpu: 0" in fix_after(proc, "ray cluster")
    assert tree(tmp_path) == ["space.yaml"]


def test_local_ray_check_passes_when_the_gpus_suffice():
    two = nvml.Inventory(True, tuple(nvml.Gpu(i, "NVIDIA L4", f"GPU-{i}", 24e3, 0.0, 24e3)
                                    for i in range(2)))
    assert doctor_cluster.local_ray_check(two, cpus=8, trial_gpus=2).status == OK
    assert doctor_cluster.local_ray_check(two, cpus=8, trial_gpus=0.5).status == OK
    assert doctor_cluster.local_ray_check(two, cpus=8, trial_gpus=3).status == FAIL


# -- the checkpoint storage -----------------------------------------------------------


def test_checkpoint_storage_checks():
    nodes = (NodeInfo("aaaa1111", True, "10.0.0.1"), NodeInfo("bbbb2222", True, "10.0.0.2"))
    info = ClusterInfo("auto", nodes=nodes, storage={"aaaa1111": None, "bbbb2222": None})
    (ok,) = doctor_storage.checkpoint_storage_checks("s3://b/p", False, info)
    assert ok.status == OK and "every alive node (2)" in ok.message
    bad = ClusterInfo("auto", nodes=nodes, storage={
        "aaaa1111": None, "bbbb2222": "the driver's probe file is not there"})
    (fail,) = doctor_storage.checkpoint_storage_checks("/run/dir/checkpoints", True, bad)
    assert fail.status == FAIL
    assert fail.message.startswith("node 10.0.0.2 (bbbb2222) cannot reach the run dir's "
                                   "checkpoints/: the driver's probe file is not there")
    assert "set checkpoint.storage to an object store" in fail.fix
    (here,) = doctor_storage.checkpoint_storage_checks("s3://b/p", False, None,
                                                      local_error="OSError: access denied")
    assert here.status == FAIL and "cannot be written from here" in here.message
    assert "AWS_ACCESS_KEY_ID" in here.fix
    (local,) = doctor_storage.checkpoint_storage_checks("/r/checkpoints", True, None)
    assert local.status == OK and "this machine's disk" in local.message


def test_doctor_writes_reads_and_deletes_a_token_where_checkpoints_go(tmp_path):
    shared = tmp_path / "nfs" / "ckpt"
    assert doctor_storage.storage_write_error(str(shared)) is None
    assert not (tmp_path / "nfs").exists()  # nothing left behind
    readonly = tmp_path / "ro"
    readonly.mkdir()
    readonly.chmod(0o500)
    try:
        import os

        if os.geteuid() != 0:  # root writes anywhere
            assert doctor_storage.storage_write_error(str(readonly / "x")) is not None
    finally:
        readonly.chmod(0o700)


def test_doctor_timeout_reaches_the_cluster_probe(monkeypatch, capsys):
    from hpsearch import cli
    from hpsearch.adapters import system

    asked = []
    monkeypatch.setattr(doctor, "diagnose", lambda *args, **kwargs: (
        asked.append(kwargs.get("ray_timeout_s", "default")) or []))
    assert cli.main(["doctor", "--address", "127.0.0.1:1", "--timeout", "75.5"]) == 0
    assert cli.main(["doctor", "--address", "127.0.0.1:1"]) == 0
    assert asked == [75.5, "default"]
    capsys.readouterr()
    with pytest.raises(SystemExit):
        cli.main(["doctor", "--help"])
    # The help's default is the probe's.
    assert f"(default {system.RAY_TIMEOUT_S:g};" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("value", ["0", "-3", "abc", "inf", "nan"])
def test_doctor_timeout_must_be_positive_seconds(value, capsys):
    from hpsearch import cli

    with pytest.raises(SystemExit) as info:
        cli.main(["doctor", "--timeout", value])
    assert info.value.code == 2
    assert (f"argument --timeout: must be a positive number of seconds, not {value!r}"
            in capsys.readouterr().err)


def test_the_hpsearch_check_names_the_package_folder_this_copy_runs_from():
    import hpsearch

    check = doctor_machine.hpsearch_check()
    where = str(Path(hpsearch.__file__).resolve().parent)
    assert check.message.endswith(f"({where})"), check.message
