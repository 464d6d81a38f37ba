"""Judgements on a training run's GPU clocks: was the GPU the limit, or did it wait?

The training workers measure (`train/clocks.py`: SM clock, power, clock-event reasons per step);
these read the measurements, for the verdicts and for `gpurig bench train`.
"""

from __future__ import annotations

# Why a GPU at its power limit runs slower, for the notes that name a clock (bench train, verdicts).
POWER_LIMIT_WHY = ("At a power limit the driver lowers the clock until the power fits: chips of one model hold "
                   "different clocks at the same power, and what communication draws comes out of the same budget.")

HOST_BOUND_POWER = 0.7  # at full clock and under this share of the power limit, a training GPU waits for the host
FULL_CLOCK = 0.99  # a mean SM clock at least this share of the maximum


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
