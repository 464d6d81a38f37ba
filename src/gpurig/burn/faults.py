"""Faults `gpurig burn` can be told to inject, so tests prove each kind of failure is caught and named."""

from __future__ import annotations

from typing import Any

FAULT_ENV = "GPURIG_BURN_FAULT"


def parse_faults(text: str | None) -> list[dict[str, Any]]:
    """`flip:rank=1:dtype=fp32:iter=3,mem:rank=0` -> [{"kind": "flip", "rank": 1, ...}, ...]."""
    out = []
    for item in filter(None, (text or "").split(",")):
        kind, *fields = item.strip().split(":")
        if kind not in ("flip", "mem"):
            raise ValueError(f"{FAULT_ENV}: unknown fault {kind!r} (flip or mem)")
        fault: dict[str, Any] = {"kind": kind, "rank": 0, "dtype": "fp32", "iter": 1}
        for f in fields:
            key, _, value = f.partition("=")
            if key not in ("rank", "dtype", "iter"):
                raise ValueError(f"{FAULT_ENV}: unknown field {key!r} in {item!r}")
            fault[key] = value if key == "dtype" else int(value)
        out.append(fault)
    return out
