"""`gpurig env`: pip lines, Dockerfiles, docker run lines, compose files and cluster jobs that fit the host.

Each subcommand reads the host's facts (or `--facts FILE` from another machine), asks
`gpurig.recipes` for the recipe, and prints it on stdout (so `> Dockerfile` works) with the
reasons on stderr, or writes it with `--out FILE`. `--json` prints one JSON document instead.
"""

from __future__ import annotations

from pathlib import Path

import typer

from gpurig.errors import BadInput, check_output_file, write_file_atomic
from gpurig.probe.facts import RigFacts
from gpurig.recipes.base import HostSummary, Recipe
from gpurig.report.output import console_for, emit_json

ENV_HELP = """Recipes that fit this host: the pip line, a Dockerfile, the docker run line (or a compose
file), a Slurm sbatch script and a Kubeflow job. Every line carries a comment saying why.

The recipe goes to stdout and the reasons to stderr, so [bold]gpurig env dockerfile > Dockerfile[/bold]
works; [bold]--out FILE[/bold] writes it (never over an existing file without --force);
[bold]--facts FILE[/bold] builds it for the machine that saved FILE with `gpurig doctor --save-facts`.

Exit status: 0 a recipe that fits, 1 nothing fits this host (the output says what to change),
2 bad options or an unreadable facts file.
"""

FACTS_HELP = "Build for the machine that saved FILE (`gpurig doctor --save-facts FILE`) instead of this one."
OUT_HELP = "Write the recipe to FILE instead of stdout (refuses to replace an existing file without --force)."


def load_host(facts_file: Path | None, out: Path | None = None, force: bool = False) -> tuple[RigFacts, HostSummary]:
    """The facts of this machine (no framework probing: recipes need GPUs, driver, Python, cores) or of FILE.

    `--out` is checked first, so a file that would not be replaced costs no probing."""
    if out is not None:
        check_output_file(str(out), "--out", force)
    if facts_file is not None:
        from gpurig.probe.snapshot import load_facts_file

        facts = load_facts_file(facts_file)
    else:
        from gpurig.probe.collect import collect_facts

        facts = collect_facts(frameworks=False)
    return facts, HostSummary.from_facts(facts)


def check_host_folder(path: str, flag: str) -> None:
    """A folder of this host that the recipe mounts must exist and be a folder: a missing bind-mount
    source is created by Docker as an empty folder owned by root, and the job then sees no data."""
    p = Path(path).expanduser()
    if not p.exists():
        raise BadInput(f"{flag} {path}: no such folder on this host")
    if not p.is_dir():
        raise BadInput(f"{flag} {path}: is a file, not a folder")


def write_recipe(recipe: Recipe, out: Path, force: bool) -> Path:
    """Write through gpurig's one rule for output files: the folder must exist, an existing file
    stays untouched unless `force`, and the write is atomic (temporary file, fsync, rename)."""
    check_output_file(str(out), "--out", force)
    # Scripts are meant to be run (or submitted) as they are.
    mode = 0o755 if recipe.kind in ("docker-run", "slurm") else 0o644
    write_file_atomic(str(out), recipe.text, "--out", mode=mode)
    return out


def render(recipe: Recipe, json_out: bool, out: Path | None, force: bool) -> None:
    """Print or write the recipe; exit 1 when nothing fits this host."""
    written = write_recipe(recipe, out, force) if out is not None and recipe.fits else None
    if json_out:
        emit_json(recipe.to_dict() | {"written": str(written) if written else None})
    else:
        console = console_for(True)  # stderr: stdout carries only the recipe
        console.soft_wrap = True  # long reasons wrap in the terminal, not mid-sentence at 80 columns
        if written is None:
            typer.echo(recipe.text, nl=False)
        if recipe.fits:
            console.print("[bold]Why:[/bold]")
            for reason in recipe.reasons:
                console.print(f"  - {reason}", markup=False)
        for warning in recipe.warnings:
            console.print(f"[bold red]warning:[/bold red] {warning}")
        if written is not None:
            console.print(f"{recipe.kind} written to {written}", markup=False)
        elif out is not None:
            console.print(f"nothing written to {out}: no {recipe.kind} recipe fits this host", markup=False)
    if not recipe.fits:
        raise typer.Exit(1)


def _command_args(command: list[str] | None) -> list[str]:
    return list(command or [])


def register(app: typer.Typer) -> None:
    env_app = typer.Typer(help=ENV_HELP, no_args_is_help=True, rich_markup_mode="rich")

    @env_app.command("pip")
    def pip_cmd(
        framework: str = typer.Option("torch", "--framework", help="torch or tf."),
        python: str | None = typer.Option(None, "--python", metavar="X.Y",
                                          help="Python the wheel is for (default: the host's)."),
        torch_version: str | None = typer.Option(None, "--torch-version", metavar="X.Y",
                                                 help="A torch release to stay on, X.Y (X.Y.Z and X.Y.* name "
                                                      "the same release line; default: the newest that fits)."),
        facts_file: Path | None = typer.Option(None, "--facts", metavar="FILE", help=FACTS_HELP),
        out: Path | None = typer.Option(None, "--out", metavar="FILE", help=OUT_HELP),
        force: bool = typer.Option(False, "--force", help="Replace an existing --out file."),
        json_out: bool = typer.Option(False, "--json", help='One JSON document: {"recipe", "reasons", "facts_used", ...}.'),
    ) -> None:
        """The pip install line whose CUDA build fits this host's driver and GPUs, and why.

        Picks the newest release and CUDA variant (cu126, cu128, cu130, ...) that the driver runs and
        that is compiled for every GPU's compute capability; with no GPU, the CPU wheel. When nothing
        fits, says what to change (the driver, the Python, an older release) and exits 1.

        Example: gpurig env pip --framework torch
        """
        from gpurig.recipes.pip import pip_recipe
        from gpurig.recipes.versions import check_torch_version

        torch_version = check_torch_version(torch_version)  # before any probing: a typo costs nothing
        _, host = load_host(facts_file, out, force)
        render(pip_recipe(host, framework, python, torch_version), json_out, out, force)

    @env_app.command("dockerfile")
    def dockerfile_cmd(
        framework: str = typer.Option("torch", "--framework", help="torch or tf."),
        jupyter: bool = typer.Option(False, "--jupyter", help="Start JupyterLab (token required)."),
        ssh: bool = typer.Option(False, "--ssh", help="Start an SSH server: key login only, as the non-root user."),
        tensorboard: bool = typer.Option(False, "--tensorboard", help="Start TensorBoard on runs/."),
        public: bool = typer.Option(False, "--public",
                                    help="Jupyter for other machines too: requires a password hash (warns)."),
        requirements: str | None = typer.Option(None, "--requirements", metavar="FILE",
                                                help="The project's requirements, relative to the build context "
                                                     "(default: requirements.txt when it exists)."),
        torch_version: str | None = typer.Option(None, "--torch-version", metavar="X.Y",
                                                 help="A torch release to use, X.Y (or X.Y.Z, X.Y.*)."),
        tf_version: str | None = typer.Option(None, "--tf-version", metavar="X.Y",
                                              help="A TensorFlow release to use, X.Y (or X.Y.Z, X.Y.*)."),
        facts_file: Path | None = typer.Option(None, "--facts", metavar="FILE", help=FACTS_HELP),
        out: Path | None = typer.Option(None, "--out", metavar="FILE", help=OUT_HELP),
        force: bool = typer.Option(False, "--force", help="Replace an existing --out file."),
        json_out: bool = typer.Option(False, "--json", help='One JSON document: {"recipe", "reasons", "facts_used", ...}.'),
    ) -> None:
        """A Dockerfile on the official image whose CUDA the host driver runs, with a non-root user.

        Base: pytorch/pytorch:<ver>-cuda<x.y>-cudnn<n>-runtime or tensorflow/tensorflow:<ver>-gpu, the newest
        whose CUDA is not newer than the driver's and whose build covers the GPUs (python:*-slim with
        the CPU wheel on a host without GPU). The framework stays pinned to the image's build; the
        project's requirements.txt is installed; SSH takes keys only, never root; Jupyter asks for a
        token and, with --public, a password hash.

        Example: gpurig env dockerfile --jupyter --ssh --out Dockerfile
        """
        from gpurig.recipes.dockerfile import DockerfileOptions, dockerfile_recipe
        from gpurig.recipes.images import PYTORCH_FIRST_RELEASE
        from gpurig.recipes.versions import check_tf_version, check_torch_version

        if framework == "torch" and tf_version is not None:
            raise BadInput("--tf-version goes with --framework tf")
        if framework == "tf" and torch_version is not None:
            raise BadInput("--torch-version goes with --framework torch")
        if framework not in ("torch", "tf"):
            raise BadInput(f"--framework must be one of torch, tf, got {framework!r}")
        # Official PyTorch images start at 2.0: older releases are not offered.
        torch_version = check_torch_version(torch_version, first=PYTORCH_FIRST_RELEASE, what="PyTorch image")
        tf_version = check_tf_version(tf_version)
        if requirements is None:
            requirements = "requirements.txt" if Path("requirements.txt").is_file() else None
        elif not Path(requirements).is_file():
            raise BadInput(f"--requirements {requirements}: no such file (it must be inside the build context)")
        elif Path(requirements).is_absolute() or ".." in Path(requirements).parts:
            raise BadInput(f"--requirements {requirements}: give a path inside the build context, relative to it")
        _, host = load_host(facts_file, out, force)
        opts = DockerfileOptions(framework=framework,
                                 framework_version=torch_version if framework == "torch" else tf_version,
                                 jupyter=jupyter, ssh=ssh, tensorboard=tensorboard, public=public,
                                 requirements=requirements)
        render(dockerfile_recipe(host, opts), json_out, out, force)

    @env_app.command("docker-run", context_settings={"allow_interspersed_args": False})
    def docker_run_cmd(
        command: list[str] | None = typer.Argument(None, metavar="[-- COMMAND...]",
                                                   help="What the container runs (default: the image's CMD)."),
        gpus: str = typer.Option("all", "--gpus", help="'all' or GPU indices like 0,1 (a user's share)."),
        compose: bool = typer.Option(False, "--compose", help="A docker compose file instead of the docker run line."),
        image: str = typer.Option("gpurig-train", "--image", help="The image to run."),
        ipc: str = typer.Option("host", "--ipc", help="host (--ipc=host) or private (--shm-size sized from "
                                                       "--workers, --batch, --sample-mb)."),
        workers: int = typer.Option(4, "--workers", help="DataLoader workers per process (sizes /dev/shm)."),
        batch: int = typer.Option(256, "--batch", help="Samples per batch per process (sizes /dev/shm)."),
        sample_mb: float = typer.Option(0.6, "--sample-mb", help="MB per decoded sample (sizes /dev/shm)."),
        data: str | None = typer.Option(None, "--data", metavar="DIR",
                                        help="Host folder with datasets, mounted read-only at /data (it must exist; "
                                             "with --facts it is the other machine's and is not checked)."),
        jupyter: bool = typer.Option(False, "--jupyter", help="Publish Jupyter's port (8888) on 127.0.0.1."),
        ssh: bool = typer.Option(False, "--ssh", help="Publish SSH (2222) on 127.0.0.1 and mount ~/.ssh/authorized_keys."),
        tensorboard: bool = typer.Option(False, "--tensorboard", help="Publish TensorBoard (6006) on 127.0.0.1."),
        public: bool = typer.Option(False, "--public", help="Publish the ports on every interface (warns)."),
        name: str = typer.Option("gpurig", "--name", help="Container (or compose service) name."),
        facts_file: Path | None = typer.Option(None, "--facts", metavar="FILE", help=FACTS_HELP),
        out: Path | None = typer.Option(None, "--out", metavar="FILE", help=OUT_HELP),
        force: bool = typer.Option(False, "--force", help="Replace an existing --out file."),
        json_out: bool = typer.Option(False, "--json", help='One JSON document: {"recipe", "reasons", "facts_used", ...}.'),
    ) -> None:
        """The docker run line (or a compose file) that gives the container the GPUs and the memory it needs.

        --gpus all or --gpus '"device=0,1"'; --ipc=host (or --shm-size from workers x batch);
        --ulimit memlock=-1 and stack=64 MiB; the project mounted at /workspace; ports on 127.0.0.1
        unless --public. Needs the NVIDIA Container Toolkit on the host.

        Example: gpurig env docker-run --gpus 0,1 --jupyter --compose --out compose.yaml
        """
        from gpurig.recipes.container import ContainerOptions, compose_recipe, docker_run_recipe

        # The host paths the recipe mounts are this machine's unless --facts names another one.
        if data is not None and data.strip() and facts_file is None:
            check_host_folder(data, "--data")
        _, host = load_host(facts_file, out, force)
        opts = ContainerOptions(image=image, gpus=gpus, ipc=ipc, workers=workers, batch=batch, sample_mb=sample_mb,
                                data=data, jupyter=jupyter, ssh=ssh, tensorboard=tensorboard, public=public,
                                name=name, command=_command_args(command))
        recipe = compose_recipe(host, opts) if compose else docker_run_recipe(host, opts)
        keys = Path("~/.ssh/authorized_keys").expanduser()
        if ssh and facts_file is None and recipe.fits and not keys.is_file():
            recipe.warnings.append("--ssh mounts ~/.ssh/authorized_keys, which does not exist on this host: Docker "
                                   "would create an empty folder, owned by root, in its place; put your public key "
                                   "in ~/.ssh/authorized_keys before starting the container")
        render(recipe, json_out, out, force)

    def cluster_options(nodes, gpus_per_node, command, framework, job_name, **kw):
        from gpurig.recipes.cluster import ClusterOptions

        return ClusterOptions(nodes=nodes, gpus_per_node=gpus_per_node, command=_command_args(command),
                              framework=framework, job_name=job_name, **kw)

    @env_app.command("slurm", context_settings={"allow_interspersed_args": False})
    def slurm_cmd(
        command: list[str] | None = typer.Argument(None, metavar="-- COMMAND...",
                                                   help="What each worker runs, e.g. -- train.py --epochs 10."),
        nodes: int = typer.Option(..., "--nnodes", "--nodes", help="Number of machines."),
        gpus_per_node: int | None = typer.Option(None, "--gpus-per-node", help="GPUs per machine (default: this host's); "
                                                 "0: CPU nodes, gloo."),
        procs_per_node: int | None = typer.Option(None, "--procs-per-node", metavar="N",
                                                  help="Worker processes per CPU node (with --gpus-per-node 0; default 2)."),
        framework: str = typer.Option("torch", "--framework", help="torch (torchrun) or tf (MultiWorkerMirroredStrategy)."),
        job_name: str = typer.Option("gpurig-train", "--job-name", help="The job's name."),
        port: int = typer.Option(29500, "--port", help="Rendezvous port on the first node (torch), or each TensorFlow worker's port."),
        cpus_per_node: int | None = typer.Option(None, "--cpus-per-node", help="Cores per machine (default: this host's)."),
        time: str | None = typer.Option(None, "--time", metavar="HH:MM:SS", help="Time limit."),
        partition: str | None = typer.Option(None, "--partition", help="The Slurm partition with GPU nodes."),
        max_restarts: int = typer.Option(0, "--max-restarts", help="torchrun restarts of the worker group."),
        facts_file: Path | None = typer.Option(None, "--facts", metavar="FILE", help=FACTS_HELP),
        out: Path | None = typer.Option(None, "--out", metavar="FILE", help=OUT_HELP),
        force: bool = typer.Option(False, "--force", help="Replace an existing --out file."),
        json_out: bool = typer.Option(False, "--json", help='One JSON document: {"recipe", "reasons", "facts_used", ...}.'),
    ) -> None:
        """An sbatch script: one torchrun agent per node (srun), c10d rendezvous on the first node.

        torchrun gets --nnodes N --nproc-per-node G --rdzv-backend c10d --rdzv-endpoint <first node>:PORT;
        the first node comes from `scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1`. With
        --framework tf: one worker per node, each with its own TF_CONFIG. With `-- gpurig train ...`
        the job is requeueable: one --out for every run of it and --resume auto, so a job requeued
        after preemption (or submitted again after scancel) continues from its newest checkpoint.

        Examples:
          gpurig env slurm --nodes 2 --gpus-per-node 8 --out train.sbatch -- train.py --epochs 10
          gpurig env slurm --nodes 1 --gpus-per-node 0 --out demo.sbatch -- gpurig train --preset demo
        """
        from gpurig.recipes.cluster import slurm_recipe

        _, host = load_host(facts_file, out, force)
        opts = cluster_options(nodes, gpus_per_node, command, framework, job_name, port=port,
                               procs_per_node=procs_per_node, cpus_per_node=cpus_per_node, time=time, partition=partition, max_restarts=max_restarts)
        render(slurm_recipe(host, opts), json_out, out, force)

    @env_app.command("k8s", context_settings={"allow_interspersed_args": False})
    def k8s_cmd(
        command: list[str] | None = typer.Argument(None, metavar="-- COMMAND...",
                                                   help="What each worker runs, e.g. -- train.py --epochs 10."),
        nodes: int = typer.Option(..., "--nnodes", "--nodes", help="Number of pods (one per machine)."),
        gpus_per_node: int | None = typer.Option(None, "--gpus-per-node", help="GPUs per pod (default: this host's)."),
        framework: str = typer.Option("torch", "--framework", help="torch (PyTorchJob) or tf (TFJob)."),
        job_name: str = typer.Option("gpurig-train", "--job-name", help="The job's name (a Kubernetes name)."),
        image: str = typer.Option("gpurig-train", "--image", help="The image every pod runs (from your registry)."),
        max_restarts: int = typer.Option(0, "--max-restarts", help="torchrun restarts of the worker group."),
        min_nodes: int | None = typer.Option(None, "--min-nodes", metavar="N",
                                             help="An elastic PyTorchJob: train with N to --nnodes pods "
                                                  "(spec.elasticPolicy; torchrun --nnodes N:MAX)."),
        workers: int = typer.Option(4, "--workers", help="DataLoader workers per process (sizes /dev/shm)."),
        batch: int = typer.Option(256, "--batch", help="Samples per batch per process (sizes /dev/shm)."),
        sample_mb: float = typer.Option(0.6, "--sample-mb", help="MB per decoded sample (sizes /dev/shm)."),
        facts_file: Path | None = typer.Option(None, "--facts", metavar="FILE", help=FACTS_HELP),
        out: Path | None = typer.Option(None, "--out", metavar="FILE", help=OUT_HELP),
        force: bool = typer.Option(False, "--force", help="Replace an existing --out file."),
        json_out: bool = typer.Option(False, "--json", help='One JSON document: {"recipe", "reasons", "facts_used", ...}.'),
    ) -> None:
        """A Kubeflow PyTorchJob (Master + Workers, torchrun in each pod) or TFJob manifest.

        Each pod asks for nvidia.com/gpu G, mounts a memory-backed /dev/shm sized from workers x batch,
        runs as the image's non-root user; torchrun meets at the Master through c10d. With --min-nodes N
        the job is elastic: Workers only, spec.elasticPolicy N..--nnodes, torchrun --nnodes N:MAX.

        Example: gpurig env k8s --nodes 2 --gpus-per-node 8 --image registry.example.com/train:1 -- train.py
        """
        from gpurig.recipes.cluster import k8s_recipe

        if workers < 0:
            raise BadInput(f"--workers must be 0 or more, got {workers}")
        if batch < 1:
            raise BadInput(f"--batch must be at least 1, got {batch}")
        if sample_mb <= 0:
            raise BadInput(f"--sample-mb must be more than 0, got {sample_mb}")
        _, host = load_host(facts_file, out, force)
        opts = cluster_options(nodes, gpus_per_node, command, framework, job_name, image=image,
                               max_restarts=max_restarts, workers=workers, batch=batch, sample_mb=sample_mb,
                               min_nodes=min_nodes)
        render(k8s_recipe(host, opts), json_out, out, force)

    app.add_typer(env_app, name="env")
