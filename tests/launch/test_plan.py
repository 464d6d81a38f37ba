"""`gpurig launch --dry-run`: plans for one node, several nodes and Slurm, as pure data."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpurig.errors import BadInput
from gpurig.launch.plan import DeviceChoice, LaunchOptions, plan_launch
from gpurig.launch.slurm import expand_nodelist, slurm_from_env

CPU2 = DeviceChoice(device="cpu", nproc=2, reason="test")
GPU8 = DeviceChoice(device="cuda", nproc=8, reason="test")


def _plan(environ=None, choice=CPU2, torch_version="2.11.0", **kw):
    options = LaunchOptions(script="train.py", script_args=["--epochs", "3"], run_dir="runs/r1", **kw)
    return plan_launch(options, environ=environ or {}, cpu_count=16, device_choice=choice, port=45678,
                       python="python", torch_version=torch_version)


def _flag(argv, name):
    hits = [a.split("=", 1)[1] for a in argv if a.startswith(name + "=")]
    return hits[0] if hits else None


def test_single_node_cpu_plan_has_free_port_logs_and_defaults():
    plan, desc = _plan()
    argv = plan.argv
    assert argv[:3] == ["python", "-m", "torch.distributed.run"]
    assert _flag(argv, "--nnodes") == "1"
    assert _flag(argv, "--nproc-per-node") == "2"
    assert _flag(argv, "--rdzv-endpoint") == "127.0.0.1:45678"
    assert _flag(argv, "--log-dir") == os.path.join("runs/r1", "logs")
    assert _flag(argv, "--tee") == "3" and _flag(argv, "--redirects") == "3"
    assert "--node-rank" not in " ".join(argv)
    # The script and its arguments come last, untouched.
    assert argv[-3:] == ["train.py", "--epochs", "3"]
    assert plan.env["OMP_NUM_THREADS"] == "8"  # 16 cores / 2 processes
    assert plan.env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert plan.env["GPURIG_COLLECTIVE_TIMEOUT"] == "600"
    # A worker-hosted store needs rank 0 to outlive the others; a user's script may not wait.
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in plan.env
    assert plan.env["PYTHONPATH"].split(os.pathsep)[0].endswith(os.path.join("launch", "inject"))
    # The flight recorder is NCCL's: not set on a gloo run.
    assert "TORCH_FR_BUFFER_SIZE" not in plan.env and "TORCH_NCCL_DUMP_ON_TIMEOUT" not in plan.env
    assert desc["backend"] == "gloo" and desc["slurm"] is None
    assert json.loads(json.dumps(desc)) == desc  # --dry-run --json prints exactly this


def test_gpu_plan_turns_on_the_flight_recorder_into_the_run_directory():
    plan, _ = _plan(choice=GPU8, torch_version="2.11.0+cu130")
    assert plan.env["TORCH_FR_BUFFER_SIZE"] == "2000"
    assert plan.env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert plan.env["TORCH_FR_DUMP_TEMP_FILE"] == os.path.join("runs/r1", "nccl_trace_rank_")
    # The deprecated names would make every rank print a warning.
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in plan.env and "TORCH_NCCL_DEBUG_INFO_TEMP_FILE" not in plan.env


def test_older_torch_gets_the_old_flight_recorder_names():
    plan, _ = _plan(choice=GPU8, torch_version="2.6.0")
    assert plan.env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000"
    assert plan.env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == os.path.join("runs/r1", "nccl_trace_rank_")
    assert "TORCH_FR_BUFFER_SIZE" not in plan.env
    assert plan.env["OMP_NUM_THREADS"] == "2"  # 16 cores / 8 processes
    assert _flag(plan.argv, "--nproc-per-node") == "8"


def test_users_own_settings_win_and_env_overrides_apply():
    plan, desc = _plan(environ={"OMP_NUM_THREADS": "3"}, env_overrides={"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "FOO": "x=y"})
    assert "OMP_NUM_THREADS" not in plan.env  # inherited as the user set it
    kept = next(d for d in desc["defaults"] if d["name"] == "OMP_NUM_THREADS")
    assert kept == {"name": "OMP_NUM_THREADS", "value": "3", "source": "yours", "why": "kept from your environment"}
    assert plan.env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"
    assert plan.env["FOO"] == "x=y"


def test_timeout_none_leaves_torch_default():
    plan, desc = _plan(collective_timeout_s=None)
    assert "GPURIG_COLLECTIVE_TIMEOUT" not in plan.env
    assert any("torch's default" in n for n in desc["notes"])


def test_multi_node_plan():
    plan, desc = _plan(nnodes="2", node_rank=1, rdzv_endpoint="10.0.0.1:29400")
    argv = plan.argv
    assert _flag(argv, "--nnodes") == "2"
    assert _flag(argv, "--node-rank") is None  # c10d numbers the nodes as they join (torchrun warns otherwise)
    assert _flag(argv, "--rdzv-endpoint") == "10.0.0.1:29400"
    assert _flag(argv, "--rdzv-id") == "gpurig"
    assert desc["node_rank"] == 1
    static, _ = _plan(nnodes="2", node_rank=1, rdzv_endpoint="10.0.0.1:29400", rdzv_backend="static")
    assert _flag(static.argv, "--node-rank") == "1"  # the static rendezvous needs it


def test_multi_node_endpoint_without_port_gets_29500_and_elastic_range():
    plan, _ = _plan(nnodes="1:4", rdzv_endpoint="head-node")
    assert _flag(plan.argv, "--rdzv-endpoint") == "head-node:29500"
    assert _flag(plan.argv, "--nnodes") == "1:4"


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"nnodes": "2"}, "needs --rdzv-endpoint"),
        ({"nnodes": "2", "node_rank": 2, "rdzv_endpoint": "h:1"}, r"--node-rank: 2 is outside 0\.\.1 \(--nnodes 2\)"),
        ({"nnodes": "two"}, "--nnodes must be"),
        ({"nnodes": "4:2"}, "--nnodes must be"),
        ({"nnodes": "2", "rdzv_endpoint": "h:port"}, "'port' is not a port number"),
        ({"max_restarts": -1}, "--max-restarts"),
        ({"collective_timeout_s": -5.0}, "--timeout"),
        ({"env_overrides": {"NCCL_NVLS_ENABLE": "1"}}, "never switches on NVLink multicast"),
    ],
)
def test_bad_plans_name_the_flag(kw, message):
    with pytest.raises(BadInput, match=message):
        _plan(**kw)


SLURM = {
    "SLURM_JOB_ID": "4242",
    "SLURM_NNODES": "4",
    "SLURM_NODEID": "2",
    "SLURM_JOB_NODELIST": "gpu[01-03,07]",
}


def test_slurm_environment_sets_nodes_rank_and_first_host():
    plan, desc = _plan(environ=SLURM)
    argv = plan.argv
    assert _flag(argv, "--nnodes") == "4"
    assert desc["node_rank"] == 2
    # The same port on every node, derived from the job id: 29500 + 4242 % 2000.
    assert _flag(argv, "--rdzv-endpoint") == "gpu01:29742"
    assert _flag(argv, "--rdzv-id") == "slurm-4242"
    assert desc["slurm"]["hosts"] == ["gpu01", "gpu02", "gpu03", "gpu07"]


def test_flags_override_slurm_and_no_slurm_ignores_it():
    plan, _ = _plan(environ=SLURM, rdzv_endpoint="10.1.1.1:1234")
    assert _flag(plan.argv, "--rdzv-endpoint") == "10.1.1.1:1234"
    plan, desc = _plan(environ=SLURM, use_slurm=False)
    assert _flag(plan.argv, "--nnodes") == "1" and desc["slurm"] is None


def test_slurm_several_tasks_per_node_is_pointed_out():
    _, desc = _plan(environ={**SLURM, "SLURM_NTASKS_PER_NODE": "8"})
    assert any("--ntasks-per-node=1" in n for n in desc["notes"])


@pytest.mark.parametrize(
    "nodelist, hosts",
    [
        ("node1", ["node1"]),
        ("gpu[01-04,07]", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]),
        ("a[1-2],b5,c[08-10]", ["a1", "a2", "b5", "c08", "c09", "c10"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("gpu-node-[3]", ["gpu-node-3"]),
    ],
)
def test_expand_nodelist(nodelist, hosts):
    assert expand_nodelist(nodelist) == hosts


@pytest.mark.parametrize("nodelist", ["", "gpu[01-", "gpu[4-2]", "gpu[a-b]", "gpu]1["])
def test_expand_nodelist_rejects_garbage(nodelist):
    with pytest.raises(ValueError):
        expand_nodelist(nodelist)


def test_bad_slurm_variables_are_bad_input():
    with pytest.raises(BadInput, match="SLURM_JOB_NODELIST"):
        slurm_from_env({"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "gpu[1-"})
    with pytest.raises(BadInput, match="SLURM_NODEID=5"):
        slurm_from_env({"SLURM_JOB_ID": "1", "SLURM_NNODES": "2", "SLURM_NODEID": "5", "SLURM_JOB_NODELIST": "a,b"})
    assert slurm_from_env({}) is None


def test_dry_run_cli_json_under_slurm(run_cli, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    env = {**SLURM, "CUDA_VISIBLE_DEVICES": ""}
    out = run_cli("launch", "--dry-run", "--json", "--device", "cpu", str(script), "--lr", "0.1", env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    plan = doc["plan"]
    assert plan["nnodes"] == "4" and plan["node_rank"] == 2
    assert plan["rdzv_endpoint"] == "gpu01:29742"
    assert plan["argv"][-3:] == [str(script), "--lr", "0.1"]
    assert not (tmp_path / "runs").exists()  # a dry run writes nothing


def test_cli_bad_input_exits_2(run_cli, tmp_path):
    out = run_cli("launch", "--dry-run", str(tmp_path / "missing.py"), cwd=tmp_path)
    assert out.returncode == 2 and "missing.py: no such file" in out.stderr
    script = tmp_path / "t.py"
    script.write_text("")
    out = run_cli("launch", "--dry-run", "--env", "NOEQUALS", str(script), cwd=tmp_path)
    assert out.returncode == 2 and "--env 'NOEQUALS'" in out.stderr
    out = run_cli("launch", "--dry-run", "--nproc-per-node", "zero", str(script), cwd=tmp_path)
    assert out.returncode == 2 and "--nproc-per-node" in out.stderr


def test_strict_stops_on_lint_findings_before_starting(run_cli, tmp_path):
    seed = Path(__file__).resolve().parents[1] / "fixtures" / "scripts" / "seed_ddp_template.py"
    out = run_cli("launch", "--strict", "--no-preflight", "--device", "cpu", "--json", str(seed), cwd=tmp_path)
    assert out.returncode == 1
    doc = json.loads(out.stdout)
    assert doc["result"]["status"] == "not-started"
    # Only what survives the default rules (cosmetic ones, like a DataLoader without workers, are off).
    assert [f["id"] for f in doc["lint"]] == ["hard-coded-rendezvous", "download-on-every-rank"]
    assert "--strict" in out.stderr
    assert not list((tmp_path / "runs").glob("*/logs"))  # torchrun never ran


def test_module_mode_runs_python_dash_m():
    plan, _ = plan_launch(LaunchOptions(script="mypkg.train", script_args=["--x"], module=True, run_dir="r"),
                          environ={}, cpu_count=2, device_choice=CPU2, port=1, python="python")
    assert plan.argv[-3:] == ["--module", "mypkg.train", "--x"]


GIB = 2**30


@pytest.fixture
def machine(monkeypatch):
    """Pretend this machine has `cores` CPU cores and `gib` GiB of memory available."""
    import gpurig.launch.plan as plan

    def _set(cores, gib):
        monkeypatch.setattr(plan, "cpu_budget", lambda: (cores, None if gib is None else int(gib * GIB)))

    return _set


def test_cpu_processes_beyond_the_cores_and_memory_are_refused_naming_both(machine):
    from gpurig.launch.plan import resolve_device

    machine(2, 24)
    with pytest.raises(BadInput) as exc:
        resolve_device("cpu", "64")
    message = str(exc.value)
    assert message.startswith("--nproc 64: too many CPU processes for this machine (2 CPU cores, 24.0 GiB of memory "
                              "available)")
    assert "64 processes are more than 4 per core" in message
    assert "64 processes need about 32.5 GiB of memory (0.5 GiB each, 0.5 GiB for the launcher)" in message
    assert message.endswith("use --nproc 8 or fewer")


def test_memory_alone_can_refuse_and_sets_what_fits(machine):
    from gpurig.launch.plan import resolve_device

    machine(64, 4)  # many cores, little memory: (4 - 0.5) GiB / 0.5 GiB = 7 workers
    with pytest.raises(BadInput, match=r"16 processes need about 8\.5 GiB.*use --nproc 7 or fewer$"):
        resolve_device("cpu", 16)
    assert resolve_device("cpu", 7).nproc == 7


def test_up_to_four_processes_per_core_are_allowed(machine):
    from gpurig.launch.plan import resolve_device

    machine(2, 24)
    assert resolve_device("cpu", 8).nproc == 8
    assert resolve_device("cpu", "auto").nproc == 2
    machine(None, None)  # nothing known: nothing refused
    assert resolve_device("cpu", 64).nproc == 64


def test_the_error_names_the_flag_of_the_command(machine):
    from gpurig.launch.plan import resolve_device

    machine(1, 24)
    with pytest.raises(BadInput, match=r"^--nproc-per-node 5: .*use --nproc-per-node 4 or fewer$"):
        resolve_device("cpu", 5, flag="--nproc-per-node")


def test_auto_that_does_not_fit_says_so(machine):
    from gpurig.launch.plan import resolve_device

    machine(1, 0.75)
    with pytest.raises(BadInput, match=r"^--nproc auto \(2 CPU processes\): .*not even one CPU process fits"):
        resolve_device("cpu", "auto")


def test_cuda_processes_are_bounded_by_the_gpus_not_by_this_rule(machine, monkeypatch):
    import gpurig.launch.plan as plan

    machine(1, 0.75)
    monkeypatch.setattr(plan, "visible_gpu_count", lambda: 2)
    monkeypatch.setattr(plan, "torch_cuda_build", lambda: "13.0")
    monkeypatch.setattr(plan, "torch_installed", lambda: True)
    assert plan.resolve_device("cuda", 2).nproc == 2
    with pytest.raises(BadInput, match="--nproc 3 is more than the 2 visible GPU"):
        plan.resolve_device("cuda", 3)


@pytest.mark.parametrize("command, flag", [
    (["verify", "--device", "cpu"], "--nproc"),
    (["bench", "comm", "--device", "cpu"], "--nproc"),
    (["train", "--device", "cpu", "--preset", "demo"], "--nproc"),
    (["launch", "--device", "cpu", "{script}"], "--nproc-per-node"),
])
def test_every_command_refuses_more_cpu_processes_than_the_cores_hold_before_starting(run_cli, tmp_path,
                                                                                       command, flag):
    from gpurig.probe.system import usable_cpus

    too_many = 4 * usable_cpus(cpu_count=os.cpu_count()) + 1
    script = tmp_path / "t.py"
    script.write_text("print('ran')\n")
    args = [str(script) if a == "{script}" else a for a in command]
    at = len(args) - 1 if command[0] == "launch" else len(args)
    args[at:at] = [flag, str(too_many)]
    out = run_cli(*args, cwd=tmp_path, timeout=120)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert f"gpurig: error: {flag} {too_many}: too many CPU processes for this machine (" in out.stderr
    assert "CPU core" in out.stderr and "of memory available" in out.stderr
    assert "Traceback" not in out.stderr and "ran" not in out.stdout
