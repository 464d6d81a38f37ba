"""`gpurig env k8s` manifests, validated against the real schemas (offline).

- The Kubeflow training operator v1.9.0 CRDs for PyTorchJob and TFJob (`openAPIV3Schema`), with
  undeclared fields as errors, as the API server's strict field validation treats them.
- Kubernetes v1.31.0's strict PodTemplateSpec (and ObjectMeta) for every replica's `template`.
- The few rules the operator's admission webhook adds, and the variables its controller sets.

Sources, versions and licences: tests/fixtures/k8s/SOURCES.md.
"""

from __future__ import annotations

import copy
import json
import re
from functools import cache
from pathlib import Path

import pytest
import yaml
from env_rigs import CRAFTED

# A test dependency (`[test]`), not a product one: an image with gpurig's runtime alone skips this file.
pytest.importorskip("jsonschema", reason="the manifests are validated with jsonschema, from gpurig's [test] extra")
from jsonschema import Draft4Validator, FormatChecker
from jsonschema.validators import validator_for
from referencing import Registry, Resource

from gpurig.errors import BadInput
from gpurig.recipes.base import HostSummary
from gpurig.recipes.cluster import PYTORCHJOB_PORT, TFJOB_PORT, ClusterOptions, k8s_recipe

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "k8s"
K8S = FIXTURES / "kubernetes-v1.31.0-local-strict"
H200 = HostSummary.from_facts(CRAFTED["h200x2_r580"])  # 2 GPUs: the default --gpus-per-node

# kind -> (CRD file, replica specs key, container name the operator requires, port name, port)
KINDS = {
    "PyTorchJob": ("kubeflow.org_pytorchjobs.yaml", "pytorchReplicaSpecs", "pytorch", "pytorchjob-port",
                   PYTORCHJOB_PORT),
    "TFJob": ("kubeflow.org_tfjobs.yaml", "tfReplicaSpecs", "tensorflow", "tfjob-port", TFJOB_PORT),
}

FORMATS = FormatChecker(formats=())


@FORMATS.checks("int32")
def _int32(value) -> bool:
    return not isinstance(value, int) or -(2**31) <= value < 2**31


@FORMATS.checks("int64")
def _int64(value) -> bool:
    return not isinstance(value, int) or -(2**63) <= value < 2**63


def _closed(schema, root: bool = True):
    """The CRD schema with undeclared fields as errors.

    A structural CRD schema prunes what it does not declare, and `kubectl apply` (strict field
    validation, its default) refuses such a field instead; so every object without
    `additionalProperties` or `x-kubernetes-preserve-unknown-fields` gets `additionalProperties: false`.
    The top-level `metadata` is the API server's ObjectMeta: it is checked against Kubernetes' own.
    """
    if isinstance(schema, list):
        return [_closed(s, False) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "properties":
            out[key] = {name: (value[name] if root and name == "metadata" else _closed(value[name], False))
                        for name in value}
        else:
            out[key] = _closed(value, False)
    if (out.get("type") == "object" and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields") and not root):
        out["additionalProperties"] = False
    if root:
        out["additionalProperties"] = False
    return out


@cache
def crd_validator(kind: str) -> Draft4Validator:
    crd = yaml.safe_load((FIXTURES / KINDS[kind][0]).read_text())
    assert crd["spec"]["names"]["kind"] == kind and crd["spec"]["group"] == "kubeflow.org"
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = _closed(version["schema"]["openAPIV3Schema"])
    Draft4Validator.check_schema(schema)
    return Draft4Validator(schema, format_checker=FORMATS)


@cache
def _k8s_registry() -> tuple[Registry, dict]:
    definitions = json.loads((K8S / "_definitions.json").read_text())
    template = json.loads((K8S / "podtemplatespec-v1.json").read_text())
    registry = Registry().with_resources([
        (definitions["$id"], Resource.from_contents(definitions)),
        (template["$id"], Resource.from_contents(template)),
    ])
    return registry, template


def k8s_validator(schema: dict):
    registry, _ = _k8s_registry()
    cls = validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, registry=registry, format_checker=FORMATS)


@cache
def pod_template_validator():
    return k8s_validator(_k8s_registry()[1])


@cache
def object_meta_validator():
    registry, template = _k8s_registry()
    return k8s_validator({"$schema": template["$schema"],
                          "$ref": template["properties"]["metadata"]["$ref"].replace(
                              "/api/", "https://kubernetes.io/api/", 1)})


def _where(error) -> str:
    return "/".join(str(p) for p in error.absolute_path) or "(top)"


def schema_errors(doc: dict) -> list[str]:
    """Every way `doc` breaks the CRD, Kubernetes' PodTemplateSpec, or the top-level ObjectMeta."""
    kind = doc.get("kind")
    if kind not in KINDS:
        return [f"kind: {kind!r} is not one of {sorted(KINDS)}"]
    errors = [f"CRD {_where(e)}: {e.message}" for e in crd_validator(kind).iter_errors(doc)]
    errors += [f"ObjectMeta {_where(e)}: {e.message}" for e in object_meta_validator().iter_errors(doc.get("metadata"))]
    specs = doc.get("spec", {}).get(KINDS[kind][1])
    for role, replica in (specs or {}).items():
        template = replica.get("template") if isinstance(replica, dict) else None
        errors += [f"PodTemplateSpec {role}/{_where(e)}: {e.message}"
                   for e in pod_template_validator().iter_errors(template)]
    return errors


_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


def operator_errors(doc: dict) -> list[str]:
    """The v1.9.0 admission webhook's rules for a new PyTorchJob or TFJob (see SOURCES.md), restated."""
    kind = doc["kind"]
    _, key, container_name, _, _ = KINDS[kind]
    spec = doc["spec"]
    errors = []
    if not _DNS1035.match(doc["metadata"]["name"]):
        errors.append("metadata.name: not a DNS-1035 label")
    specs = spec.get(key)
    if not specs:
        errors.append(f"spec.{key}: required")
    for role, replica in (specs or {}).items():
        containers = replica["template"]["spec"].get("containers") or []
        if not containers:
            errors.append(f"{role}: no containers")
        if any(not c.get("image") for c in containers):
            errors.append(f"{role}: a container without an image")
        if container_name not in [c.get("name") for c in containers]:
            errors.append(f"{role}: no container named {container_name}")
        if kind == "PyTorchJob":
            if role not in ("Master", "Worker"):
                errors.append(f"{role}: not a PyTorchJob replica type")
            elif role == "Master" and replica.get("replicas") != 1:
                errors.append("Master: replicas must be 1")
            elif replica.get("replicas", 1) < 1:
                errors.append(f"{role}: replicas must be at least 1")
    if kind == "TFJob" and len([r for r in specs or {} if r.lower() in ("chief", "master")]) > 1:
        errors.append("more than one Chief or Master")
    elastic = spec.get("elasticPolicy")
    if elastic is not None:
        if "Worker" not in (specs or {}):
            errors.append("elasticPolicy: needs a Worker replica spec")
        if "nProcPerNode" in elastic and "nprocPerNode" in spec:
            errors.append("elasticPolicy.nProcPerNode: not together with spec.nprocPerNode")
    return errors


def operator_env(doc: dict) -> dict[str, str]:
    """The rendezvous variables the v1.9.0 controller adds to each PyTorchJob pod (see SOURCES.md)."""
    name, spec = doc["metadata"]["name"], doc["spec"]
    specs = spec["pytorchReplicaSpecs"]

    def port(role: str) -> int:
        (c,) = [c for c in specs[role]["template"]["spec"]["containers"] if c["name"] == "pytorch"]
        (p,) = [p["containerPort"] for p in c["ports"] if p["name"] == "pytorchjob-port"]
        return p

    env = {}
    if "Master" in specs:
        env |= {"MASTER_ADDR": f"{name}-master-0", "MASTER_PORT": str(port("Master"))}
    elastic = spec.get("elasticPolicy")
    if elastic is None:
        env["PET_NNODES"] = str(sum(r.get("replicas", 1) for r in specs.values()))
    else:
        env |= {
            "PET_RDZV_ENDPOINT": f"{name}-worker-0:{port('Worker')}",
            "PET_RDZV_BACKEND": elastic.get("rdzvBackend", "c10d"),
            "PET_NNODES": f"{elastic['minReplicas']}:{elastic['maxReplicas']}",
        }
        if "maxRestarts" in elastic:
            env["PET_MAX_RESTARTS"] = str(elastic["maxRestarts"])
    return env


def expand(arg: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in a container's command (unknown references stay as they are)."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), arg)


def flag_value(command: list[str], name: str) -> str:
    (value,) = [a.split("=", 1)[1] for a in command if a.startswith(name + "=")]
    return value


def manifest(**kw) -> dict:
    kw.setdefault("command", ["train.py", "--epochs", "3"])
    return yaml.safe_load(k8s_recipe(H200, ClusterOptions(**kw)).text)


SHAPES = {
    "torch-1-node": dict(nodes=1),
    "torch-4x8": dict(nodes=4, gpus_per_node=8),
    "tf-3-nodes": dict(nodes=3, framework="tf", command=["python", "train_tf.py"]),
    "torch-named": dict(nodes=2, gpus_per_node=4, image="registry.example.com/team/train:2025.1",
                        job_name="bert-large-ft", port=31000, max_restarts=2),
    "torch-elastic-2-4": dict(nodes=4, gpus_per_node=8, min_nodes=2, max_restarts=3),
    "torch-elastic-launch": dict(nodes=3, min_nodes=3, max_restarts=1,
                                 command=["gpurig", "launch", "train.py"]),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_manifest_passes_the_crd_kubernetes_and_the_operators_rules(shape):
    doc = manifest(**SHAPES[shape])
    assert schema_errors(doc) == []
    assert operator_errors(doc) == []


@pytest.mark.parametrize("shape", list(SHAPES))
def test_each_pod_gets_its_gpus_shm_container_name_and_port(shape):
    kw = SHAPES[shape]
    doc = manifest(**kw)
    kind = "TFJob" if kw.get("framework") == "tf" else "PyTorchJob"
    _, key, container_name, port_name, port = KINDS[kind]
    assert doc["apiVersion"] == "kubeflow.org/v1" and doc["kind"] == kind
    assert doc["metadata"]["name"] == kw.get("job_name", "gpurig-train")
    gpus = kw.get("gpus_per_node", H200.gpu_count)
    specs = doc["spec"][key]
    replicas = sum(r["replicas"] for r in specs.values())
    assert replicas == kw["nodes"]
    for role, replica in specs.items():
        pod = replica["template"]["spec"]
        (container,) = pod["containers"]
        assert container["name"] == container_name, role
        assert container["image"] == kw.get("image", "gpurig-train")
        assert container["resources"]["limits"]["nvidia.com/gpu"] == gpus
        assert container["ports"] == [{"name": port_name, "containerPort": port}]
        # /dev/shm from a RAM-backed emptyDir with a size limit, not the container runtime's 64 MB.
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm"]
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        assert set(volume) == {"name", "emptyDir"}
        assert volume["emptyDir"]["medium"] == "Memory"
        assert re.fullmatch(r"[1-9][0-9]*Gi", volume["emptyDir"]["sizeLimit"])
    if kind == "PyTorchJob":
        assert doc["spec"]["nprocPerNode"] == str(gpus)


def test_ports_are_the_operators_not_the_slurm_port():
    # ClusterOptions.port is the Slurm rendezvous port; the pods use the port the operator's
    # Services and variables point at, found by the port's name.
    doc = manifest(**SHAPES["torch-named"])
    for replica in doc["spec"]["pytorchReplicaSpecs"].values():
        assert replica["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] == PYTORCHJOB_PORT == 23456
    tf = manifest(**SHAPES["tf-3-nodes"])
    assert tf["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["ports"][0][
        "containerPort"] == TFJOB_PORT == 2222


@pytest.mark.parametrize("shape", ["torch-1-node", "torch-4x8", "torch-named"])
def test_fixed_size_pytorchjob_meets_at_the_master(shape):
    kw = SHAPES[shape]
    doc = manifest(**kw)
    specs = doc["spec"]["pytorchReplicaSpecs"]
    assert "elasticPolicy" not in doc["spec"]
    assert specs["Master"]["replicas"] == 1
    assert specs.get("Worker", {"replicas": 0})["replicas"] == kw["nodes"] - 1
    env = operator_env(doc)
    name = doc["metadata"]["name"]
    for replica in specs.values():
        command = [expand(a, env) for a in replica["template"]["spec"]["containers"][0]["command"]]
        assert command[0] == "torchrun"
        assert flag_value(command, "--nnodes") == env["PET_NNODES"] == str(kw["nodes"])
        assert flag_value(command, "--rdzv-backend") == "c10d"
        assert flag_value(command, "--rdzv-endpoint") == f"{name}-master-0:{PYTORCHJOB_PORT}"


def test_elastic_pytorchjob_has_the_policy_workers_only_and_torchrun_min_max():
    doc = manifest(**SHAPES["torch-elastic-2-4"])
    spec = doc["spec"]
    assert spec["elasticPolicy"] == {"rdzvBackend": "c10d", "minReplicas": 2, "maxReplicas": 4, "maxRestarts": 3}
    specs = spec["pytorchReplicaSpecs"]
    assert list(specs) == ["Worker"]  # the operator's rendezvous for elastic jobs is on worker-0
    assert specs["Worker"]["replicas"] == spec["elasticPolicy"]["maxReplicas"]
    env = operator_env(doc)
    command = [expand(a, env) for a in specs["Worker"]["template"]["spec"]["containers"][0]["command"]]
    assert command[0] == "torchrun"
    assert flag_value(command, "--nnodes") == env["PET_NNODES"] == "2:4"
    assert flag_value(command, "--nproc-per-node") == spec["nprocPerNode"] == "8"
    assert flag_value(command, "--rdzv-backend") == env["PET_RDZV_BACKEND"] == "c10d"
    assert flag_value(command, "--rdzv-endpoint") == env["PET_RDZV_ENDPOINT"] == f"gpurig-train-worker-0:{PYTORCHJOB_PORT}"
    assert flag_value(command, "--max-restarts") == env["PET_MAX_RESTARTS"] == "3"
    assert command[-3:] == ["train.py", "--epochs", "3"]


def test_elastic_gpurig_launch_gets_the_node_range():
    doc = manifest(**SHAPES["torch-elastic-launch"])
    worker = doc["spec"]["pytorchReplicaSpecs"]["Worker"]
    command = worker["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["gpurig", "launch"] and command[-1] == "train.py"
    assert flag_value(command, "--nnodes") == "3:3" and worker["replicas"] == 3
    assert flag_value(command, "--rdzv-endpoint") == "$(PET_RDZV_ENDPOINT)"


def test_elastic_without_restarts_warns():
    recipe = k8s_recipe(H200, ClusterOptions(nodes=4, min_nodes=2, command=["train.py"]))
    assert any("--max-restarts" in w for w in recipe.warnings)
    assert not k8s_recipe(H200, ClusterOptions(nodes=4, min_nodes=2, max_restarts=3, command=["t.py"])).warnings


@pytest.mark.parametrize("kw, named", [
    (dict(nodes=4, min_nodes=0), "--min-nodes"),
    (dict(nodes=4, min_nodes=5), "--min-nodes"),
    (dict(nodes=2, min_nodes=1, framework="tf"), "--min-nodes"),
    (dict(nodes=1, min_nodes=1, command=["gpurig", "train"]), "--min-nodes"),
    (dict(nodes=2, job_name="1st-run"), "--job-name"),
])
def test_bad_elastic_options_and_names_the_operator_refuses(kw, named):
    kw.setdefault("command", ["train.py"])
    with pytest.raises(BadInput, match=named):
        k8s_recipe(H200, ClusterOptions(**kw))


def _container(doc: dict) -> dict:
    return next(iter(doc["spec"]["pytorchReplicaSpecs"].values()))["template"]["spec"]["containers"][0]


def _set(path: str, value):
    def change(doc):
        *parents, last = path.split("/")
        node = doc
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        node[last] = value
    return change


BREAKS = {
    "replicas as a string": (_set("spec/pytorchReplicaSpecs/Worker/replicas", "3"), {"CRD"}),
    "replicas past int32": (_set("spec/pytorchReplicaSpecs/Worker/replicas", 2**31), {"CRD"}),
    "minReplicas as a string": (_set("spec/elasticPolicy/minReplicas", "2"), {"CRD"}),
    "an unknown elasticPolicy field": (_set("spec/elasticPolicy/minNodes", 2), {"CRD"}),
    "an unknown spec field": (_set("spec/elastic", True), {"CRD"}),
    "nprocPerNode as a number": (_set("spec/nprocPerNode", 8), {"CRD"}),
    "containerPort as a string": (
        lambda d: _container(d)["ports"][0].update(containerPort="23456"), {"CRD", "PodTemplateSpec"}),
    "an unknown container field": (lambda d: _container(d).update(gpus=8), {"CRD", "PodTemplateSpec"}),
    "a GPU count that is no quantity": (
        lambda d: _container(d)["resources"]["limits"].update({"nvidia.com/gpu": "eight"}), {"CRD"}),
    "command as a string": (lambda d: _container(d).update(command="torchrun train.py"), {"CRD", "PodTemplateSpec"}),
    "emptyDir with an unknown field": (
        lambda d: d["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["volumes"][0]["emptyDir"].update(
            memory=True), {"CRD", "PodTemplateSpec"}),
    "a volume with no name": (
        lambda d: d["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["volumes"][0].pop("name"),
        {"CRD", "PodTemplateSpec"}),
    "metadata.labels as a list": (_set("metadata/labels", ["a"]), {"ObjectMeta"}),
}


@pytest.mark.parametrize("name", list(BREAKS))
def test_a_broken_manifest_is_rejected(name):
    change, by = BREAKS[name]
    doc = manifest(**SHAPES["torch-elastic-2-4"])
    assert schema_errors(doc) == []  # the manifest it starts from is valid ...
    broken = copy.deepcopy(doc)
    change(broken)
    errors = schema_errors(broken)
    assert errors, name  # ... and one change breaks it
    assert {e.split(" ", 1)[0] for e in errors} == by, errors


def test_the_operators_rules_catch_what_the_schemas_allow():
    doc = manifest(**SHAPES["torch-elastic-2-4"])
    no_worker = copy.deepcopy(doc)
    specs = no_worker["spec"]["pytorchReplicaSpecs"]
    specs["Master"] = specs.pop("Worker")
    specs["Master"]["replicas"] = 1
    assert schema_errors(no_worker) == []
    assert operator_errors(no_worker) == ["elasticPolicy: needs a Worker replica spec"]
    renamed = copy.deepcopy(doc)
    _container(renamed)["name"] = "trainer"
    assert schema_errors(renamed) == []
    assert operator_errors(renamed) == ["Worker: no container named pytorch"]


def test_the_cli_writes_an_elastic_job_and_refuses_bad_min_nodes(run_cli, facts_file):
    rig = str(facts_file("h200x2_r580"))
    ok = run_cli("env", "k8s", "--facts", rig, "--nnodes", "4", "--min-nodes", "2", "--max-restarts", "3",
                 "--", "train.py")
    assert ok.returncode == 0, ok.stderr
    doc = yaml.safe_load(ok.stdout)
    assert schema_errors(doc) == [] and operator_errors(doc) == []
    assert doc["spec"]["elasticPolicy"]["minReplicas"] == 2
    for args in (["--nnodes", "4", "--min-nodes", "0"], ["--nnodes", "2", "--min-nodes", "3"],
                 ["--nnodes", "2", "--min-nodes", "1", "--framework", "tf"]):
        bad = run_cli("env", "k8s", "--facts", rig, *args, "--", "train.py")
        assert bad.returncode == 2, (args, bad.stdout, bad.stderr)
        assert "--min-nodes" in bad.stderr and bad.stdout == ""
