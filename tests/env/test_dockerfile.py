"""Generated Dockerfiles, read back with a real Dockerfile parser (dockerfile-parse) and checked."""

from __future__ import annotations

import io
import json
import re

import pytest
from env_rigs import CRAFTED, recorded_rigs

from gpurig.knowledge import frameworks as kfw
from gpurig.knowledge import loaders as L
from gpurig.recipes.base import HostSummary
from gpurig.recipes.dockerfile import DockerfileOptions, dockerfile_recipe
from gpurig.recipes.images import host_max_cuda

dockerfile_parse = pytest.importorskip("dockerfile_parse")

ALL_ON = DockerfileOptions(jupyter=True, ssh=True, tensorboard=True)


def parse(text: str):
    parser = dockerfile_parse.DockerfileParser(fileobj=io.BytesIO(text.encode()))
    return parser


def instructions(parser, name: str) -> list[str]:
    return [i["value"] for i in parser.structure if i["instruction"] == name]


def image_cuda(image: str) -> str | None:
    m = re.search(r"-cuda(\d+\.\d+)-", image)
    if m:
        return m.group(1)
    m = re.fullmatch(r"tensorflow/tensorflow:(\d+\.\d+)\.\d+-gpu", image)
    if m:
        return kfw.tf_build(m.group(1)).cuda
    return None


def check_safe(text: str, opts: DockerfileOptions) -> None:
    """The checks every generated Dockerfile must pass."""
    parser = parse(text)
    assert parser.baseimage, "no FROM"
    users = instructions(parser, "USER")
    assert users, "no USER: the container would run as root"
    last_user = parser.args.get("USERNAME") if users[-1] == "${USERNAME}" else users[-1]
    assert last_user not in ("root", "0", "0:0"), "the last USER is root"
    lowered = text.lower()
    assert "chpasswd" not in lowered and "passwordauthentication yes" not in lowered
    assert "permitrootlogin yes" not in lowered and "--allow-root" not in lowered
    # Every block of instructions opens with a comment saying why it is there.
    for block in text.split("\n\n"):
        lines = [ln for ln in block.splitlines() if ln.strip()]
        if any(not ln.startswith("#") for ln in lines):
            assert lines[0].startswith("#"), f"no comment above {lines[0]!r}"
    cmd = json.loads(instructions(parser, "CMD")[-1])
    script = " ".join(cmd)
    if opts.ssh:
        run = " ".join(instructions(parser, "RUN"))
        assert "'PasswordAuthentication no'" in run
        assert "'PermitRootLogin no'" in run
        assert "'KbdInteractiveAuthentication no'" in run
        assert "sshd" in script
        assert "2222" in " ".join(instructions(parser, "EXPOSE"))
    if opts.jupyter:
        assert "jupyter lab" in script
        # A token is always required: nothing may switch it off.
        assert not re.search(r"token=(''|\"\"|\s|$)", script)
        if opts.public:
            assert "hashed_password" in script and "JUPYTER_PASSWORD_HASH:?" in script


@pytest.mark.parametrize("rig", ["h200x2_r580", "a100x8_r570", "v100x4_r535"])
@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_base_image_cuda_fits_the_driver(rig, framework):
    host = HostSummary.from_facts(CRAFTED[rig])
    opts = DockerfileOptions(framework=framework, jupyter=True, ssh=True, tensorboard=True)
    recipe = dockerfile_recipe(host, opts)
    assert recipe.fits
    parser = parse(recipe.text)
    cuda = image_cuda(parser.baseimage)
    assert cuda is not None, parser.baseimage
    assert L.version_key(cuda) <= L.version_key(host_max_cuda(host))
    check_safe(recipe.text, opts)


def test_h200_gets_the_newest_pytorch_image_with_cuda_13():
    recipe = dockerfile_recipe(HostSummary.from_facts(CRAFTED["h200x2_r580"]), DockerfileOptions())
    assert parse(recipe.text).baseimage == "pytorch/pytorch:2.14.0-cuda13.0-cudnn9-runtime"


def test_a100_on_r570_stays_below_cuda_13():
    # Driver 570.124 runs CUDA 12.8 at most: cu130 images are out; 2.12 (which dropped cu128) has cu126.
    recipe = dockerfile_recipe(HostSummary.from_facts(CRAFTED["a100x8_r570"]), DockerfileOptions())
    assert parse(recipe.text).baseimage == "pytorch/pytorch:2.12.0-cuda12.6-cudnn9-runtime"


def test_t4_on_r470_torch_image_does_not_fit_and_says_which_driver():
    recipe = dockerfile_recipe(HostSummary.from_facts(CRAFTED["t4_r470"]), DockerfileOptions())
    assert not recipe.fits
    assert "FROM" not in recipe.text
    # The lowest driver that runs an official image: CUDA 11.7 (torch 2.0) needs 515.43.04.
    assert "upgrade the driver to 515.43.04" in recipe.text


def test_t4_on_r470_tensorflow_image_is_an_older_release():
    recipe = dockerfile_recipe(HostSummary.from_facts(CRAFTED["t4_r470"]), DockerfileOptions(framework="tf"))
    base = parse(recipe.text).baseimage
    assert base == "tensorflow/tensorflow:2.11.0-gpu"  # CUDA 11.2 <= 11.4
    check_safe(recipe.text, DockerfileOptions(framework="tf"))


def test_blackwell_on_an_old_driver_has_no_image():
    recipe = dockerfile_recipe(HostSummary.from_facts(CRAFTED["rtx5090_r550"]), DockerfileOptions(framework="tf"))
    assert not recipe.fits
    assert "570.26" in recipe.text


def test_cpu_host_gets_python_image_with_cpu_wheel():
    opts = DockerfileOptions(ssh=True)
    recipe = dockerfile_recipe(HostSummary.from_facts(CRAFTED["laptop_cpu"]), opts)
    parser = parse(recipe.text)
    assert parser.baseimage == "python:3.11-slim"
    assert any("download.pytorch.org/whl/cpu" in r for r in instructions(parser, "RUN"))
    check_safe(recipe.text, opts)


@pytest.mark.parametrize("opts", [
    DockerfileOptions(),
    DockerfileOptions(jupyter=True),
    DockerfileOptions(ssh=True),
    DockerfileOptions(tensorboard=True),
    ALL_ON,
    DockerfileOptions(jupyter=True, public=True),
    DockerfileOptions(framework="tf", jupyter=True, ssh=True),
])
def test_every_combination_is_safe(opts):
    recipe = dockerfile_recipe(HostSummary.from_facts(CRAFTED["h200x2_r580"]), opts)
    check_safe(recipe.text, opts)


def test_public_jupyter_warns_and_requires_a_password_hash():
    opts = DockerfileOptions(jupyter=True, public=True)
    recipe = dockerfile_recipe(HostSummary.from_facts(CRAFTED["h200x2_r580"]), opts)
    assert recipe.warnings and "--public" in recipe.warnings[0]
    assert "JUPYTER_PASSWORD_HASH" in json.loads(instructions(parse(recipe.text), "CMD")[-1])[-1]


def test_framework_is_pinned_and_requirements_installed():
    recipe = dockerfile_recipe(HostSummary.from_facts(CRAFTED["h200x2_r580"]), DockerfileOptions())
    parser = parse(recipe.text)
    assert parser.envs["PIP_CONSTRAINT"] == "/etc/pip-constraints.txt"
    assert any("pip-constraints.txt" in r and "('torch',)" in r for r in instructions(parser, "RUN"))
    assert "requirements.txt /tmp/requirements.txt" in instructions(parser, "COPY")
    # The user switch comes after every root-only step (apt, useradd, pip installs).
    names = [i["instruction"] for i in parser.structure]
    assert names.index("USER") > max(i for i, n in enumerate(names) if n == "COPY")


UNSAFE = """# a tutorial-style recipe
FROM tensorflow/tensorflow:2.9.0-gpu-jupyter
# ssh
RUN echo 'root:secret' | chpasswd && sed -i 's/#PermitRootLogin prohibit-password/PermitRootLogin yes/' /etc/ssh/sshd_config
# run
CMD ["jupyter", "notebook", "--ip=0.0.0.0", "--allow-root"]
"""


def test_the_checks_reject_a_tutorial_style_recipe():
    with pytest.raises(AssertionError):
        check_safe(UNSAFE, DockerfileOptions(ssh=True, jupyter=True))
    root_user = UNSAFE.replace("# run\n", "# run\nUSER root\n")
    with pytest.raises(AssertionError, match="root"):
        check_safe(root_user, DockerfileOptions())


def test_no_requirements_file_is_said():
    recipe = dockerfile_recipe(HostSummary.from_facts(CRAFTED["h200x2_r580"]), DockerfileOptions(requirements=None))
    assert "requirements" not in " ".join(instructions(parse(recipe.text), "COPY"))
    assert any("no requirements file" in r for r in recipe.reasons)


def test_jupyter_and_tensorboard_pins_are_build_args():
    recipe = dockerfile_recipe(HostSummary.from_facts(CRAFTED["h200x2_r580"]), ALL_ON)
    args = parse(recipe.text).args
    assert re.fullmatch(r"\d+\.\d+\.\d+", args["JUPYTERLAB_VERSION"])
    assert re.fullmatch(r"\d+\.\d+\.\d+", args["TENSORBOARD_VERSION"])


RECORDED = recorded_rigs()


@pytest.mark.skipif(not RECORDED, reason="no recorded rig fixtures yet")
@pytest.mark.parametrize("name", sorted(RECORDED))
@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_recorded_rig_image_fits_its_driver(name, framework):
    host = HostSummary.from_facts(RECORDED[name])
    opts = DockerfileOptions(framework=framework, jupyter=True, ssh=True)
    recipe = dockerfile_recipe(host, opts)
    if not recipe.fits:
        assert any(w in recipe.text for w in ("upgrade the driver", "no official", "driver is not loaded"))
        return
    check_safe(recipe.text, opts)
    cuda = image_cuda(parse(recipe.text).baseimage)
    max_cuda = host_max_cuda(host)
    if cuda and max_cuda:
        assert L.version_key(cuda) <= L.version_key(max_cuda)


def test_unknown_driver_is_said_not_hidden():
    from env_rigs import make_facts

    host = HostSummary.from_facts(make_facts([("NVIDIA H100 80GB HBM3", "9.0")], None))
    recipe = dockerfile_recipe(host, DockerfileOptions())
    assert recipe.fits
    assert any("driver is unknown" in r for r in recipe.reasons)


def test_the_pin_line_really_pins_the_installed_framework(tmp_path):
    # Run the Dockerfile's own RUN line with this environment's python3: it must name torch's version.
    import importlib.metadata
    import os
    import subprocess
    import sys

    recipe = dockerfile_recipe(HostSummary.from_facts(CRAFTED["h200x2_r580"]), DockerfileOptions())
    run = next(r for r in instructions(parse(recipe.text), "RUN") if "/etc/pip-constraints.txt" in r)
    script = run.replace("/etc/pip-constraints.txt", str(tmp_path / "constraints.txt"))
    env = {"PATH": os.path.dirname(sys.executable) + os.pathsep + "/usr/bin:/bin"}
    subprocess.run(["bash", "-c", script], check=True, env=env, timeout=60)
    assert (tmp_path / "constraints.txt").read_text().split() == [f"torch=={importlib.metadata.version('torch')}"]


@pytest.mark.parametrize("uid, gid, ok", [("1000", "1000", True), ("0", "1000", False), ("1000", "0", False)])
def test_the_user_can_never_be_root(uid, gid, ok):
    """`--build-arg USER_UID=$(id -u)` typed as root would give uid 0: the build stops with the reason."""
    import subprocess

    recipe = dockerfile_recipe(HostSummary.from_facts(CRAFTED["h200x2_r580"]), ALL_ON)
    guard = [r for r in instructions(parse(recipe.text), "RUN") if '"${USER_UID}" = 0' in r]
    assert len(guard) == 1
    r = subprocess.run(["sh", "-c", guard[0]], env={"USER_UID": uid, "USER_GID": gid, "PATH": "/usr/bin:/bin"},
                       capture_output=True, text=True)
    assert (r.returncode == 0) == ok
    if not ok:
        assert "root" in r.stderr
