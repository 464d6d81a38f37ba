"""The worker behind `gpurig burn`: one process per GPU (torchrun), each screening its own GPU.

    python -m torch.distributed.run --nproc-per-node=2 -m gpurig.burn.worker --run-dir RUN --device cpu --seconds 10

Three parts, each written to `result-rank<R>.json` as soon as it is done (a crash keeps the rest):

- **compute**: sustained matrix products per dtype (bf16, fp16, tf32, fp32 on a GPU; fp32 and bf16
  on the CPU) on inputs from a fixed seed, the same on every rank. Every product's bits are summed
  on the device (an exact integer checksum: one flipped bit changes it) and compared with the first
  product's; afterwards the ranks compare their first checksums (the same GPU model must give the
  same bits). The rate is set beside a plain `torch.matmul` loop on the same inputs, measured first.
- **memory**: most of the free device memory written with patterns (zeros, ones, walking ones,
  address-in-address, seeded random) and read back by kernels on the device (`patterns.py`: one
  fused write and one fused read-and-count per word, no host copy); a word that reads back wrong
  is reported with its offset and pattern. Its rate is set beside a plain device-to-device copy.
- **transfers**: host-to-device and back, pinned and pageable, and a device copy (GPU only);
  between every pair of GPUs when there are several (rank 0 drives them, after every rank's
  memory test).

Faults for tests (`GPURIG_BURN_FAULT`, comma-separated): `flip:rank=1:dtype=fp32:iter=3` flips one
bit of one product; `mem:rank=0` corrupts one word after it was written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from gpurig.burn.faults import FAULT_ENV, parse_faults
from gpurig.burn.patterns import PATTERNS, PatternKernels

DTYPES_GPU = ("bf16", "fp16", "tf32", "fp32")
DTYPES_CPU = ("fp32", "bf16")
TORCH_DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}


class Burner:
    def __init__(self, args: argparse.Namespace) -> None:
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        local = int(os.environ.get("LOCAL_RANK", "0"))
        self.cuda = args.device == "cuda"
        if self.cuda:
            torch.cuda.set_device(local)
            self.dev = torch.device("cuda", local)
        else:
            self.dev = torch.device("cpu")
        dist.init_process_group("gloo")  # small host-side agreement only; the work never leaves the device
        self.run_dir = Path(args.run_dir)
        self.args = args
        self.faults = [f for f in parse_faults(os.environ.get(FAULT_ENV)) if f["rank"] == self.rank]
        props = torch.cuda.get_device_properties(self.dev) if self.cuda else None
        self.result: dict[str, Any] = {
            "rank": self.rank, "local_rank": local, "device": args.device,
            "device_name": props.name if props else "cpu",
            "uuid": str(getattr(props, "uuid", "")) or None if props else None,
            "compute": {}, "memory": None, "transfers": None, "errors": [],
        }

    # -- bookkeeping ----------------------------------------------------------------------------
    def save(self) -> None:
        path = self.run_dir / f"result-rank{self.rank}.json"
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(self.result, indent=1))
        os.replace(tmp, path)

    def say(self, part: str, **data: Any) -> None:
        print("gpurig-burn: " + json.dumps({"rank": self.rank, "part": part, **data}), flush=True)

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.dev)

    def fault(self, kind: str, **match: Any) -> bool:
        return any(f["kind"] == kind and all(f.get(k) == v for k, v in match.items()) for f in self.faults)

    # -- compute --------------------------------------------------------------------------------
    @staticmethod
    def checksum(c: torch.Tensor) -> torch.Tensor:
        """An exact integer sum of the product's bits, on the device (one flipped bit changes it)."""
        # The bits as 64-bit words, summed with wrap-around: a flipped bit changes the sum by 2^k
        # (mod 2^64), so it always shows; no conversion pass, half the elements of an int32 sum.
        return c.view(torch.int16).view(torch.int64).sum()

    def compute(self, name: str, seconds: float) -> dict[str, Any]:
        n = self.args.size
        dt = TORCH_DTYPE[name]
        if self.cuda:
            torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
            torch.backends.cudnn.allow_tf32 = name == "tf32"
        g = torch.Generator(device=self.dev).manual_seed(20261202)  # the same inputs on every rank
        a = torch.randn((n, n), generator=g, device=self.dev).to(dt)
        b = torch.randn((n, n), generator=g, device=self.dev).to(dt)
        c = torch.empty((n, n), device=self.dev, dtype=dt)
        flops = 2.0 * n ** 3

        def timed_loop(check: bool, budget: float, sums: list[torch.Tensor] | None = None) -> tuple[int, float]:
            iters, batch = 0, 4
            self.sync()
            t0 = time.perf_counter()
            while True:
                for _ in range(batch):
                    torch.matmul(a, b, out=c)
                    iters += 1
                    if check:
                        if self.fault("flip", dtype=name, iter=iters):
                            c.view(torch.int16)[0, 0] ^= 1  # one bit of one product, as a bad ALU would
                        sums.append(self.checksum(c))
                self.sync()
                elapsed = time.perf_counter() - t0
                if elapsed >= budget:
                    return iters, elapsed
                batch = min(batch * 2, 64)

        timed_loop(False, min(0.5, seconds * 0.1))  # warm up: kernels chosen, clocks up
        torch.matmul(a, b, out=c)
        reference = int(self.checksum(c))
        # The plain loop before and after the checked one, so both see the same clocks and heat.
        before_iters, before_s = timed_loop(False, max(0.25, seconds * 0.1))
        sums: list[torch.Tensor] = []
        iters, elapsed = timed_loop(True, seconds * 0.7, sums)
        after_iters, after_s = timed_loop(False, max(0.25, seconds * 0.1))
        plain_iters, plain_s = before_iters + after_iters, before_s + after_s
        values = torch.stack(sums).cpu().tolist()
        bad = [i + 1 for i, v in enumerate(values) if v != reference]
        out = {
            "size": n, "iterations": iters, "seconds": elapsed,
            "tflops": flops * iters / elapsed / 1e12, "plain_tflops": flops * plain_iters / plain_s / 1e12,
            "reference_checksum": reference, "mismatched_iterations": bad[:20], "mismatches": len(bad),
        }
        if bad:
            first = values[bad[0] - 1]
            out["difference"] = first - reference
        out["vs_plain"] = out["tflops"] / out["plain_tflops"] if out["plain_tflops"] else None
        return out  # a, b, c are freed here, before the next dtype's

    # -- memory ---------------------------------------------------------------------------------
    def memory(self, seconds: float) -> dict[str, Any]:
        if self.cuda:
            torch.cuda.empty_cache()  # the products' buffers back to the driver, so they count as free
            free, total = torch.cuda.mem_get_info(self.dev)
            target = int(free * self.args.mem_fraction)
            # Whole blocks of one size (one compiled kernel): 1 GiB on a big card, smaller on a small
            # one, so that what is left over stays under 2% and at least 90% of the free memory is tested.
            chunk_bytes = next(c for c in (1 << 30, 256 << 20, 64 << 20, 16 << 20) if c * 50 <= target or c == 16 << 20)
        else:
            free = total = None
            target = self.args.cpu_mem_mb << 20
            chunk_bytes = 4 << 20
        words = chunk_bytes // 4
        chunks: list[torch.Tensor] = []
        while (len(chunks) + 1) * chunk_bytes <= target:
            try:
                chunks.append(torch.empty(words, dtype=torch.int32, device=self.dev))
            except torch.OutOfMemoryError:
                break
        tested = len(chunks) * chunk_bytes
        if not chunks:
            return {"bytes_tested": 0, "free_bytes": free, "total_bytes": total, "passes": 0, "patterns": [],
                    "seconds": 0.0, "gbps": None, "copy_gbps": None, "vs_copy": None, "compiled": False, "errors": [],
                    "note": f"not one block of {chunk_bytes >> 20} MiB could be allocated: the memory was not tested"}
        kernels = PatternKernels(self.cuda)
        for warm in ("zeros", "random"):  # both kernels (plain and hashed) built before anything is timed
            row = kernels.params(warm, 0, 1, words, self.dev)[0]
            kernels.fill(chunks[0], row, warm)
            int(kernels.count_wrong(chunks[0], row, warm))
        # The plain rate to compare with: a device-to-device copy of one block (read + write), the
        # best of three.
        copy_gbps = None
        if len(chunks) >= 2:
            rates = []
            for _ in range(3):
                self.sync()
                t0 = time.perf_counter()
                for _ in range(4):
                    chunks[1].copy_(chunks[0])
                self.sync()
                rates.append(2 * chunk_bytes * 4 / (time.perf_counter() - t0) / 1e9)
            copy_gbps = max(rates)

        errors: list[dict[str, Any]] = []
        moved = 0
        passes = 0
        t0 = time.perf_counter()
        while passes == 0 or time.perf_counter() - t0 < seconds:
            for pattern in PATTERNS:
                params = kernels.params(pattern, passes, len(chunks), words, self.dev)
                for ch, p in zip(chunks, params, strict=True):
                    kernels.fill(ch, p, pattern)
                if pattern == "address" and self.fault("mem"):
                    chunks[0][12345] ^= 0x10  # one word goes bad after it was written
                # One fused read of every word against its regenerated value; one host sync per pattern.
                wrong = torch.stack([kernels.count_wrong(ch, p, pattern) for ch, p in zip(chunks, params, strict=True)]).tolist()
                for ci, count in enumerate(wrong):
                    if count:
                        found = kernels.locate(chunks[ci], params[ci], pattern)
                        where, got, want = found if found else (None, None, None)
                        errors.append({"pattern": pattern, "pass": passes + 1,
                                       "offset_bytes": None if where is None else (ci * words + where) * 4,
                                       "read": None if got is None else got & 0xFFFFFFFF,
                                       "expected": None if want is None else want & 0xFFFFFFFF,
                                       "words_wrong": int(count)})
                moved += 2 * tested
            passes += 1
        elapsed = time.perf_counter() - t0
        rate = moved / elapsed / 1e9 if elapsed else None
        del chunks
        if self.cuda:
            torch.cuda.empty_cache()  # back to the driver: the peer copies of the other ranks need it
        return {"bytes_tested": tested, "free_bytes": free, "total_bytes": total, "passes": passes,
                "patterns": list(PATTERNS), "seconds": elapsed, "gbps": rate, "copy_gbps": copy_gbps,
                "vs_copy": rate / copy_gbps if (rate and copy_gbps) else None, "compiled": kernels.compiled,
                "errors": errors[:20]}

    # -- transfers ------------------------------------------------------------------------------
    def transfers(self) -> dict[str, Any] | None:
        """Pinned host<->device copies (one way, both at once) and a device copy, as `gpurig bench
        comm` measures them, plus pageable copies (what a plain `tensor.cuda()` moves)."""
        if not self.cuda:
            return None
        from gpurig.probe.bandwidth import memory_bandwidth

        nbytes = 256 << 20
        # Twice, keeping each figure's better run: one H200 once read 27 GB/s host-to-device in one
        # run and 55 GB/s in the next (the link is only judged slow when it is slow both times).
        runs = [memory_bandwidth(self.dev, nbytes, 1 << 30) for _ in range(2)]
        out: dict[str, Any] = dict(runs[0])
        for key in [k for k in out if k.endswith("_gbps")]:
            out[key] = max(r[key] for r in runs)
            out[f"{key.removesuffix('_gbps')}_runs_gbps"] = [r[key] for r in runs]
        dev_buf = torch.empty(nbytes, dtype=torch.uint8, device=self.dev)
        host = torch.empty(nbytes, dtype=torch.uint8)
        for direction in ("h2d", "d2h"):
            self.sync()
            t0 = time.perf_counter()
            for _ in range(4):
                if direction == "h2d":
                    dev_buf.copy_(host)
                else:
                    host.copy_(dev_buf)
            self.sync()
            out[f"{direction}_pageable_gbps"] = 4 * nbytes / (time.perf_counter() - t0) / 1e9
        del dev_buf, host
        torch.cuda.empty_cache()
        return out

    def peers(self) -> dict[str, Any] | None:
        """Rank 0 copies between every pair of this node's GPUs (the others wait on the CPU, their
        memory already freed), as `gpurig bench comm` does."""
        if not self.cuda or self.world < 2 or self.world != torch.cuda.device_count():
            return None
        from gpurig.probe.bandwidth import p2p_matrix

        dist.barrier()  # every rank's memory test has given its memory back
        out = p2p_matrix(self.world, 256 << 20) if self.rank == 0 else None
        dist.barrier()
        return out

    # -- the run --------------------------------------------------------------------------------
    def run(self) -> None:
        a = self.args
        dtypes = [d for d in a.dtypes.split(",") if d] or list(DTYPES_GPU if self.cuda else DTYPES_CPU)
        per = a.seconds * 0.6 / len(dtypes)
        for name in dtypes:
            self.result["compute"][name] = self.compute(name, per)
            c = self.result["compute"][name]
            self.say("compute", dtype=name, tflops=c["tflops"], vs_plain=c["vs_plain"], mismatches=c["mismatches"])
            self.save()
        # Every rank ran the same product on the same inputs: the same GPU model gives the same bits.
        mine = {n: self.result["compute"][n]["reference_checksum"] for n in dtypes}
        everyone: list[Any] = [None] * self.world
        dist.all_gather_object(everyone, {"name": self.result["device_name"], "sums": mine})
        self.result["peers"] = everyone
        self.save()
        self.result["memory"] = self.memory(a.seconds * 0.3)
        m = self.result["memory"]
        self.say("memory", gbps=m["gbps"], vs_copy=m["vs_copy"], bytes=m["bytes_tested"], errors=len(m["errors"]))
        self.save()
        # One GPU at a time: GPUs behind one PCIe switch share its uplink, and measured together each
        # would read about half its own link.
        for turn in range(self.world):
            dist.barrier()
            if turn == self.rank:
                self.result["transfers"] = self.transfers()
        self.say("transfers", **{k: v for k, v in (self.result["transfers"] or {}).items() if k.endswith("_gbps")})
        self.save()
        self.result["p2p"] = self.peers()
        if self.result["p2p"]:
            self.say("p2p", pairs=len(self.result["p2p"]["pairs"]))
        self.result["done"] = True
        self.save()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpurig.burn.worker", description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--seconds", type=float, default=180.0, help="the whole screen's length on this GPU")
    ap.add_argument("--size", type=int, default=8192, help="matrix side for the products")
    ap.add_argument("--dtypes", default="", help="comma-separated; default every dtype the device has")
    ap.add_argument("--mem-fraction", type=float, default=0.92,
                    help="share of the free GPU memory to allocate (whole 1 GiB chunks: at least 90%% is tested)")
    ap.add_argument("--cpu-mem-mb", type=int, default=64, help="memory to test on the CPU")
    args = ap.parse_args(argv)
    if args.size % 4:
        ap.error("--size must be a multiple of 4 (the checksum reads the product as 64-bit words)")
    burner = Burner(args)
    try:
        burner.run()
    finally:
        burner.save()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
