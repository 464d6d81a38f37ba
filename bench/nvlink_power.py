"""What NVLink costs in power when it does not sleep, on two idle GPUs.

NVLink links drop to a low-power state after an idle period (NVML's NVLink power threshold; on
the H200 machine 500 × 100 µs = 50 ms). A training step shorter than that, with an all-reduce in
every step, keeps them awake throughout. At a GPU's power limit, power the links draw is power the
SMs cannot, so the clock falls. This measures that power directly, with no compute running: two
processes all-reduce a buffer every --every-ms, in phases, while rank 0 reads each GPU's power,
SM clock and NVLink power state through gpurig's NVML reader.

    python bench/nvlink_power.py                    # 2 GPUs, 8 s a phase
    python bench/nvlink_power.py --seconds 4 --json-out nvl.json
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import sys
import threading
import time

PHASES = [  # (name, bytes per all-reduce, milliseconds between all-reduces); 0 bytes: no traffic
    ("quiet", 0, 0),
    ("10 MB every 20 ms", 10 * 2**20, 20),
    ("quiet again", 0, 0),
    ("10 MB every 200 ms", 10 * 2**20, 200),
    ("4 B every 20 ms", 4, 20),
    ("100 MB every 40 ms", 100 * 2**20, 40),
]


def _sampler(backend, world: int, stop: threading.Event, every: float, out: list, phase: list) -> None:
    """gpurig's own NVML reader (the one `gpurig monitor` and the training clock watch use)."""
    while not stop.is_set():
        row = {"phase": phase[0], "t": time.monotonic()}
        for i in range(world):
            g = backend.read(i).gpu
            row[f"w{i}"], row[f"mhz{i}"], row[f"low{i}"] = g.power_w, g.sm_clock_mhz, g.nvlink_low_power
        out.append(row)
        stop.wait(every)


def _worker(rank: int, world: int, port: int, seconds: float, q) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    bufs = {b: torch.ones(max(1, b // 4), device=dev) for _, b, _ in PHASES if b}
    for b in bufs.values():  # NCCL's connections are set up now, outside the phases
        dist.all_reduce(b)
    torch.cuda.synchronize()
    samples: list = []
    phase = ["setup"]
    stop = threading.Event()
    sampler = None
    backend = None
    if rank == 0:
        from gpurig.monitor.sampler import NvmlBackend

        backend = NvmlBackend()
        backend.open()
        sampler = threading.Thread(target=_sampler, args=(backend, world, stop, 0.01, samples, phase), daemon=True)
        sampler.start()
    for name, size, every_ms in PHASES:
        dist.barrier()
        torch.cuda.synchronize()
        phase[0] = name
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if size:
                dist.all_reduce(bufs[size])
                torch.cuda.synchronize()
                time.sleep(every_ms / 1000.0)
            else:
                time.sleep(0.05)
        phase[0] = "between"
    stop.set()
    if sampler is not None:
        sampler.join()
        backend.close()
        q.put(samples)
    dist.barrier()
    dist.destroy_process_group()


def summarise(samples: list, world: int, skip: float) -> list[dict]:
    """Mean power, clock and share of readings with links in their low-power state, per phase and
    GPU; the first `skip` seconds of each phase are left out (the links' own idle threshold)."""
    rows = []
    for name, *_ in PHASES:
        got = [s for s in samples if s["phase"] == name]
        if not got:
            continue
        t0 = got[0]["t"]
        got = [s for s in got if s["t"] - t0 >= skip] or got
        row = {"phase": name, "readings": len(got)}
        for i in range(world):
            row[f"gpu{i}_w"] = statistics.fmean(s[f"w{i}"] for s in got)
            row[f"gpu{i}_mhz"] = statistics.fmean(s[f"mhz{i}"] for s in got)
            lows = [s.get(f"low{i}") for s in got if s.get(f"low{i}") is not None]
            row[f"gpu{i}_links_low"] = sum(1 for v in lows if v == 1) / len(lows) if lows else None
        rows.append(row)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=8.0, help="length of each phase")
    ap.add_argument("--json-out", default=None)
    a = ap.parse_args()
    if a.seconds <= 0:
        ap.error(f"--seconds: {a.seconds:g} must be more than 0")
    if a.json_out and not os.path.isdir(os.path.dirname(os.path.abspath(a.json_out))):
        ap.error(f"--json-out: the folder of {a.json_out} does not exist")
    import torch
    import torch.multiprocessing as mp

    if torch.cuda.device_count() < 2:
        ap.error("needs 2 GPUs joined by NVLink")
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
    from gpurig.launch.plan import free_port

    world = 2
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(r, world, port, a.seconds, q), daemon=True) for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + a.seconds * len(PHASES) + 120
    samples = None
    while samples is None:
        try:
            samples = q.get(timeout=1.0)
        except queue.Empty:
            dead = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
            if dead or time.monotonic() > deadline:
                for p in procs:
                    p.kill()
                why = (f"rank {dead[0][0]} exited with {dead[0][1]} (its traceback is above)" if dead
                       else "no result in time")
                print(f"nvlink_power: {why}", file=sys.stderr)
                return 1
    for p in procs:
        p.join(timeout=60)
    rows = summarise(samples, world, skip=0.5)
    print(f"{'phase':22s} " + "  ".join(f"GPU {i}: W     MHz  links low" for i in range(world)))
    for r in rows:
        print(f"{r['phase']:22s} " + "  ".join(
            f"{r[f'gpu{i}_w']:6.1f} {r[f'gpu{i}_mhz']:5.0f}  "
            + ("   n/a" if r[f"gpu{i}_links_low"] is None else f"{r[f'gpu{i}_links_low']:6.0%}")
            for i in range(world)))
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"seconds": a.seconds, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
