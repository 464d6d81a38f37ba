"""Slurm sbatch scripts and Kubeflow manifests: valid, and right for N nodes x G GPUs.

The sbatch scripts are also run under a fake Slurm (scontrol, srun and torchrun stand-ins on PATH
that record what they are given), so the variables the script builds are checked, not only its text.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from env_rigs import CRAFTED

from gpurig.errors import BadInput
from gpurig.recipes.base import HostSummary
from gpurig.recipes.cluster import ClusterOptions, k8s_recipe, slurm_recipe, torchrun_entry

H200 = HostSummary.from_facts(CRAFTED["h200x2_r580"])
CPU = HostSummary.from_facts(CRAFTED["laptop_cpu"])


def torchrun_argv(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("srun "))
    joined = []
    for ln in lines[start:]:
        joined.append(ln.rstrip("\\").strip())
        if not ln.endswith("\\"):
            break
    argv = shlex.split(" ".join(joined))
    return argv[argv.index("torchrun"):]


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


@pytest.mark.parametrize("nodes, gpus", [(1, 1), (2, 8), (4, 2)])
def test_sbatch_is_valid_bash_and_its_torchrun_line_is_right(tmp_path, nodes, gpus):
    recipe = slurm_recipe(H200, ClusterOptions(nodes=nodes, gpus_per_node=gpus, command=["train.py", "--epochs", "3"]))
    script = tmp_path / "job.sbatch"
    script.write_text(recipe.text)
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = recipe.text
    assert f"#SBATCH --nodes={nodes}" in text
    assert "#SBATCH --ntasks-per-node=1" in text
    assert f"#SBATCH --gpus-per-node={gpus}" in text
    assert 'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)' in text
    argv = torchrun_argv(text)
    assert flag(argv, "--nnodes") == str(nodes)
    assert flag(argv, "--nproc-per-node") == str(gpus)
    assert flag(argv, "--rdzv-backend") == "c10d"
    assert flag(argv, "--rdzv-endpoint") == "$head_node:29500"
    assert argv[-3:] == ["train.py", "--epochs", "3"]


def fake_slurm(tmp_path: Path, hosts: list[str]) -> dict[str, str]:
    """scontrol, srun and torchrun stand-ins; srun runs its command once per node with SLURM_PROCID set."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.jsonl"
    (bin_dir / "scontrol").write_text("#!/bin/bash\nprintf '%s\\n' " + " ".join(hosts) + "\n")
    (bin_dir / "srun").write_text(
        "#!/bin/bash\n"
        'while [[ "$1" == --* ]]; do shift; done\n'
        f"for i in $(seq 0 {len(hosts) - 1}); do SLURM_PROCID=$i SLURM_NODEID=$i \"$@\" || exit $?; done\n"
    )
    recorder = (
        "#!/usr/bin/env python3\nimport json, os, sys\n"
        f"with open({str(log)!r}, 'a') as f:\n"
        "    f.write(json.dumps({'argv': sys.argv, 'TF_CONFIG': os.environ.get('TF_CONFIG'),"
        " 'OMP_NUM_THREADS': os.environ.get('OMP_NUM_THREADS')}) + '\\n')\n"
    )
    for name in ("torchrun", "record"):
        (bin_dir / name).write_text(recorder)
    for p in bin_dir.iterdir():
        p.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TF_CONFIG"))}
    env.update({
        "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        "SLURM_JOB_NODELIST": f"gpu[01-{len(hosts):02d}]",
        "SLURM_JOB_ID": "4242",
        "SLURM_CPUS_PER_TASK": "64",
    })
    return env


def calls(tmp_path: Path) -> list[dict]:
    return [json.loads(ln) for ln in (tmp_path / "calls.jsonl").read_text().splitlines()]


def test_sbatch_under_fake_slurm_starts_one_agent_per_node_at_the_first_node(tmp_path):
    recipe = slurm_recipe(H200, ClusterOptions(nodes=2, gpus_per_node=8, command=["train.py"]))
    script = tmp_path / "job.sbatch"
    script.write_text(recipe.text)
    env = fake_slurm(tmp_path, ["gpu01", "gpu02"])
    subprocess.run(["bash", str(script)], check=True, env=env, timeout=60)
    runs = calls(tmp_path)
    assert len(runs) == 2  # one torchrun agent per node
    for run in runs:
        argv = run["argv"][1:]
        assert flag(argv, "--rdzv-endpoint") == "gpu01:29500"
        assert flag(argv, "--rdzv-id") == "4242"
        assert run["OMP_NUM_THREADS"] == "8"  # 64 cores / 8 processes


def test_tf_sbatch_gives_each_node_its_tf_config(tmp_path):
    recipe = slurm_recipe(H200, ClusterOptions(nodes=3, gpus_per_node=2, framework="tf",
                                               command=["record", "--set", "tf.loop=fit"]))
    script = tmp_path / "job.sbatch"
    script.write_text(recipe.text)
    subprocess.run(["bash", "-n", str(script)], check=True)
    env = fake_slurm(tmp_path, ["n1", "n2", "n3"])
    subprocess.run(["bash", str(script)], check=True, env=env, timeout=60)
    runs = calls(tmp_path)
    assert [r["argv"][1:] for r in runs] == [["--set", "tf.loop=fit"]] * 3
    configs = [json.loads(r["TF_CONFIG"]) for r in runs]
    for index, config in enumerate(configs):
        assert config["cluster"]["worker"] == ["n1:29500", "n2:29500", "n3:29500"]
        assert config["task"] == {"type": "worker", "index": index}


@pytest.mark.parametrize("command, entry", [
    (["train.py", "-x"], ["train.py", "-x"]),
    (["python", "-u", "train.py"], ["train.py"]),
    (["python3", "-m", "pkg.train", "--a"], ["-m", "pkg.train", "--a"]),
    (["./run.sh", "a"], ["--no-python", "./run.sh", "a"]),
])
def test_torchrun_entry(command, entry):
    assert torchrun_entry(command)[0] == entry


@pytest.mark.parametrize("opts, match", [
    (ClusterOptions(nodes=0, gpus_per_node=1, command=["t.py"]), "--nodes"),
    (ClusterOptions(nodes=2, gpus_per_node=-1, command=["t.py"]), "--gpus-per-node"),
    (ClusterOptions(nodes=2, gpus_per_node=0, command=["t.py"], procs_per_node=0), "--procs-per-node"),
    (ClusterOptions(nodes=2, gpus_per_node=8, command=["t.py"], procs_per_node=2), "--procs-per-node"),
    (ClusterOptions(nodes=2, gpus_per_node=0, command=["t.py"], framework="tf"), "--gpus-per-node"),
    (ClusterOptions(nodes=2, gpus_per_node=1, command=[]), "after `--`"),
    (ClusterOptions(nodes=2, gpus_per_node=1, command=["torchrun", "t.py"]), "torchrun"),
    (ClusterOptions(nodes=2, gpus_per_node=1, command=["t.py"], framework="jax"), "--framework"),
    (ClusterOptions(nodes=2, gpus_per_node=1, command=["t.py"], job_name="My Job"), "--job-name"),
    (ClusterOptions(nodes=2, gpus_per_node=1, command=["t.py"], port=80), "--port"),
    (ClusterOptions(nodes=2, gpus_per_node=1, command=["t.py"], time="soon"), "--time"),
    (ClusterOptions(nodes=2, gpus_per_node=1, command=["t.py"], partition="gpu\nrm -rf"), "--partition"),
    (ClusterOptions(nodes=2, gpus_per_node=1, command=["t.py"], max_restarts=-1), "--max-restarts"),
])
def test_bad_options_name_the_flag(opts, match):
    with pytest.raises(BadInput, match=match):
        slurm_recipe(H200, opts)


def test_cpu_nodes_run_gloo_processes_and_ask_slurm_for_no_gpu(tmp_path):
    recipe = slurm_recipe(CPU, ClusterOptions(nodes=2, gpus_per_node=0, procs_per_node=3, command=["t.py"]))
    assert "--gpus-per-node" not in recipe.text.split("set -eu")[0]
    assert flag(torchrun_argv(recipe.text), "--nproc-per-node") == "3"
    assert "OMP_NUM_THREADS=$(( cpus / 3 > 0 ? cpus / 3 : 1 ))" in recipe.text
    train = slurm_recipe(CPU, ClusterOptions(nodes=1, gpus_per_node=0, command=["gpurig", "train"]))
    assert "--device cpu \\\n  --nproc-per-node 2" in train.text
    with pytest.raises(BadInput, match="--gpus-per-node"):
        k8s_recipe(CPU, ClusterOptions(nodes=2, gpus_per_node=0, command=["t.py"]))


def test_gpus_per_node_defaults_to_this_hosts_and_needs_a_value_without_gpus():
    recipe = slurm_recipe(H200, ClusterOptions(nodes=2, command=["t.py"]))
    assert flag(torchrun_argv(recipe.text), "--nproc-per-node") == "2"
    with pytest.raises(BadInput, match="--gpus-per-node"):
        slurm_recipe(CPU, ClusterOptions(nodes=2, command=["t.py"]))


def pytorchjob(nodes: int, gpus: int, **kw) -> dict:
    return yaml.safe_load(k8s_recipe(H200, ClusterOptions(nodes=nodes, gpus_per_node=gpus, **kw)).text)


def test_pytorchjob_has_the_fields_the_schema_requires():
    doc = pytorchjob(3, 8, command=["train.py", "--epochs", "3"], image="registry.example/train:1")
    assert doc["apiVersion"] == "kubeflow.org/v1"
    assert doc["kind"] == "PyTorchJob"
    assert doc["metadata"]["name"] == "gpurig-train"
    assert doc["spec"]["nprocPerNode"] == "8"
    specs = doc["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 2
    for role in ("Master", "Worker"):
        spec = specs[role]
        assert spec["restartPolicy"] in ("OnFailure", "Always", "Never", "ExitCode")
        pod = spec["template"]["spec"]
        (container,) = pod["containers"]
        assert container["name"] == "pytorch"
        assert container["image"] == "registry.example/train:1"
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
        assert container["securityContext"]["runAsNonRoot"] is True
        command = container["command"]
        assert command[0] == "torchrun"
        assert "--nnodes=3" in command and "--nproc-per-node=8" in command
        assert "--rdzv-backend=c10d" in command
        assert "--rdzv-endpoint=$(MASTER_ADDR):$(MASTER_PORT)" in command
        assert command[-3:] == ["train.py", "--epochs", "3"]
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["dshm"] == "/dev/shm"
        volume = next(v for v in pod["volumes"] if v["name"] == "dshm")
        assert volume["emptyDir"]["medium"] == "Memory"
        assert volume["emptyDir"]["sizeLimit"].endswith("Gi")


def test_single_node_pytorchjob_has_only_a_master():
    specs = pytorchjob(1, 2, command=["t.py"])["spec"]["pytorchReplicaSpecs"]
    assert list(specs) == ["Master"]


def test_tfjob_for_tensorflow():
    doc = yaml.safe_load(k8s_recipe(H200, ClusterOptions(nodes=2, gpus_per_node=4, framework="tf",
                                                         command=["gpurig", "train", "--framework", "tf"])).text)
    assert doc["kind"] == "TFJob"
    worker = doc["spec"]["tfReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 2
    (container,) = worker["template"]["spec"]["containers"]
    assert container["name"] == "tensorflow"
    assert container["command"] == ["gpurig", "train", "--framework", "tf"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 4


def test_arguments_with_yaml_special_characters_survive():
    odd = ["train.py", "--name", "a: b # c", "--list", "[1, 2]", "--quote", "it's \"x\""]
    doc = pytorchjob(2, 1, command=odd)
    assert doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"][-7:] == odd


def test_gpurig_launch_runs_once_per_node_with_the_multi_node_flags(tmp_path):
    recipe = slurm_recipe(H200, ClusterOptions(nodes=2, gpus_per_node=8, command=["gpurig", "launch", "train.py", "-x"]))
    script = tmp_path / "job.sbatch"
    script.write_text(recipe.text)
    subprocess.run(["bash", "-n", str(script)], check=True)
    lines = recipe.text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("srun "))
    argv = shlex.split(" ".join(ln.rstrip("\\").strip() for ln in lines[start:]))
    assert argv[argv.index("gpurig"):][:2] == ["gpurig", "launch"]
    assert flag(argv, "--nnodes") == "2" and flag(argv, "--nproc-per-node") == "8"
    assert flag(argv, "--rdzv-endpoint") == "$head_node:29500"
    assert argv[-2:] == ["train.py", "-x"]
    doc = yaml.safe_load(k8s_recipe(H200, ClusterOptions(nodes=2, gpus_per_node=8,
                                                         command=["gpurig", "launch", "train.py"])).text)
    command = doc["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["gpurig", "launch"] and "--rdzv-endpoint=$(MASTER_ADDR):$(MASTER_PORT)" in command


def test_gpurig_train_runs_on_one_node_and_is_refused_across_nodes():
    one = slurm_recipe(H200, ClusterOptions(nodes=1, gpus_per_node=2, command=["gpurig", "train", "--preset", "demo"]))
    # The requeue path: one run directory for every run of the job, resumed from its newest checkpoint.
    assert "srun --kill-on-bad-exit=1 gpurig train \\\n  --out runs/gpurig-train \\\n  --resume auto \\\n  --preset demo" in one.text
    assert "#SBATCH --requeue" in one.text
    mine = slurm_recipe(H200, ClusterOptions(nodes=1, gpus_per_node=2,
                                             command=["gpurig", "train", "--out=/shared/r1", "--resume", "auto"]))
    assert "gpurig train \\\n  --out=/shared/r1 --resume auto" in mine.text  # the user's own, not twice
    with pytest.raises(BadInput, match="single-node"):
        slurm_recipe(H200, ClusterOptions(nodes=2, gpus_per_node=2, command=["gpurig", "train"]))
    with pytest.raises(BadInput, match="--nnodes"):
        slurm_recipe(H200, ClusterOptions(nodes=2, gpus_per_node=2, command=["gpurig", "launch", "--nnodes", "3", "t.py"]))
    with pytest.raises(BadInput, match="not a training command"):
        slurm_recipe(H200, ClusterOptions(nodes=2, gpus_per_node=2, command=["gpurig", "doctor"]))
