"""Soak: two torchrun agents of `gpurig train` on this machine, a node killed in every round.

    PYTHONPATH=src python bench/soak_nodes.py --rounds 20 --mode restart --out runs/soak
    PYTHONPATH=src python bench/soak_nodes.py --rounds 20 --mode elastic --out runs/soak

Each round: two agents (`--nnodes 2`, or `1:2` for elastic) of the demo (an MLP, 40 steps of
2 x 16 samples, a checkpoint every 10) on the CPU, one gloo process each. Node 1 stops taking part
after step 25 and is SIGKILLed with its worker, as when a machine goes down. `restart`: it is
started again with the same command, rejoins, and the run must end bit for bit where an
uninterrupted single-node run ends. `elastic`: it never comes back; node 0 must finish alone
from the newest checkpoint, bit for bit as that checkpoint resumed by hand on one process.
A round passes only then, within --round-timeout. Prints each round and writes soak.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

BASE = ["eval.enabled=false", "train.steps=40", "checkpoint.every_steps=10", "checkpoint.keep=5",
        "data.batch_size=16", "model.hidden=64"]
ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # bit-for-bit equality needs the same thread split as the reference


def _cfg(*extra: str):
    from gpurig.train.config import load_config

    return load_config(preset_name="demo", overrides=BASE + list(extra))


def _equal(a: Path, b: Path) -> bool:
    import torch

    pa, pb = (torch.load(p, weights_only=True)["model"] for p in (a, b))
    return pa.keys() == pb.keys() and all(torch.equal(pa[k], pb[k]) for k in pa)


def _start(plan, env: dict[str, str] | None = None) -> subprocess.Popen:
    Path(plan.run_dir).mkdir(parents=True, exist_ok=True)
    log = open(Path(plan.run_dir) / "agent.log", "a")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(plan.argv, env={**plan.full_env(), **(env or {})}, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL an agent and every worker it started (workers live in sessions of their own)."""
    import psutil

    try:
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.Error:
        family = []
    for p in family:
        try:
            p.kill()
        except psutil.Error:
            pass
    proc.wait(timeout=30)


def _wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"node 1 ended before the fault: {path.read_text(errors='replace')[-1500:]}")
        time.sleep(0.2)
    raise TimeoutError(f"{text!r} never appeared in {path}")


def one_round(folder: Path, mode: str, reference: Path, timeout: float) -> tuple[bool, str]:
    from gpurig.launch.plan import free_port
    from gpurig.train.nodes import plan_node
    from gpurig.train.plan import plan_training
    from gpurig.train.run import run_training

    elastic = mode == "elastic"
    cfg = _cfg()
    if elastic:
        cfg = plan_training(cfg, device="cpu", nproc=1, nnodes=2, rdzv_endpoint="127.0.0.1:1", min_nodes=1,
                            out_dir=folder / "unused").config
    shared, endpoint = folder / "shared", f"127.0.0.1:{free_port()}"
    plans = [plan_node(cfg, shared, nnodes=2, node_rank=r, endpoint=endpoint, nproc_per_node=1, device="cpu",
                       max_restarts=3, log_dir=folder / f"node{r}", env=ONE_THREAD,
                       min_nodes=1 if elastic else None)[0] for r in (0, 1)]
    stuck = {"GPURIG_TRAIN_FAULT": "hang:step=25:rank=0,hang:step=25:rank=1"}
    agents = [_start(plans[0])]
    try:
        time.sleep(1)
        first = _start(plans[1], env=stuck)
        agents.append(first)
        _wait_for(folder / "node1" / "agent.log", "stops taking part after step 25", first, timeout)
        _kill(first)
        if not elastic:
            agents.append(_start(plans[1]))
        end = time.monotonic() + timeout
        for a in [agents[0], *agents[2:]]:
            a.wait(timeout=max(1.0, end - time.monotonic()))
        codes = [a.returncode for a in [agents[0], *agents[2:]]]
        if any(codes):
            return False, f"agents exited {codes}: {(folder / 'node0' / 'agent.log').read_text()[-1500:]}"
    except (subprocess.TimeoutExpired, TimeoutError, RuntimeError) as exc:
        return False, f"{type(exc).__name__}: {exc}"
    finally:
        for a in agents:
            if a.poll() is None:
                _kill(a)
    summary = json.loads((shared / "summary.json").read_text())
    last = shared / "checkpoints" / "step-000000040.pt"
    if elastic:
        by_hand = folder / "by_hand"
        (by_hand / "checkpoints").mkdir(parents=True)
        shutil.copy(shared / "checkpoints" / "step-000000020.pt", by_hand / "checkpoints")
        run_training(_cfg("data.global_batch_size=32"), device="cpu", nproc=1, out_dir=by_hand, resume="auto",
                     timeout=timeout, env=ONE_THREAD)
        reference = by_hand
    if summary.get("steps") != 40 or summary.get("world_size") != (1 if elastic else 2):
        return False, f"summary: steps {summary.get('steps')}, world size {summary.get('world_size')}"
    if not _equal(reference / "checkpoints" / "step-000000040.pt", last):
        return False, "final weights differ from the reference"
    return True, f"resumed from {Path(summary.get('resumed_from') or '?').name}, restarts {summary['faults']['restart_count']}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--mode", choices=("restart", "elastic"), default="restart")
    ap.add_argument("--out", type=Path, default=Path("runs/soak"))
    ap.add_argument("--round-timeout", type=float, default=240.0)
    args = ap.parse_args()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from gpurig.train.run import run_training

    args.out.mkdir(parents=True, exist_ok=True)
    reference = args.out / "reference"
    if not (reference / "checkpoints" / "step-000000040.pt").exists():
        shutil.rmtree(reference, ignore_errors=True)
        run_training(_cfg(), device="cpu", nproc=2, out_dir=reference, timeout=args.round_timeout, env=ONE_THREAD)
    rounds = []
    for i in range(1, args.rounds + 1):
        folder = args.out / f"{args.mode}-{i:02d}"
        shutil.rmtree(folder, ignore_errors=True)
        t0 = time.monotonic()
        ok, what = one_round(folder, args.mode, reference, args.round_timeout)
        seconds = time.monotonic() - t0
        rounds.append({"round": i, "passed": ok, "seconds": round(seconds, 1), "detail": what})
        print(f"round {i:2d}/{args.rounds} {args.mode}: {'pass' if ok else 'FAIL'} in {seconds:.0f} s; {what}", flush=True)
    passed = sum(r["passed"] for r in rounds)
    print(f"{args.mode}: {passed} of {len(rounds)} rounds passed")
    (args.out / f"soak-{args.mode}.json").write_text(json.dumps(
        {"mode": args.mode, "rounds": rounds, "passed": passed, "python": sys.version.split()[0],
         "cpus": os.cpu_count()}, indent=1))
    return 0 if passed == len(rounds) else 1


if __name__ == "__main__":
    sys.exit(main())
