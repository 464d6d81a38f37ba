"""The checks of `gpurig verify`, run inside every torchrun worker (imports torch).

Each check returns `{"status": "pass"|"fail"|"n/a", "detail": str}` for this rank; the parent
merges the ranks. Every collective goes through `Context.collective`, so a hang names itself.
"""

from __future__ import annotations

import sys
import time
import zlib
from typing import Any

import torch
import torch.distributed as dist

from gpurig.comm.inject import find

# Elements per case. On the CPU (gloo on a couple of cores) the largest is 1 MB of float32.
CPU_SIZES = (1, 3, 1001, 65537, 262147)
QUICK_GPU_SIZES = (1, 3, 1001, 1_000_003, 16_777_259)
FULL_GPU_SIZES = (1, 3, 1001, 1_000_003, 16_777_259, 100_000_007)  # the last: 400 MB in float32
DTYPES = (torch.float32, torch.bfloat16, torch.int32)

# torch 2.14 renamed the tensor forms of all-gather and reduce-scatter; older releases have only the
# old names. Use whichever this torch has, without its deprecation warning.
all_gather_tensor = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_tensor = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

# DDP check: the stated tolerance between N-rank DDP and one process on the whole batch. The two
# differ only in summation order (float32), which moves parameters by ~1e-7 over a few steps.
DDP_STEPS = 5
DDP_ATOL = 1e-5
DDP_RTOL = 1e-4


def _sizes(ctx) -> tuple[int, ...]:
    if not ctx.is_cuda:
        return CPU_SIZES
    return FULL_GPU_SIZES if ctx.profile == "full" else QUICK_GPU_SIZES


def _bound(dtype: torch.dtype, world_size: int) -> int:
    """Largest |value| such that every partial sum over the ranks is an exact integer in `dtype`."""
    if dtype == torch.bfloat16:
        return max(1, 256 // world_size)  # bf16 holds every integer up to 256 exactly
    if dtype == torch.float16:
        return max(1, 2048 // world_size)
    return 1000


def _case_seed(*parts: Any) -> int:
    return zlib.crc32(repr(parts).encode()) & 0x7FFFFFFF


def _gen(ctx, n: int, dtype: torch.dtype, src_rank: int, case: Any) -> torch.Tensor:
    """The tensor rank `src_rank` contributes to `case`: every rank can compute it for itself."""
    g = torch.Generator(device=ctx.device)
    g.manual_seed(_case_seed(case, src_rank))
    m = _bound(dtype, ctx.world_size)
    return torch.randint(-m, m + 1, (n,), generator=g, device=ctx.device, dtype=torch.int64).to(dtype)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _compare(got: torch.Tensor, expected: torch.Tensor, label: str) -> str | None:
    """None when equal bit for bit; otherwise a sentence naming how many and the first wrong element."""
    if got.shape != expected.shape:
        return f"{label}: shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    wrong = got != expected
    count = int(wrong.sum().item())
    if count == 0:
        return None
    first = int(wrong.nonzero()[0].item())
    g = got[first].item()
    e = expected[first].item()
    return f"{label}: {count} of {got.numel()} elements wrong (first at index {first}: got {g:g}, expected {e:g})"


def _maybe_perturb(ctx, op: str, out: torch.Tensor) -> None:
    fault = find(ctx.faults, "perturb", ctx.rank, op)
    if fault is not None:
        fault.fired = True
        out.view(-1)[out.numel() // 2] += 1
        print(f"injected fault: rank {ctx.rank} perturbed the result of {op}", file=sys.stderr, flush=True)


def check_collectives(ctx) -> dict[str, Any]:
    """all-reduce (sum, max), all-gather, reduce-scatter, broadcast and all-to-all, exact."""
    ws, rank = ctx.world_size, ctx.rank
    problems: list[str] = []
    cases = 0
    largest = 0
    for dtype in DTYPES:
        dname = _dtype_name(dtype)
        for n in _sizes(ctx):
            largest = max(largest, n * torch.empty((), dtype=dtype).element_size())
            label = f"{dname} × {n}"
            # all-reduce, sum and max: every rank computes the reduction of all contributions itself.
            for opname, op, reduce in (("all_reduce_sum", dist.ReduceOp.SUM, "sum"), ("all_reduce_max", dist.ReduceOp.MAX, "max")):
                case = (opname, dname, n)
                x = _gen(ctx, n, dtype, rank, case)
                ctx.collective("collectives", opname, label, lambda x=x, op=op: dist.all_reduce(x, op=op))
                _maybe_perturb(ctx, opname, x)
                # Reduced one rank at a time, so 400 MB messages on 8 GPUs need no 8× scratch.
                acc = _gen(ctx, n, dtype, 0, case).to(torch.int64)
                for r in range(1, ws):
                    part = _gen(ctx, n, dtype, r, case).to(torch.int64)
                    acc = acc + part if reduce == "sum" else torch.maximum(acc, part)
                expected = acc.to(dtype)
                del acc
                problems.append(_compare(x, expected, f"{opname.replace('_sum', '(sum)').replace('_max', '(max)')} {label}"))
                cases += 1
            # all-gather: n elements from each rank (n need not divide by anything).
            case = ("all_gather", dname, n)
            x = _gen(ctx, n, dtype, rank, case)
            out = torch.empty(n * ws, dtype=dtype, device=ctx.device)
            ctx.collective("collectives", "all_gather", label, lambda x=x, out=out: all_gather_tensor(out, x))
            _maybe_perturb(ctx, "all_gather", out)
            expected = torch.cat([_gen(ctx, n, dtype, r, case) for r in range(ws)])
            problems.append(_compare(out, expected, f"all_gather {label}"))
            # reduce-scatter: each rank keeps the sum of its own odd-sized chunk.
            case = ("reduce_scatter", dname, n)
            x = _gen(ctx, n * ws, dtype, rank, case)
            out = torch.empty(n, dtype=dtype, device=ctx.device)
            ctx.collective("collectives", "reduce_scatter", label, lambda x=x, out=out: reduce_scatter_tensor(out, x))
            _maybe_perturb(ctx, "reduce_scatter", out)
            expected = sum(_gen(ctx, n * ws, dtype, r, case)[rank * n:(rank + 1) * n].to(torch.int64) for r in range(ws)).to(dtype)
            problems.append(_compare(out, expected, f"reduce_scatter {label}"))
            # broadcast from the last rank, so a root other than 0 is exercised.
            case = ("broadcast", dname, n)
            root = ws - 1
            x = _gen(ctx, n, dtype, rank, case) if rank == root else torch.zeros(n, dtype=dtype, device=ctx.device)
            ctx.collective("collectives", "broadcast", label, lambda x=x, root=root: dist.broadcast(x, src=root))
            _maybe_perturb(ctx, "broadcast", x)
            problems.append(_compare(x, _gen(ctx, n, dtype, root, case), f"broadcast {label}"))
            # all-to-all with uneven splits: rank r sends split(r, j) elements to rank j.
            case = ("all_to_all", dname, n)
            base = max(1, n // ws)

            def split(src: int, dst: int, base: int = base) -> int:
                return base + src + 2 * dst

            send_sizes = [split(rank, j) for j in range(ws)]
            recv_sizes = [split(j, rank) for j in range(ws)]
            x = _gen(ctx, sum(send_sizes), dtype, rank, case)
            out = torch.empty(sum(recv_sizes), dtype=dtype, device=ctx.device)
            ctx.collective(
                "collectives", "all_to_all", f"{label}, uneven splits",
                lambda x=x, out=out, s=send_sizes, r=recv_sizes: dist.all_to_all_single(out, x, output_split_sizes=r, input_split_sizes=s),
            )
            _maybe_perturb(ctx, "all_to_all", out)
            pieces = []
            for j in range(ws):
                theirs = _gen(ctx, sum(split(j, k) for k in range(ws)), dtype, j, case)
                offset = sum(split(j, k) for k in range(rank))
                pieces.append(theirs[offset:offset + split(j, rank)])
            problems.append(_compare(out, torch.cat(pieces), f"all_to_all {label}"))
            cases += 4
            del x, out, expected, pieces
    if ctx.is_cuda:
        torch.cuda.empty_cache()
    problems = [p for p in problems if p]
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        return {"status": "fail", "detail": "; ".join(problems[:3]) + more}
    sizes = _sizes(ctx)
    return {
        "status": "pass",
        "detail": f"{cases} cases exact: 6 ops × float32/bfloat16/int32 × {len(sizes)} sizes "
        f"({sizes[0]} to {sizes[-1]:,} elements, up to {largest / 1e6:.0f} MB; odd sizes, uneven all-to-all)",
    }


def _checksum(t: torch.Tensor, chunk: int = 16 << 20) -> tuple[int, int]:
    """Two sums over the bytes, the second weighted by position, computed on the tensor's own device.

    In chunks, so a 256 MiB buffer needs a few hundred MB of scratch rather than 6 GB.
    """
    plain = weighted = 0
    for start in range(0, t.numel(), chunk):
        part = t[start:start + chunk].to(torch.int64)
        weights = torch.arange(start, start + part.numel(), device=t.device, dtype=torch.int64) % 65521 + 1
        plain += int(part.sum().item())
        weighted += int((part * weights).sum().item())
    return plain, weighted


P2P_SIZES = (1001, 1 << 20, 64 << 20, 256 << 20)


def check_p2p(ctx) -> dict[str, Any]:
    """Copy random bytes from this rank's GPU to every other rank's GPU; compare checksums on both."""
    if not ctx.is_cuda:
        return {"status": "n/a", "detail": "n/a on CPU: peer-to-peer copies are between GPUs"}
    ws, rank = ctx.world_size, ctx.rank
    if ws < 2:
        return {"status": "n/a", "detail": "one GPU: no pair to copy between"}
    problems: list[str] = []
    speeds: dict[str, float] = {}
    # (a) Copies inside one process (cudaMemcpyPeer), one source rank at a time so the timings are clean.
    for src in range(ws):
        if src == rank:
            for dst in range(ws):
                if dst == src:
                    continue
                dst_dev = torch.device("cuda", dst)
                for size in P2P_SIZES:
                    g = torch.Generator(device=ctx.device)
                    g.manual_seed(_case_seed("p2p", src, dst, size))
                    data = torch.randint(0, 256, (size,), generator=g, device=ctx.device, dtype=torch.uint8)
                    torch.cuda.synchronize(ctx.device)
                    # A peer copy can hang outright on a broken P2P path: watch it like a collective.
                    with ctx.progress.local("p2p", "peer_copy", f"GPU {src} → GPU {dst}, {size:,} bytes"):
                        t0 = time.perf_counter()
                        copy = data.to(dst_dev)
                        torch.cuda.synchronize(dst_dev)
                        seconds = time.perf_counter() - t0
                    fault = find(ctx.faults, "p2p-corrupt", rank)
                    if fault is not None:
                        fault.fired = True
                        copy[size // 3] ^= 1
                    a, b = _checksum(data), _checksum(copy)
                    if a != b:
                        problems.append(f"GPU {src} → GPU {dst}, {size:,} bytes: checksums differ (source {a[1]:#x}, destination {b[1]:#x})")
                    if size == P2P_SIZES[-1]:
                        speeds[f"{src}->{dst}"] = size / seconds / 1e9
                    del data, copy
        ctx.cpu_barrier("p2p", f"after copies from GPU {src}")
    # (b) NCCL send/recv between every ordered pair of ranks: every rank takes the step, two act.
    for src in range(ws):
        for dst in range(ws):
            if src == dst:
                continue
            n = 1_000_003
            case = ("sendrecv", src, dst)
            fn = None
            buf = None
            if rank == src:
                buf = _gen(ctx, n, torch.float32, src, case)
                fn = lambda buf=buf, dst=dst: dist.send(buf, dst)  # noqa: E731
            elif rank == dst:
                buf = torch.empty(n, dtype=torch.float32, device=ctx.device)
                fn = lambda buf=buf, src=src: dist.recv(buf, src)  # noqa: E731
            ctx.collective("p2p", "send_recv", f"rank {src} → rank {dst}", fn)
            if rank == dst:
                bad = _compare(buf, _gen(ctx, n, torch.float32, src, case), f"NCCL send rank {src} → rank {dst}")
                if bad:
                    problems.append(bad)
    # Slow pairs are reported (bench comm measures them properly); only corruption fails the check.
    speed_text = ", ".join(f"GPU {k.replace('->', '→')} {v:.0f} GB/s" for k, v in speeds.items())
    if problems:
        return {"status": "fail", "detail": "; ".join(problems[:3]), "speeds_gbps": speeds}
    return {
        "status": "pass",
        "detail": f"copies of {len(P2P_SIZES)} sizes up to {P2P_SIZES[-1] >> 20} MiB exact from GPU {rank} "
        f"to every peer ({speed_text or 'no timing'}); NCCL send/recv exact between every ordered rank pair",
        "speeds_gbps": speeds,
    }


def _ddp_model(ctx) -> torch.nn.Module:
    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    return model.to(ctx.device)


def _ddp_batch(ctx, step: int, per_rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cpu")
    g.manual_seed(_case_seed("ddp", step))
    x = torch.randn(per_rank * ctx.world_size, 16, generator=g)
    y = torch.randn(per_rank * ctx.world_size, 4, generator=g)
    return x.to(ctx.device), y.to(ctx.device)


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _gather_replicas(ctx, model: torch.nn.Module, what: str) -> torch.Tensor:
    mine = _flat(model).contiguous()
    out = torch.empty(ctx.world_size * mine.numel(), dtype=mine.dtype, device=ctx.device)
    ctx.collective("ddp", "all_gather", what, lambda: all_gather_tensor(out, mine))
    return out.view(ctx.world_size, -1)


def _replica_problem(ctx, replicas: torch.Tensor, when: str) -> str | None:
    differing = [r for r in range(ctx.world_size) if not torch.equal(replicas[r], replicas[0])]
    if not differing:
        return None
    worst = max(float((replicas[r] - replicas[0]).abs().max()) for r in differing)
    return f"replicas {when} are not identical: rank(s) {', '.join(map(str, differing))} differ bit-wise from rank 0 (max |Δ| {worst:.3g})"


def check_ddp(ctx) -> dict[str, Any]:
    """K DDP steps on N ranks equal one process on the whole batch; replicas identical; Join finishes."""
    from torch.distributed.algorithms.join import Join
    from torch.nn.parallel import DistributedDataParallel as DDP

    if ctx.is_cuda:
        # TF32 would change the one-process reference differently from the shards; compare in true fp32.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    per_rank = 8
    problems: list[str] = []
    device_ids = [ctx.local_rank] if ctx.is_cuda else None
    ddp = DDP(_ddp_model(ctx), device_ids=device_ids)
    reference = _ddp_model(ctx)  # the same model, trained in this process alone on the whole batch
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    loss_fn = torch.nn.MSELoss()
    for step in range(DDP_STEPS):
        x, y = _ddp_batch(ctx, step, per_rank)
        shard = slice(ctx.rank * per_rank, (ctx.rank + 1) * per_rank)
        opt.zero_grad(set_to_none=True)

        def step_fn(x=x, y=y, shard=shard):
            loss_fn(ddp(x[shard]), y[shard]).backward()  # DDP averages the gradients across ranks here

        ctx.collective("ddp", "ddp_backward", f"step {step + 1} of {DDP_STEPS}", step_fn)
        fault = find(ctx.faults, "ddp-grad", ctx.rank)
        if fault is not None:
            fault.fired = True
            next(ddp.parameters()).grad.view(-1)[0] += 0.01
            print(f"injected fault: rank {ctx.rank} altered a gradient after DDP's all-reduce", file=sys.stderr, flush=True)
        opt.step()
        ref_opt.zero_grad(set_to_none=True)
        loss_fn(reference(x), y).backward()
        ref_opt.step()
    mine, ref = _flat(ddp.module), _flat(reference)
    deviation = float((mine - ref).abs().max())
    if not torch.allclose(mine, ref, atol=DDP_ATOL, rtol=DDP_RTOL):
        problems.append(
            f"after {DDP_STEPS} steps rank {ctx.rank}'s replica differs from one process trained on the whole batch "
            f"by max |Δ| {deviation:.3g} (tolerance atol {DDP_ATOL:g} + rtol {DDP_RTOL:g})"
        )
    bad = _replica_problem(ctx, _gather_replicas(ctx, ddp.module, "replicas after DDP steps"), f"after {DDP_STEPS} steps")
    if bad:
        problems.append(bad)
    # Uneven inputs: rank r has DDP_STEPS + r batches. Without Join the longest rank would wait for
    # an all-reduce nobody joins; with it, finished ranks shadow the collectives and all return.
    joined = DDP(_ddp_model(ctx), device_ids=device_ids)
    join_opt = torch.optim.SGD(joined.parameters(), lr=0.05)
    my_steps = DDP_STEPS + ctx.rank

    def uneven() -> None:
        with Join([joined]):
            for step in range(my_steps):
                x, y = _ddp_batch(ctx, 100 + step, per_rank)
                shard = slice(ctx.rank * per_rank, (ctx.rank + 1) * per_rank)
                join_opt.zero_grad(set_to_none=True)
                loss_fn(joined(x[shard]), y[shard]).backward()
                join_opt.step()

    ctx.collective("ddp", "join_uneven_inputs", f"{DDP_STEPS} to {DDP_STEPS + ctx.world_size - 1} batches per rank", uneven)
    bad = _replica_problem(ctx, _gather_replicas(ctx, joined.module, "replicas after Join"), "after uneven inputs under Join")
    if bad:
        problems.append(bad)
    if problems:
        return {"status": "fail", "detail": "; ".join(problems), "max_deviation": deviation}
    return {
        "status": "pass",
        "detail": f"{DDP_STEPS} DDP steps on {ctx.world_size} rank(s) match one process on the whole batch "
        f"(max |Δ| {deviation:.2g}, tolerance atol {DDP_ATOL:g} + rtol {DDP_RTOL:g}); replicas bit-identical; "
        f"uneven inputs ({DDP_STEPS}..{DDP_STEPS + ctx.world_size - 1} batches) finished under Join, replicas identical",
        "max_deviation": deviation,
    }
