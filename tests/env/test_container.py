"""docker run lines and compose files: the flags a multi-GPU container needs, ports on 127.0.0.1."""

from __future__ import annotations

import shlex
import subprocess

import pytest
import yaml
from env_rigs import CRAFTED

from gpurig.errors import BadInput
from gpurig.recipes.base import HostSummary
from gpurig.recipes.container import ContainerOptions, compose_recipe, docker_run_recipe

H200 = HostSummary.from_facts(CRAFTED["h200x2_r580"])
CPU = HostSummary.from_facts(CRAFTED["laptop_cpu"])


def docker_argv(text: str) -> list[str]:
    """The `docker run ...` command as the shell would split it (continuations joined)."""
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    command = " ".join(ln.rstrip("\\").strip() for ln in lines if ln.strip())
    argv = shlex.split(command)
    assert argv[:2] == ["docker", "run"]
    return argv


def test_all_gpus_and_the_memory_flags():
    recipe = docker_run_recipe(H200, ContainerOptions())
    argv = docker_argv(recipe.text)
    assert argv[argv.index("--gpus") + 1] == "all"
    assert "--ipc=host" in argv
    assert "memlock=-1" in argv and "stack=67108864" in argv
    assert "--init" in argv
    assert argv[-1] == "gpurig-train"


def test_a_users_share_of_gpus_keeps_docker_quoting():
    argv = docker_argv(docker_run_recipe(H200, ContainerOptions(gpus="0,1")).text)
    # What docker receives must be "device=0,1" with the double quotes (else the comma splits it).
    assert argv[argv.index("--gpus") + 1] == '"device=0,1"'


def test_script_is_valid_bash(tmp_path):
    recipe = docker_run_recipe(H200, ContainerOptions(jupyter=True, ssh=True, data="/srv/my data"))
    script = tmp_path / "run.sh"
    script.write_text(recipe.text)
    subprocess.run(["bash", "-n", str(script)], check=True)
    argv = docker_argv(recipe.text)
    assert "/srv/my data:/data:ro" in argv


def test_ports_are_bound_to_localhost_unless_public():
    argv = docker_argv(docker_run_recipe(H200, ContainerOptions(jupyter=True, ssh=True, tensorboard=True)).text)
    published = [argv[i + 1] for i, a in enumerate(argv) if a == "-p"]
    assert sorted(published) == ["127.0.0.1:2222:2222", "127.0.0.1:6006:6006", "127.0.0.1:8888:8888"]
    public = docker_run_recipe(H200, ContainerOptions(jupyter=True, public=True))
    argv = docker_argv(public.text)
    assert argv[argv.index("-p") + 1] == "0.0.0.0:8888:8888"
    assert "JUPYTER_PASSWORD_HASH" in argv
    assert public.warnings and "every network interface" in public.warnings[0]


def test_private_ipc_sizes_shm_from_workers_and_batch():
    opts = ContainerOptions(ipc="private", workers=8, batch=128, sample_mb=0.6)
    recipe = docker_run_recipe(H200, opts)
    argv = docker_argv(recipe.text)
    # 2 GPUs x 8 workers x 2 prefetched batches x 128 samples x 0.6 MB = 2.46 GB; doubled = 4.9 GB -> 5 GiB
    assert "--shm-size=5g" in argv and "--ipc=host" not in argv
    assert "2.46 GB" in recipe.text


def test_every_flag_has_a_reason_in_the_header():
    recipe = docker_run_recipe(H200, ContainerOptions(jupyter=True, ssh=True))
    header = "\n".join(ln for ln in recipe.text.splitlines() if ln.startswith("#   "))
    body = [ln.strip().rstrip(" \\") for ln in recipe.text.splitlines()[1:]
            if ln.startswith("  ") and not ln.startswith("#")]
    for flag in body[:-1]:  # the last line is the image
        assert flag in header, f"{flag!r} has no reason"


def test_cpu_host_gets_no_gpus_flag():
    argv = docker_argv(docker_run_recipe(CPU, ContainerOptions()).text)
    assert "--gpus" not in argv
    with pytest.raises(BadInput, match="--gpus"):
        docker_run_recipe(CPU, ContainerOptions(gpus="0"))


@pytest.mark.parametrize("opts, flag", [
    (ContainerOptions(gpus="2"), "--gpus"),  # the H200 rig has GPUs 0 and 1
    (ContainerOptions(gpus="0,0"), "--gpus"),
    (ContainerOptions(gpus="zero"), "--gpus"),
    (ContainerOptions(ipc="shared"), "--ipc"),
    (ContainerOptions(batch=0), "--batch"),
    (ContainerOptions(workers=-1), "--workers"),
    (ContainerOptions(sample_mb=0), "--sample-mb"),
    (ContainerOptions(image="my image"), "--image"),
    (ContainerOptions(name="my box"), "--name"),
    (ContainerOptions(data="/a:b"), "--data"),
])
def test_bad_options_name_the_flag(opts, flag):
    with pytest.raises(BadInput, match=flag):
        docker_run_recipe(H200, opts)


def compose(opts: ContainerOptions, host=H200) -> dict:
    return yaml.safe_load(compose_recipe(host, opts).text)


def test_compose_has_the_same_choices():
    doc = compose(ContainerOptions(gpus="0,1", jupyter=True, data="/srv/data"))
    service = doc["services"]["gpurig"]
    devices = service["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "device_ids": ["0", "1"], "capabilities": ["gpu"]}]
    assert service["ipc"] == "host"
    assert service["init"] is True
    assert service["ulimits"] == {"memlock": -1, "stack": 67108864}
    assert service["ports"] == ["127.0.0.1:8888:8888"]
    assert "/srv/data:/data:ro" in service["volumes"]
    assert "JUPYTER_TOKEN" in service["environment"]


def test_compose_all_gpus_and_private_ipc():
    service = compose(ContainerOptions(ipc="private"))["services"]["gpurig"]
    assert service["deploy"]["resources"]["reservations"]["devices"][0]["count"] == "all"
    assert "ipc" not in service
    assert service["shm_size"] == "5gb"


def test_compose_on_a_cpu_host_reserves_no_gpu():
    service = compose(ContainerOptions(), host=CPU)["services"]["gpurig"]
    assert "deploy" not in service


@pytest.mark.parametrize("data, expected", [
    ("/srv/my data", "/srv/my data:/data:ro"),
    ("~/my data", "HOME/my data:/data:ro"),
    ("./data", "CWD/data:/data:ro"),
])
def test_data_paths_become_absolute_bind_mounts(tmp_path, data, expected):
    # bash expands the line exactly as a user's shell would; `printf` shows the words it produced.
    argv_line = docker_run_recipe(H200, ContainerOptions(data=data)).text.split("docker run \\\n", 1)[1]
    mount = next(ln.strip().rstrip(" \\") for ln in argv_line.splitlines() if ":/data:ro" in ln)
    out = subprocess.run(["bash", "-c", f"printf '%s\\n' {mount}"], capture_output=True, text=True, check=True,
                         cwd=tmp_path, env={"HOME": "/home/u", "PATH": "/usr/bin:/bin"}).stdout.splitlines()
    want = expected.replace("HOME", "/home/u").replace("CWD", str(tmp_path))
    assert out[-1] == want
