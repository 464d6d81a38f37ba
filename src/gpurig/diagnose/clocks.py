"""Judgements on a training run's GPU clocks: was the GPU the limit, or did it wait?

The training workers measure (`train/clocks.py`: SM clock, power, clock-event reasons per step);
these read the measurements, for the verdicts and for `gpurig bench train`.
"""

from __future__ import annotations

from typing import Any

from gpurig.diagnose.findings import Finding

# Why a GPU at its power limit runs slower, for the notes that name a clock (bench train, verdicts).
POWER_LIMIT_WHY = ("At a power limit the driver lowers the clock until the power fits: chips of one model hold "
                   "different clocks at the same power, and what communication draws comes out of the same budget.")

HOST_BOUND_POWER = 0.7  # at full clock and under this share of the power limit, a training GPU waits for the host
FULL_CLOCK = 0.99  # a mean SM clock at least this share of the maximum
CLOCK_SPREAD = 0.02  # in a training run, the slowest rank's GPU this much below the fastest's mean SM clock
POWER_CAPPED_SHARE = 0.20  # the slower GPU at its power limit this share of the timed steps or more


def waiting_for_host(c: dict) -> str:
    """A sentence for a run's `gpu_clock` whose slowest GPU held its full clock well under its power
    limit: a GPU that trains flat out reaches the limit (an H200, ResNet-50: ~690 W of 700), so one
    far under it idled inside each step, most likely waiting for the host. Empty where the readings
    do not say so."""
    clock, top = c.get("slowest_sm_clock_mhz"), c.get("sm_clock_max_mhz")
    power, limit = c.get("power_w"), c.get("power_limit_w")
    if not (clock and top and power and limit) or clock < FULL_CLOCK * top or power > HOST_BOUND_POWER * limit:
        return ""
    return (f"the GPUs were not the limit: they held their full {clock:,.0f} MHz and drew {power:.0f} W of their "
            f"{limit:.0f} W, so most likely they sat idle inside each step waiting for the host (Python, kernel "
            "launches, per-layer hooks such as FSDP's, host-device synchronisation)")


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def clock_paced(summary: dict[str, Any]) -> Finding | None:
    """Ranks whose GPUs held different SM clocks (the summary's `gpu_clock`, NVML during the timed
    steps): every step waits for the slowest, so its clock sets the pace of the whole run."""
    c = summary.get("gpu_clock") or {}
    slow, fast = _num(c.get("slowest_sm_clock_mhz")), _num(c.get("fastest_sm_clock_mhz"))
    if not slow or not fast or (summary.get("world_size") or 1) < 2 or slow >= fast * (1 - CLOCK_SPREAD):
        return None
    capped = _num(c.get("slowest_power_capped_fraction"))
    limit = _num(c.get("power_limit_w"))
    at_cap = capped is not None and capped >= POWER_CAPPED_SHARE
    detail = (f"GPU {c.get('slowest_gpu')} (rank {c.get('slowest_rank')}) averaged {slow:,.0f} MHz and GPU "
              f"{c.get('fastest_gpu')} (rank {c.get('fastest_rank')}) {fast:,.0f} MHz over the timed steps. The ranks "
              f"wait for each other every step, so the run goes at the slower GPU's pace: up to {1 - slow / fast:.1%} "
              "below what the faster GPU alone would do.")
    if at_cap:
        detail += (f" The slower GPU was at its power limit{f' ({limit:.0f} W)' if limit else ''} {capped:.0%} of "
                   f"the time. {POWER_LIMIT_WHY}")
    return Finding(
        id="clock-paced", severity="info", area="training",
        title=f"paced by the slowest GPU: {slow:,.0f} MHz against {fast:,.0f} MHz"
              + (" at the power limit" if at_cap else ""),
        detail=detail,
        fix=("check cooling and inlet temperature (a cooler chip needs less power for a clock) and that no GPU "
             "runs with a lowered power limit (`nvidia-smi -q -d POWER`); `gpurig bench train` compares the clocks "
             "with a 1-GPU run"),
        evidence={k: c.get(k) for k in ("slowest_gpu", "slowest_sm_clock_mhz", "fastest_gpu", "fastest_sm_clock_mhz",
                                         "slowest_power_capped_fraction", "power_limit_w")},
    )
