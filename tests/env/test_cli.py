"""`gpurig env ...` through the real entry point: output, --json, --out/--force, exit codes."""

from __future__ import annotations

import json

import pytest
import yaml


def test_pip_on_this_machine_prints_a_pip_line(run_cli):
    result = run_cli("env", "pip")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1].startswith("pip install ")
    assert "Why:" in result.stderr  # reasons on stderr, so stdout stays the recipe alone


def test_pip_json_for_a_saved_rig(run_cli, facts_file):
    result = run_cli("env", "pip", "--facts", str(facts_file("h200x2_r580")), "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["recipe"].strip().endswith("--index-url https://download.pytorch.org/whl/cu130")
    assert doc["reasons"] and doc["fits"] is True
    assert doc["facts_used"]["driver_version"] == "580.95.05"
    assert doc["facts_used"]["compute_capabilities"] == ["9.0"]


def test_nothing_fits_exits_1_and_says_what_to_change(run_cli, facts_file):
    result = run_cli("env", "pip", "--facts", str(facts_file("rtx5090_r550")))
    assert result.returncode == 1
    assert "upgrade the driver to 570.26" in result.stdout


def test_dockerfile_to_stdout_is_a_dockerfile(run_cli, facts_file, tmp_path):
    result = run_cli("env", "dockerfile", "--facts", str(facts_file("h200x2_r580")), "--ssh", "--jupyter",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    from dockerfile_parse import DockerfileParser

    path = tmp_path / "Dockerfile"
    path.write_text(result.stdout)
    parser = DockerfileParser(path=str(path))
    assert parser.baseimage.startswith("pytorch/pytorch:")
    # No requirements.txt in the folder: the Dockerfile copies none and the reasons say so.
    assert "requirements" not in " ".join(i["value"] for i in parser.structure if i["instruction"] == "COPY")
    assert "no requirements file" in result.stderr


def test_dockerfile_uses_the_projects_requirements(run_cli, facts_file, tmp_path):
    (tmp_path / "requirements.txt").write_text("numpy==2.1.0\n")
    result = run_cli("env", "dockerfile", "--facts", str(facts_file("h200x2_r580")), cwd=tmp_path)
    assert "COPY requirements.txt /tmp/requirements.txt" in result.stdout
    missing = run_cli("env", "dockerfile", "--requirements", "nope.txt", cwd=tmp_path)
    assert missing.returncode == 2 and "--requirements nope.txt" in missing.stderr


def test_out_writes_and_never_replaces_without_force(run_cli, facts_file, tmp_path):
    out = tmp_path / "job.sbatch"
    args = ["env", "slurm", "--facts", str(facts_file("h200x2_r580")), "--nodes", "2", "--out", str(out),
            "--", "train.py", "--epochs", "3"]
    first = run_cli(*args)
    assert first.returncode == 0, first.stderr
    assert out.read_text().startswith("#!/bin/bash")
    assert first.stdout == ""
    out.write_text("my own edits\n")
    second = run_cli(*args)
    assert second.returncode == 2
    assert "--out" in second.stderr and "--force" in second.stderr
    assert out.read_text() == "my own edits\n"  # nothing lost
    # --force goes before `--`: everything after it is the job's command.
    third = run_cli(*args[:-4], "--force", *args[-4:])
    assert third.returncode == 0 and "--nnodes 2" in out.read_text()


def test_compose_json(run_cli, facts_file):
    result = run_cli("env", "docker-run", "--facts", str(facts_file("h200x2_r580")), "--compose", "--gpus", "1",
                     "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    service = yaml.safe_load(doc["recipe"])["services"]["gpurig"]
    assert service["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == ["1"]


def test_k8s_passes_the_command_through(run_cli, facts_file):
    result = run_cli("env", "k8s", "--facts", str(facts_file("a100x8_r570")), "--nodes", "2",
                     "--", "python", "-m", "mypkg.train", "--epochs", "3")
    assert result.returncode == 0, result.stderr
    doc = yaml.safe_load(result.stdout)
    command = doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"]
    assert "--nproc-per-node=8" in command  # the A100 rig's 8 GPUs
    assert command[-4:] == ["-m", "mypkg.train", "--epochs", "3"]


@pytest.mark.parametrize("args, named", [
    (["env", "pip", "--framework", "jax"], "--framework"),
    (["env", "pip", "--facts", "no-such-file.json"], "--facts"),
    (["env", "docker-run", "--gpus", "0,9", "--facts", "{h200}"], "--gpus"),
    (["env", "docker-run", "--ipc", "shared"], "--ipc"),
    (["env", "dockerfile", "--framework", "tf", "--torch-version", "2.9"], "--torch-version"),
    (["env", "slurm", "--gpus-per-node", "2", "--", "train.py"], "--nodes"),
    (["env", "slurm", "--nodes", "2", "--gpus-per-node", "2"], "--"),
    (["env", "slurm", "--nodes", "two", "--", "train.py"], "--nodes"),
    (["env", "k8s", "--nodes", "2", "--gpus-per-node", "1", "--batch", "0", "--", "t.py"], "--batch"),
])
def test_bad_options_exit_2_naming_them(run_cli, facts_file, args, named):
    args = [str(facts_file("h200x2_r580")) if a == "{h200}" else a for a in args]
    result = run_cli(*args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert named in result.stderr
    assert result.stdout == ""


def test_help_teaches(run_cli):
    result = run_cli("env", "slurm", "--help")
    assert result.returncode == 0
    assert "Examples:" in result.stdout and "--rdzv-endpoint" in result.stdout and "--gpus-per-node 0" in result.stdout


@pytest.mark.gpu
def test_live_gpu_host_gets_recipes_that_fit_its_driver(run_cli):
    # On a GPU machine: the facts come from NVML, and the image's CUDA must not pass what nvidia-smi says.
    import re
    import subprocess

    banner = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=60).stdout
    driver_cuda = re.search(r"CUDA Version:\s*(\d+\.\d+)", banner).group(1)
    pip = run_cli("env", "pip", "--json")
    assert pip.returncode == 0, pip.stderr
    doc = json.loads(pip.stdout)
    assert doc["fits"] and "--index-url https://download.pytorch.org/whl/cu" in doc["recipe"]
    variant = re.search(r"whl/cu(\d+)(\d)\b", doc["recipe"])
    # A wheel may lean on minor-version compatibility (cu128 on a 12.2 driver), never on a newer major.
    assert int(variant.group(1)) <= int(driver_cuda.split(".")[0])
    dockerfile = run_cli("env", "dockerfile", "--json")
    assert dockerfile.returncode == 0, dockerfile.stderr
    image = re.search(r"^FROM (\S+)", json.loads(dockerfile.stdout)["recipe"], re.M).group(1)
    image_cuda = re.search(r"-cuda(\d+)\.(\d+)-", image)
    assert (int(image_cuda.group(1)), int(image_cuda.group(2))) <= tuple(int(x) for x in driver_cuda.split("."))


@pytest.mark.parametrize("command", [["env", "pip"], ["env", "dockerfile"]])
@pytest.mark.parametrize("value", ["banana", "", "2.x", "2.11.0+cu130", "9.99"])
def test_a_torch_version_the_tables_do_not_know_exits_2_listing_the_known_ones(run_cli, facts_file, tmp_path,
                                                                               command, value):
    result = run_cli(*command, "--facts", str(facts_file("h200x2_r580")), "--torch-version", value, cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert f"--torch-version {value!r}" in result.stderr
    assert "2.10, 2.11" in result.stderr  # the releases it knows
    assert "Traceback" not in result.stderr and result.stdout == ""


@pytest.mark.parametrize("value", ["2.9", "2.9.0", "2.9.1", "2.9.*"])
def test_a_known_torch_release_in_any_pip_spelling_pins_that_release_line(run_cli, facts_file, value):
    result = run_cli("env", "pip", "--facts", str(facts_file("h200x2_r580")), "--torch-version", value)
    assert result.returncode == 0, result.stderr
    assert "pip install 'torch==2.9.*'" in result.stdout


def test_dockerfile_names_the_first_release_with_an_official_image(run_cli, facts_file, tmp_path):
    result = run_cli("env", "dockerfile", "--facts", str(facts_file("h200x2_r580")), "--torch-version", "1.13",
                     cwd=tmp_path)
    assert result.returncode == 2
    assert "--torch-version '1.13' has no official PyTorch image: they start at 2.0" in result.stderr



@pytest.mark.parametrize("make", ["missing", "file"])
def test_docker_run_data_must_be_a_folder_of_this_host(run_cli, tmp_path, make):
    data = tmp_path / "datasets"
    if make == "file":
        data.write_text("not a folder\n")
    for extra in ([], ["--compose"]):
        result = run_cli("env", "docker-run", "--data", str(data), *extra)
        assert result.returncode == 2, (result.stdout, result.stderr)
        assert f"--data {data}" in result.stderr and result.stdout == ""
        assert ("no such folder" if make == "missing" else "is a file, not a folder") in result.stderr


def test_docker_run_data_of_an_existing_folder_is_mounted(run_cli, tmp_path):
    (tmp_path / "datasets").mkdir()
    result = run_cli("env", "docker-run", "--data", "datasets", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert '-v "$PWD"/datasets:/data:ro' in result.stdout


def test_docker_run_data_of_another_machine_is_not_checked_here(run_cli, facts_file, tmp_path):
    # --facts builds for the machine that saved FILE: the folder is that machine's.
    result = run_cli("env", "docker-run", "--facts", str(facts_file("h200x2_r580")), "--data", str(tmp_path / "nope"))
    assert result.returncode == 0, result.stderr
    assert f"-v {tmp_path / 'nope'}:/data:ro" in result.stdout


def test_docker_run_ssh_warns_when_authorized_keys_is_missing(run_cli, tmp_path):
    result = run_cli("env", "docker-run", "--ssh", env={"HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert "~/.ssh/authorized_keys, which does not exist on this host" in result.stderr
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "authorized_keys").write_text("ssh-ed25519 AAAA user@laptop\n")
    again = run_cli("env", "docker-run", "--ssh", env={"HOME": str(tmp_path)})
    assert again.returncode == 0 and "authorized_keys, which does not exist" not in again.stderr


def test_out_follows_the_one_rule_for_output_files(run_cli, facts_file, tmp_path):
    facts = str(facts_file("h200x2_r580"))
    (tmp_path / "afile").write_text("x\n")
    under_a_file = run_cli("env", "pip", "--facts", facts, "--out", str(tmp_path / "afile" / "pip.txt"))
    assert under_a_file.returncode == 2
    assert f"--out {tmp_path / 'afile' / 'pip.txt'}: {tmp_path / 'afile'} is a file, not a folder" in under_a_file.stderr
    missing = run_cli("env", "pip", "--facts", facts, "--out", str(tmp_path / "no" / "pip.txt"))
    assert missing.returncode == 2 and "the folder" in missing.stderr and "does not exist" in missing.stderr
    assert not (tmp_path / "no").exists()  # never created


def test_an_existing_out_is_refused_even_when_nothing_fits(run_cli, facts_file, tmp_path):
    # Bad usage comes first: the file is not replaced, and the answer does not depend on the host.
    out = tmp_path / "pip.txt"
    out.write_text("mine\n")
    result = run_cli("env", "pip", "--facts", str(facts_file("rtx5090_r550")), "--out", str(out))
    assert result.returncode == 2 and "--out" in result.stderr and "--force" in result.stderr
    assert out.read_text() == "mine\n"


@pytest.mark.parametrize("command, mode", [
    (["docker-run"], 0o755),
    (["slurm", "--nodes", "2", "--out", "{out}", "--", "train.py"], 0o755),
    (["dockerfile"], 0o644),
])
def test_written_scripts_are_executable_and_other_recipes_are_not(run_cli, facts_file, tmp_path, command, mode):
    out = tmp_path / "recipe"
    args = [str(out) if a == "{out}" else a for a in command]
    if "--out" not in args:
        args += ["--out", str(out)]
    result = run_cli("env", args[0], "--facts", str(facts_file("h200x2_r580")), *args[1:], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert out.stat().st_mode & 0o777 == mode
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left
