"""Bandwidth arithmetic with the nccl-tests definitions (nccl-tests `doc/PERFORMANCE.md`).

`algbw = size / time`; `busbw = algbw × factor`, where the factor makes the figure comparable to
the hardware's link speed whatever the number of ranks: all-reduce 2(n-1)/n, all-gather,
reduce-scatter and all-to-all (n-1)/n, broadcast 1. `size` is the whole buffer in bytes: for
all-gather the gathered output, for reduce-scatter the input that is scattered. GB/s are 1e9 bytes/s.

    >>> round(busbw_gbps("allreduce", 1 << 30, 0.01, 8), 2)
    187.9
"""

from __future__ import annotations

import re

OPS = ("allreduce", "allgather", "reducescatter", "broadcast", "alltoall")
OP_ALIASES = {
    "all_reduce": "allreduce", "all-reduce": "allreduce", "ar": "allreduce",
    "all_gather": "allgather", "all-gather": "allgather", "ag": "allgather",
    "reduce_scatter": "reducescatter", "reduce-scatter": "reducescatter", "rs": "reducescatter",
    "bcast": "broadcast",
    "all_to_all": "alltoall", "all-to-all": "alltoall", "a2a": "alltoall",
}
DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2, "int32": 4, "float64": 8}
DTYPE_ALIASES = {"fp32": "float32", "float": "float32", "bf16": "bfloat16", "fp16": "float16",
                 "half": "float16", "int": "int32", "fp64": "float64", "double": "float64"}

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "ki": 1024, "kib": 1024, "m": 1000**2, "mb": 1000**2,
          "mi": 1024**2, "mib": 1024**2, "g": 1000**3, "gb": 1000**3, "gi": 1024**3, "gib": 1024**3}


def bus_factor(op: str, nranks: int) -> float:
    """nccl-tests' correction from algorithm bandwidth to bus bandwidth."""
    n = nranks
    if op == "allreduce":
        return 2 * (n - 1) / n
    if op in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    if op in ("broadcast", "reduce"):
        return 1.0
    raise ValueError(f"unknown op {op!r}")


def algbw_gbps(size_bytes: int, seconds: float) -> float:
    return size_bytes / seconds / 1e9


def busbw_gbps(op: str, size_bytes: int, seconds: float, nranks: int) -> float:
    return algbw_gbps(size_bytes, seconds) * bus_factor(op, nranks)


def parse_bytes(text: str | int, flag: str = "--min-bytes") -> int:
    """'1KiB', '64M', '1GiB', '4096' -> bytes (K/M/G are powers of 1000, Ki/Mi/Gi of 1024).

    Raises ValueError naming the flag; the command turns it into exit 2.
    """
    if isinstance(text, int):
        value = text
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
        unit = m.group(2).lower() if m else None
        if not m or unit not in _UNITS:
            raise ValueError(f"{flag} {text!r} is not a size (examples: 4096, 64KiB, 1MiB, 1GiB)")
        value = int(float(m.group(1)) * _UNITS[unit])
    if value < 1:
        raise ValueError(f"{flag} must be at least 1 byte, got {text!r}")
    return value


def size_sweep(min_bytes: int, max_bytes: int, factor: int = 4) -> list[int]:
    """min, min×factor, ... up to max (max itself included when the steps miss it)."""
    if min_bytes > max_bytes:
        raise ValueError(f"--min-bytes {min_bytes} is larger than --max-bytes {max_bytes}")
    sizes = []
    s = min_bytes
    while s <= max_bytes:
        sizes.append(s)
        s *= factor
    if sizes[-1] != max_bytes:
        sizes.append(max_bytes)
    return sizes


def element_count(op: str, size_bytes: int, elem_bytes: int, nranks: int) -> int:
    """Elements in the whole buffer, rounded down so that ops which split it get equal chunks."""
    count = max(1, size_bytes // elem_bytes)
    if op in ("allgather", "reducescatter", "alltoall"):
        count = max(nranks, count - count % nranks)
    return count


def human_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def normalise_op(name: str) -> str | None:
    key = name.strip().lower()
    key = OP_ALIASES.get(key, key)
    return key if key in OPS else None


def normalise_dtype(name: str) -> str | None:
    key = name.strip().lower()
    key = DTYPE_ALIASES.get(key, key)
    return key if key in DTYPES else None
