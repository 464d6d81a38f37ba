"""All-reduce bus bandwidth: a plain torch.distributed loop against gpurig's measurement, one run.

    PYTHONPATH=src python bench/comm_vs_plain.py --out runs/comm-vs-plain     # every visible GPU

Launches itself through torchrun (gpurig.launch) with one process per GPU. In every worker, for
each size, it times (1) the plain loop of perf-anchors.md: 5 warm-up `dist.all_reduce` calls, then
20 calls between two CUDA events, and (2) gpurig's own measurement (`gpurig.comm.workers.benchmark`), with
`--graph auto` and with the graph off. Rank 0 prints busbw side by side with ratios, and the ratio
to the nccl-tests figures recorded on the 2×H200 machine (reference/perf-anchors.md), and writes
`comm_vs_plain.json` into --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

SIZES = [1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30]
# nccl-tests all_reduce_perf busbw (GB/s), float32, 2× H200 NV18, NCCL 2.28.9 (perf-anchors.md).
NCCL_TESTS_2XH200 = {1 << 20: 64.3, 4 << 20: 118.3, 16 << 20: 212.4, 64 << 20: 267.9, 256 << 20: 299.9, 1 << 30: 327.0}
PLAIN_ANCHOR_2XH200 = {1 << 20: 23.1, 4 << 20: 100.8, 16 << 20: 220.1, 64 << 20: 267.6, 256 << 20: 298.9, 1 << 30: 326.3}


def plain_loop(nbytes: int, samples: int) -> list[float]:
    """perf-anchors' plain loop: 5 warm-ups, then 20 all_reduce calls between CUDA events."""
    import torch
    import torch.distributed as dist

    x = torch.zeros(nbytes // 4, dtype=torch.float32, device="cuda")
    out = []
    for _ in range(samples):
        for _ in range(5):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dist.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(20):
            dist.all_reduce(x)
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) / 1000 / 20)
    return out


def worker(args: argparse.Namespace) -> None:
    import torch.distributed as dist

    from gpurig.comm.metrics import busbw_gbps, human_bytes
    from gpurig.comm.workers.benchmark import measure
    from gpurig.comm.workers.worker import setup_context

    ctx = setup_context(Path(args.out) / "run", "cuda", timeout=120)
    n = ctx.world_size
    rows = []
    for size in SIZES:
        # Each measurement's seconds are averaged over ranks, as nccl-tests does.
        def mean_over_ranks(seconds: float) -> float:
            import torch

            t = torch.tensor([seconds], dtype=torch.float64, device=ctx.device)
            dist.all_reduce(t)
            return float(t.item()) / n

        plain_first = mean_over_ranks(plain_loop(size, 1)[0])
        plain_median = mean_over_ranks(statistics.median(plain_loop(size, 5)))
        ours = measure(ctx, "allreduce", size, "float32", 20, 5, 5, "auto")
        ours_off = measure(ctx, "allreduce", size, "float32", 20, 5, 5, "off")
        row = {
            "bytes": size, "size": human_bytes(size),
            "plain_busbw_gbps": busbw_gbps("allreduce", size, plain_first, n),
            "plain_median5_busbw_gbps": busbw_gbps("allreduce", size, plain_median, n),
            "gpurig_busbw_gbps": busbw_gbps("allreduce", size, mean_over_ranks(ours["seconds"]), n),
            "gpurig_graph": ours["graph"], "gpurig_graph_error": ours.get("graph_error"),
            "gpurig_nograph_busbw_gbps": busbw_gbps("allreduce", size, mean_over_ranks(ours_off["seconds"]), n),
        }
        if n == 2 and size in NCCL_TESTS_2XH200:
            row["nccl_tests_anchor_gbps"] = NCCL_TESTS_2XH200[size]
            row["gpurig_vs_nccl_tests"] = row["gpurig_busbw_gbps"] / NCCL_TESTS_2XH200[size]
            row["plain_vs_nccl_tests"] = row["plain_busbw_gbps"] / NCCL_TESTS_2XH200[size]
        row["gpurig_vs_plain"] = row["gpurig_busbw_gbps"] / row["plain_busbw_gbps"]
        rows.append(row)
    if ctx.rank == 0:
        import torch

        print(f"all-reduce float32 on {n} × {torch.cuda.get_device_name()} (torch {torch.__version__}, NCCL {ctx.record.get('nccl_version')})")
        print(f"{'size':>8} {'plain':>8} {'plain5':>8} {'gpurig':>8} {'nograph':>8} {'gr/plain':>8} {'nccl-t':>8} {'gr/nccl-t':>9} {'pl/nccl-t':>9}")
        for r in rows:
            print(f"{r['size']:>8} {r['plain_busbw_gbps']:8.1f} {r['plain_median5_busbw_gbps']:8.1f} {r['gpurig_busbw_gbps']:8.1f} "
                  f"{r['gpurig_nograph_busbw_gbps']:8.1f} {r['gpurig_vs_plain']:8.2f} {r.get('nccl_tests_anchor_gbps', float('nan')):8.1f} "
                  f"{r.get('gpurig_vs_nccl_tests', float('nan')):9.2f} {r.get('plain_vs_nccl_tests', float('nan')):9.2f}"
                  + ("" if r["gpurig_graph"] or r["bytes"] > (64 << 20) else f"  graph failed: {r['gpurig_graph_error']}"))
        (Path(args.out) / "comm_vs_plain.json").write_text(json.dumps({"nranks": n, "rows": rows}, indent=1))
    ctx.cpu_barrier("bench", "end")
    ctx.progress.close()
    dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/comm-vs-plain")
    parser.add_argument("--nproc", default="auto")
    args = parser.parse_args()
    if "RANK" in os.environ:
        worker(args)
        return 0
    from gpurig.launch.plan import plan_torchrun, resolve_device
    from gpurig.launch.runner import run_plan

    choice = resolve_device("cuda", args.nproc)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    plan = plan_torchrun([os.path.abspath(__file__), "--out", args.out], choice.nproc, "cuda", run_dir=args.out)
    result = run_plan(plan, timeout=900, echo=lambda line: print(line) if not line.startswith("gpurig-progress") else None)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
