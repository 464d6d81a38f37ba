"""A Dockerfile for training on this host: official base image, non-root user, pinned versions.

Safe by construction, unlike the usual tutorial recipe (root password, `PermitRootLogin yes`,
Jupyter on 0.0.0.0 with `--allow-root`): SSH takes keys only and runs as the non-root user,
Jupyter always asks for a token (and a password hash with `--public`), and the ports are
published on 127.0.0.1 by the `docker run` line gpurig writes.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from gpurig.recipes.base import (
    DEFAULT_IMAGE,
    JUPYTER_PORT,
    SSH_PORT,
    TENSORBOARD_PORT,
    USER_HOME,
    USER_UID,
    USERNAME,
    WORKDIR,
    HostSummary,
    Recipe,
)
from gpurig.recipes.images import BaseImage, tf_image, torch_image

# Tool versions pinned in the image (PyPI, 2026-11-29); override with --build-arg at build time.
JUPYTERLAB_VERSION = "4.6.6"
TENSORBOARD_VERSION = "2.21.0"
SSHD_DIR = f"{USER_HOME}/.ssh/sshd"


@dataclass
class DockerfileOptions:
    framework: str = "torch"
    framework_version: str | None = None  # "2.11"; None: the newest that fits
    jupyter: bool = False
    ssh: bool = False
    tensorboard: bool = False
    public: bool = False
    requirements: str | None = "requirements.txt"  # relative to the build context; None: none found
    python: str | None = None  # CPU hosts: the Python of the python:* base image


def _base(host: HostSummary, opts: DockerfileOptions) -> BaseImage:
    if opts.framework == "tf":
        return tf_image(host, opts.framework_version)
    return torch_image(host, opts.framework_version, opts.python)


def _dists(base: BaseImage) -> tuple[str, ...]:
    """The distribution names the image's framework may be installed under."""
    return ("tensorflow", "tensorflow-cpu") if base.framework == "tf" else ("torch",)


def _cmd(opts: DockerfileOptions) -> tuple[list[str], str]:
    """The container's start command, and why."""
    steps: list[str] = []
    foreground: str | None = None
    sshd = f"/usr/sbin/sshd -f {SSHD_DIR}/sshd_config"
    if opts.ssh:
        # Host keys are made at first start, so two containers from this image never share one.
        steps.append(f"[ -f {SSHD_DIR}/ssh_host_ed25519_key ] || ssh-keygen -q -t ed25519 -N '' "
                     f"-f {SSHD_DIR}/ssh_host_ed25519_key")
    if opts.jupyter:
        jupyter = (f"jupyter lab --no-browser --ServerApp.ip=0.0.0.0 --ServerApp.port={JUPYTER_PORT} "
                   f"--ServerApp.root_dir={WORKDIR}")
        if opts.public:
            jupyter += (' --PasswordIdentityProvider.hashed_password="${JUPYTER_PASSWORD_HASH:?'
                        'set JUPYTER_PASSWORD_HASH (python -c \'from jupyter_server.auth import passwd; print(passwd())\')}"')
        foreground = jupyter
    tensorboard = f"tensorboard --logdir {WORKDIR}/runs --host 0.0.0.0 --port {TENSORBOARD_PORT}"
    if opts.tensorboard:
        if foreground:
            steps.append(tensorboard + " &")
        else:
            foreground = tensorboard
    if opts.ssh:
        if foreground:
            steps.append(sshd)
        else:
            foreground = sshd + " -D -e"
    if foreground is None:
        return ["bash"], "an interactive shell; run training with `gpurig train` or `torchrun` inside"
    script = "; ".join(["set -e", *steps, "exec " + foreground]).replace("&;", "&")
    services = [s for s, on in (("Jupyter", opts.jupyter), ("TensorBoard", opts.tensorboard), ("SSH", opts.ssh)) if on]
    return ["bash", "-c", script], f"starts {', '.join(services)}; `exec` " \
                                   "hands the shell's place to the last one, so docker stop's SIGTERM reaches it"


def dockerfile_recipe(host: HostSummary, opts: DockerfileOptions) -> Recipe:
    """The Dockerfile, one comment above each instruction saying why it is there."""
    missing = host.driver_missing_advice()
    if missing:
        text = f"# {host.describe()}\n# No base image can be chosen yet. What to change:\n#  - {missing}\n"
        return Recipe(kind="dockerfile", text=text, reasons=[missing], facts_used=host.to_dict(), fits=False)
    base = _base(host, opts)
    facts_used = host.to_dict() | {"base_image": base.image or None, "image_cuda": base.cuda}
    if not base.fits:
        text = (f"# {host.describe()}\n# No official base image fits this host. What to change:\n"
                + "".join(f"#  - {a}\n" for a in base.advice))
        return Recipe(kind="dockerfile", text=text, reasons=base.reasons + base.advice,
                      facts_used=facts_used, fits=False)
    reasons = list(base.reasons)
    warnings: list[str] = []
    d: list[str] = [
        f"# Dockerfile for {host.describe()}; made by `gpurig env dockerfile`.",
        f"# Build: docker build -t {DEFAULT_IMAGE} --build-arg USER_UID=$(id -u) --build-arg USER_GID=$(id -g) .",
        f"#   (as root on the host, leave both --build-arg out: the user then gets uid {USER_UID}, never 0)",
        "# Run:   the line from `gpurig env docker-run` (GPUs, shared memory, ports on 127.0.0.1).",
        "# " + "; ".join(base.reasons) + ".",
        f"FROM {base.image}",
        "",
        "# The non-root user everything runs as; pass your own uid and gid so files written to mounted",
        "# folders stay yours.",
        f"ARG USERNAME={USERNAME}",
        f"ARG USER_UID={USER_UID}",
        f"ARG USER_GID={USER_UID}",
        "",
        "# No questions from apt during the build; Python output reaches the logs at once; no pip cache",
        "# left in the image.",
        "ENV DEBIAN_FRONTEND=noninteractive PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1",
    ]
    if base.install:
        d += ["", f"# {base.framework_version} CPU wheel: the host has no NVIDIA GPU.", f"RUN {base.install}"]
    d += [
        "",
        f"# Keep the image's {base.pip_package}: a requirements file that names it cannot swap in a build",
        "# for another CUDA (every later pip install reads this constraint).",
        "RUN python3 -c \"import importlib.metadata as m; print('\\n'.join(d.metadata['Name'] + '==' + d.version "
        f"for d in m.distributions() if d.metadata['Name'].lower() in {_dists(base)!r}))\" > /etc/pip-constraints.txt",
        "ENV PIP_CONSTRAINT=/etc/pip-constraints.txt",
    ]
    if opts.ssh:
        d += [
            "",
            "# OpenSSH server, for long jobs over SSH (tmux, VS Code Remote-SSH); apt lists removed to keep the",
            "# image small.",
            "RUN apt-get update && apt-get install -y --no-install-recommends openssh-server "
            "&& rm -rf /var/lib/apt/lists/*",
        ]
    d += [
        "",
        "# The user must not be root: a uid or gid of 0 stops the build here with the reason.",
        'RUN if [ "${USER_UID}" = 0 ] || [ "${USER_GID}" = 0 ]; then '
        f'echo "USER_UID/USER_GID 0 is root; build without them (default {USER_UID}) or with your own non-root ids" >&2; '
        'exit 1; fi',
        "# Create the user. A uid already taken (Ubuntu images ship a user with uid 1000) is given to ours.",
        "# The password field is '*': no password can ever match, yet the account is not 'locked', which",
        "# would also refuse key logins.",
        'RUN if getent passwd "${USER_UID}" >/dev/null; then userdel --remove "$(getent passwd "${USER_UID}" | cut -d: -f1)"; fi '
        '&& if ! getent group "${USER_GID}" >/dev/null; then groupadd --gid "${USER_GID}" "${USERNAME}"; fi '
        '&& useradd --uid "${USER_UID}" --gid "${USER_GID}" --create-home --shell /bin/bash "${USERNAME}" '
        '&& usermod -p \'*\' "${USERNAME}"',
    ]
    tools = []
    if opts.jupyter:
        d += ["", "# JupyterLab, pinned (change with --build-arg JUPYTERLAB_VERSION=...).",
              f"ARG JUPYTERLAB_VERSION={JUPYTERLAB_VERSION}"]
        tools.append('"jupyterlab==${JUPYTERLAB_VERSION}"')
    if opts.tensorboard and opts.framework == "torch":
        d += ["", "# TensorBoard, pinned (the TensorFlow image already has the one matching it).",
              f"ARG TENSORBOARD_VERSION={TENSORBOARD_VERSION}"]
        tools.append('"tensorboard==${TENSORBOARD_VERSION}"')
    if tools:
        d += ["# Install the tools above.", "RUN python3 -m pip install " + " ".join(tools)]
    if opts.requirements:
        req = opts.requirements
        d += [
            "",
            "# The project's own requirements, installed before the code is copied so that editing code does",
            "# not reinstall them.",
            f"COPY {req} /tmp/requirements.txt",
            "RUN python3 -m pip install -r /tmp/requirements.txt",
        ]
        reasons.append(f"installs the project's {req} (pinned there), with the framework held at the image's build")
    else:
        reasons.append("no requirements file was found: add requirements.txt with pinned versions and run this again")
    d += [
        "",
        "# The project, owned by the user (a .dockerignore that leaves out data, runs/ and .git keeps it small).",
        f"WORKDIR {WORKDIR}",
        f'COPY --chown=${{USER_UID}}:${{USER_GID}} . {WORKDIR}',
        f'RUN mkdir -p {WORKDIR}/runs && chown "${{USER_UID}}:${{USER_GID}}" {WORKDIR} {WORKDIR}/runs',
        "",
        "# From here on nothing runs as root.",
        "USER ${USERNAME}",
    ]
    if opts.ssh:
        config = [
            f"Port {SSH_PORT}",
            f"HostKey {SSHD_DIR}/ssh_host_ed25519_key",
            f"PidFile {SSHD_DIR}/sshd.pid",
            "PubkeyAuthentication yes",
            "AuthorizedKeysFile .ssh/authorized_keys",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitEmptyPasswords no",
            "PermitRootLogin no",
            f"AllowUsers {USERNAME}",
            "UsePAM no",
        ]
        d += [
            "",
            "# The public keys allowed in: give one at build time (--build-arg SSH_PUBLIC_KEY=\"$(cat ~/.ssh/id_ed25519.pub)\")",
            "# or mount your authorized_keys at run time (the docker-run line does).",
            'ARG SSH_PUBLIC_KEY=""',
            "# sshd runs as this user on port 2222 with its own config: keys only, no passwords, no root login.",
            f"RUN mkdir -p -m 700 {USER_HOME}/.ssh {SSHD_DIR} "
            f"&& printf '%s\\n' {' '.join(shlex.quote(c) for c in config)} > {SSHD_DIR}/sshd_config "
            f'&& if [ -n "$SSH_PUBLIC_KEY" ]; then echo "$SSH_PUBLIC_KEY" >> {USER_HOME}/.ssh/authorized_keys '
            f"&& chmod 600 {USER_HOME}/.ssh/authorized_keys; fi",
        ]
        reasons.append(f"SSH: keys only (PasswordAuthentication no, PermitRootLogin no), sshd runs as {USERNAME} "
                       f"on port {SSH_PORT}")
    if opts.jupyter:
        if opts.public:
            reasons.append("Jupyter with --public: it refuses to start without JUPYTER_PASSWORD_HASH, and keeps its token")
            warnings.append("--public: Jupyter will be reachable from other machines; it asks for a token and a "
                            "password, but put it behind TLS (a reverse proxy) or use an SSH tunnel instead")
        else:
            reasons.append("Jupyter asks for a token (random, printed in `docker logs`, or yours from JUPYTER_TOKEN); "
                           "it listens on the container's own network and the docker-run line publishes it on "
                           "127.0.0.1 only")
    ports = [p for p, on in ((JUPYTER_PORT, opts.jupyter), (TENSORBOARD_PORT, opts.tensorboard),
                             (SSH_PORT, opts.ssh)) if on]
    if ports:
        d += ["", "# The ports the services listen on (documentation; `docker run -p 127.0.0.1:...` publishes them).",
              "EXPOSE " + " ".join(str(p) for p in ports)]
    cmd, why = _cmd(opts)
    d += ["", f"# {why[0].upper()}{why[1:]}.", "CMD " + json.dumps(cmd)]
    return Recipe(kind="dockerfile", text="\n".join(d) + "\n", reasons=reasons, warnings=warnings,
                  facts_used=facts_used)
