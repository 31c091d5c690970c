"""The cluster examples users launch, and the search space that runs on them.

- ``clusters/aws-spot.yaml`` goes through the steps ``ray up`` takes before it talks to
  AWS: ``prepare_config`` (Ray's AWS defaults merged in, setup commands merged per node
  type) and ``validate_config`` (Ray's JSON schema ``ray/autoscaler/ray-schema.json`` and
  its cross-field checks: the head type exists, the types' ``min_workers`` fit
  ``max_workers``). What ``ray up`` does next (IAM profiles, subnets, AMIs, key pairs)
  needs an AWS account and is not run here.
- ``clusters/kuberay.yaml`` goes through
  ``ray.autoscaler._private.kuberay.autoscaling_config._derive_autoscaling_config_from_ray_cr``,
  the function Ray's in-tree autoscaler runs on a RayCluster read from Kubernetes: it
  parses each group's ``rayStartParams`` (the ``resources`` JSON, ``num-cpus``) and the
  Ray container's limits into node types, then runs ``validate_config``. The RayCluster
  CRD's OpenAPI schema is not installable from PyPI (it ships with the KubeRay operator:
  its Helm chart and repository, a 0.9 MB ``ray.io_rayclusters.yaml``), so it is not
  checked by this test; the file was checked against KubeRay v1.7.0's CRD (``v1``
  ``openAPIV3Schema`` with jsonschema: no error, and no field the API server would
  prune) when it was written.
- Every worker type's resources are read the way hpsearch reads a node of ``ray.nodes()``
  (:func:`hpsearch.money.nodekinds.parse_node`); each declared instance is a row of the
  packaged catalogue that matches the machine the type rents, and the run's
  :class:`~hpsearch.core.placement.Placement` places and prices trials on those nodes.

Private Ray names are used here only (hpsearch itself does not depend on them).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from hpsearch import cli, keys
from hpsearch.core.placement import Placement, check_fits
from hpsearch.money import catalog as catalog_mod
from hpsearch.money import nodekinds, pricing
from hpsearch.spec import config as config_mod

from .conftest import REPO

AWS = REPO / "clusters" / "aws-spot.yaml"
KUBERAY = REPO / "clusters" / "kuberay.yaml"
SPACE = REPO / "search_spaces" / "digits_cluster_s3.yaml"
#: What an AWS access key id or a secret key looks like: never in an example.
SECRET_RE = re.compile(r"AKIA[0-9A-Z]{16}|[A-Za-z0-9/+]{40}")


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def aws_prepared(cfg: dict | None = None) -> dict:
    """``cfg`` (default: the example) as ``ray up`` has it once it has been checked."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    prepared = prepare_config(copy.deepcopy(cfg if cfg is not None else load(AWS)))
    validate_config(prepared)
    return prepared


def kuberay_node_types(cr: dict | None = None) -> dict:
    """The node types Ray's autoscaler derives from the RayCluster (validated)."""
    from ray.autoscaler._private.kuberay.autoscaling_config import (
        _derive_autoscaling_config_from_ray_cr,
    )

    derived = _derive_autoscaling_config_from_ray_cr(copy.deepcopy(cr or load(KUBERAY)))
    return derived["available_node_types"]


def as_ray_node(name: str, resources: dict) -> dict:
    """One entry of ``ray.nodes()`` for a node of a type with these resources."""
    return {"NodeID": f"{name}-node", "Alive": True,
            "Resources": {k: float(v) for k, v in resources.items()}}


def kind_of(resources: dict) -> nodekinds.NodeKind:
    return nodekinds.parse_node(as_ray_node("n", resources))


# -- clusters/aws-spot.yaml -----------------------------------------------------------


def test_the_aws_config_passes_rays_own_cluster_config_validation():
    prepared = aws_prepared()
    types = prepared["available_node_types"]
    assert prepared["provider"]["type"] == "aws"
    assert set(types) == {"head", "gpu_on_demand", "gpu_spot"}
    assert prepared["head_node_type"] == "head"
    # Stopped spot instances cannot be started again: idle nodes are terminated.
    assert prepared["provider"]["cache_stopped_nodes"] is False
    for name, node_type in types.items():
        if name != "head":
            assert node_type["max_workers"] >= max(1, node_type.get("min_workers", 0))
    # The autoscaler keeps one spot node alive, so a spot node taken back is replaced.
    assert types["gpu_spot"]["min_workers"] >= 1


@pytest.mark.parametrize("break_it, complaint", [
    # Ray's resources are whole numbers: a fractional declaration is refused.
    (lambda c: c["available_node_types"]["gpu_spot"]["resources"].update(hps_spot=0.5),
     "is not of type 'integer'"),
    # A field the launcher does not know (a typo) is refused, not ignored.
    (lambda c: c["available_node_types"]["gpu_spot"].update(min_worker=1),
     "Additional properties are not allowed"),
])
def test_rays_validation_refuses_a_broken_copy_of_the_aws_config(break_it, complaint):
    cfg = load(AWS)
    break_it(cfg)
    with pytest.raises(jsonschema.ValidationError, match=complaint):
        aws_prepared(cfg)


def test_every_aws_worker_type_declares_its_market_and_a_catalogue_instance():
    types = aws_prepared()["available_node_types"]
    catalogue = catalog_mod.packaged()
    kinds = {}
    for name, node_type in types.items():
        kind = kind_of(node_type["resources"])
        if name == "head":
            # The driver's node runs no trial and declares no kind.
            assert node_type["resources"] == {"CPU": 0}
            assert kind.spot is None and kind.instance is None
            assert "InstanceMarketOptions" not in node_type["node_config"]
            continue
        market = node_type["node_config"].get("InstanceMarketOptions", {}).get("MarketType")
        assert kind.spot is (market == "spot"), (name, market)
        assert kind.instance is not None, name
        offer = catalogue.lookup(kind.instance)  # raises for a name that is no row
        assert offer.key == kind.instance and offer.provider == "aws"
        # The row is the machine this type rents, with its CPUs and GPUs.
        assert offer.instance == node_type["node_config"]["InstanceType"]
        assert node_type["resources"]["GPU"] == offer.gpu_count
        assert node_type["resources"]["CPU"] == offer.vcpus
        # More than trials ask for (each takes KIND_SHARE of its kind).
        declared = node_type["resources"][nodekinds.INSTANCE_PREFIX + kind.instance]
        kind_amount = node_type["resources"][nodekinds.SPOT if kind.spot
                                             else nodekinds.ON_DEMAND]
        assert min(declared, kind_amount) * nodekinds.KIND_SHARE >= 1
        kinds[name] = kind.spot
    assert sorted(kinds.values()) == [False, True]


def test_aws_nodes_join_with_the_heads_token_and_no_secret_is_in_the_file():
    prepared = aws_prepared()
    # The token reaches every node through file_mounts (head first, then workers).
    assert prepared["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    starts = {"head": prepared["head_start_ray_commands"],
              "worker": prepared["worker_start_ray_commands"]}
    for side, commands in starts.items():
        joins = [c for c in commands if "ray start" in c]
        assert joins, side
        assert all("RAY_AUTH_MODE=token ray start" in c for c in joins), (side, joins)
    assert any("--head" in c for c in starts["head"])
    assert any("chmod 600 ~/.ray/auth_token" in c for c in prepared["setup_commands"])
    assert any("pip install" in c and "hpsearch" in c for c in prepared["setup_commands"])
    assert not SECRET_RE.search(AWS.read_text())


# -- clusters/kuberay.yaml ------------------------------------------------------------


def test_the_kuberay_cluster_is_read_by_rays_autoscaler_with_hpsearchs_node_kinds():
    cr = load(KUBERAY)
    assert cr["apiVersion"] == "ray.io/v1" and cr["kind"] == "RayCluster"
    assert cr["spec"]["authOptions"]["mode"] == "token"
    assert cr["spec"]["enableInTreeAutoscaling"] is True
    types = kuberay_node_types(cr)
    assert types["headgroup"]["resources"]["CPU"] == 0
    assert kind_of(types["headgroup"]["resources"]).spot is None
    groups = {g["groupName"]: g for g in cr["spec"]["workerGroupSpecs"]}
    assert set(types) == {"headgroup", *groups}
    catalogue = catalog_mod.packaged()
    seen = []
    for name, group in groups.items():
        resources = types[name]["resources"]
        kind = kind_of(resources)
        selector = group["template"]["spec"]["nodeSelector"]
        capacity = selector["karpenter.sh/capacity-type"]
        assert kind.spot is (capacity == "spot"), (name, capacity)
        offer = catalogue.lookup(kind.instance)
        assert selector["node.kubernetes.io/instance-type"] == offer.instance
        assert resources["GPU"] == offer.gpu_count
        # A pod gets less than the machine: it must still fit on it.
        assert 0 < resources["CPU"] <= offer.vcpus
        assert types[name]["min_workers"] <= types[name]["max_workers"]
        seen.append(kind.spot)
    assert sorted(seen) == [False, True]
    # One spot pod is kept alive (replaced when its node is taken back).
    assert groups["gpu-spot"]["minReplicas"] >= 1


def test_rays_autoscaler_refuses_a_kuberay_group_with_unparsable_resources():
    cr = load(KUBERAY)
    cr["spec"]["workerGroupSpecs"][1]["rayStartParams"]["resources"] = \
        '"{\\"hps_spot\\": 1000, \\"hps_instance=aws:g4dn.xlarge\\": }"'
    with pytest.raises(json.JSONDecodeError):
        kuberay_node_types(cr)


def test_every_kuberay_container_takes_the_storage_credentials_from_a_secret():
    cr = load(KUBERAY)
    groups = [cr["spec"]["headGroupSpec"], *cr["spec"]["workerGroupSpecs"]]
    for group in groups:
        (container,) = group["template"]["spec"]["containers"]
        env = {e["name"]: e for e in container["env"]}
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            assert "value" not in env[name], name
            assert env[name]["valueFrom"]["secretKeyRef"]["key"] == name
    assert not SECRET_RE.search(KUBERAY.read_text())


# -- search_spaces/digits_cluster_s3.yaml ----------------------------------------------


def test_the_cluster_space_validates_with_its_checkpoints_on_s3(capsys):
    config = config_mod.load(SPACE)
    assert config.checkpoint.storage == "s3://BUCKET/hpsearch"
    assert config.cluster.address == "auto"
    assert config.pricing.spot is True and config.preemption.on_demand_fallback
    # `python -m hpsearch validate` (in this process; the trainable is not imported).
    assert cli.main(["validate", str(SPACE), "--no-import"]) == 0
    assert "is valid" in capsys.readouterr().err


@pytest.mark.parametrize("cluster", ["aws", "kuberay"])
def test_the_space_places_and_prices_trials_on_each_clusters_nodes(cluster):
    config = config_mod.load(SPACE)
    if cluster == "aws":
        types = {n: t["resources"] for n, t in aws_prepared()["available_node_types"].items()}
    else:
        types = {n: t["resources"] for n, t in kuberay_node_types().items()}
    nodes = [as_ray_node(name, resources) for name, resources in types.items()]
    check_fits(config, nodes)  # a trial fits on the GPU workers
    run_price = pricing.resolve(config)
    placement = Placement(config, run_price, list_nodes=lambda: nodes, clock=lambda: 0.0)
    assert placement.active
    # A spot node is alive: a trial goes to spot, asking for what only spot nodes have.
    assert placement.choose() == (True, None)
    ask = placement.resources({"CPU": config.resources.cpu, "GPU": config.resources.gpu})(
        {keys.SPOT_NODE: True})
    fits = [name for name, res in types.items()
            if all(res.get(k, 0) >= v for k, v in ask.items())]
    assert len(fits) == 1 and kind_of(types[fits[0]]).spot is True
    offer = catalog_mod.packaged().lookup("aws:g4dn.xlarge")
    for node in nodes:
        kind = nodekinds.parse_node(node)
        price = placement.price_of(kind)
        if kind.spot is None:
            continue
        assert price.instance == kind.instance and price.spot is kind.spot
        assert price.instance_per_hour == offer.instance_price_per_hour(kind.spot)


# -- the docs' account -----------------------------------------------------------------


def test_the_docs_refusal_line_is_the_one_the_run_prints():
    from hpsearch.adapters.ray.storage import refusal
    from hpsearch.errors import ConfigError
    from hpsearch.recovery import storage
    from hpsearch.spec.storage_url import FIELD

    node = "3f5c9a1e" + "0" * 48
    why = storage.check_token(str(REPO / "no-such-folder"), "probe", "token")
    line = "hpsearch: error: " + str(ConfigError(FIELD, refusal(
        "/runs/x/checkpoints", True, {node: why},
        [{"NodeID": node, "NodeManagerAddress": "10.0.1.23"}])))
    clusters = (REPO / "docs" / "clusters.md").read_text()
    assert line in clusters
    assert "## Clusters without a shared disk: checkpoints on object storage\n" in clusters
    # The key reference and the spot section send readers there.
    for page in ("reference.md", "reliability.md"):
        assert ("(clusters.md#clusters-without-a-shared-disk-checkpoints-on-object-storage)"
                in (REPO / "docs" / page).read_text()), page
