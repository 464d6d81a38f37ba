"""Doctor rules about the GPUs themselves: models, memory health, modes, clocks, other users."""

from __future__ import annotations

from collections import Counter

from gpurig.diagnose.findings import Finding
from gpurig.diagnose.rules_context import Context, gib, gpu_label, gpu_list

# Memory other processes may hold before it counts as "in use": the driver and a display server
# keep a few hundred MiB on some cards, so only more than this (and more than 5%) is judged.
MEMORY_IN_USE_MIB = 1024
MEMORY_IN_USE_FRACTION = 0.05

THERMAL_REASONS = {"sw_thermal", "hw_thermal", "hw_slowdown"}
POWER_BRAKE_REASONS = {"hw_power_brake"}
POWER_CAP_REASONS = {"sw_power_cap"}


def gpu_summary(ctx: Context) -> list[Finding]:
    if not ctx.gpus:
        return []
    groups = Counter((g.name or "unknown GPU", g.compute_capability, g.memory_total_mib) for g in ctx.gpus)
    parts = [f"{n} × {name}" + (f" (compute capability {cc}" if cc else " (") +
             (f", {gib(mem)})" if mem else ")") for (name, cc, mem), n in groups.items()]
    if len(ctx.gpus) == 1:
        parts = [parts[0].replace("1 × ", "", 1)]
    findings = [Finding(
        id="gpus-found", severity="ok", area="gpus",
        title=f"{len(ctx.gpus)} GPU{'s' if len(ctx.gpus) > 1 else ''}: " + ", ".join(parts).replace(" ()", ""),
        detail="Listed by " + (ctx.facts.driver.source or "the driver") + ".",
        fix="Nothing to do",
        evidence={"gpus": [{"index": g.index, "name": g.name, "compute_capability": g.compute_capability,
                            "memory_total_mib": g.memory_total_mib} for g in ctx.gpus]},
    )]
    names = {g.name for g in ctx.gpus if g.name}
    ccs = {g.compute_capability for g in ctx.gpus if g.compute_capability}
    mems = {g.memory_total_mib for g in ctx.gpus if g.memory_total_mib}
    if len(names) > 1 or len(ccs) > 1 or (mems and max(mems) > 1.1 * min(mems)):
        by_name: dict[str, list[int]] = {}
        for g in ctx.gpus:
            by_name.setdefault(g.name or "unknown", []).append(g.index)
        listing = "; ".join(f"{name}: GPU {', '.join(map(str, idx))}" for name, idx in by_name.items())
        biggest = max(by_name.items(), key=lambda kv: len(kv[1]))
        if len(biggest[1]) > 1:
            fix = (f"Train on identical GPUs only, e.g. `export CUDA_VISIBLE_DEVICES={','.join(map(str, biggest[1]))}` "
                   "(with `CUDA_DEVICE_ORDER=PCI_BUS_ID` so the numbers match nvidia-smi)")
        else:
            smallest = min((g for g in ctx.gpus if g.memory_total_mib), key=lambda g: g.memory_total_mib, default=None)
            fix = ("Use one model on every GPU for data-parallel training; until then size the per-GPU batch for "
                   + (f"the smallest memory (GPU {smallest.index}, {gib(smallest.memory_total_mib)})" if smallest
                      else "the smallest memory")
                   + " and expect the slowest GPU's speed on all of them")
        findings.append(Finding(
            id="mixed-gpu-models", severity="warn", area="gpus",
            title=f"Mixed GPU models ({len(by_name)} kinds): the slowest sets the pace",
            detail=(f"{listing}. Data-parallel training waits for the slowest GPU at every step, and the batch "
                    "must fit the smallest memory."),
            fix=fix,
            evidence={"by_model": by_name, "compute_capabilities": sorted(ccs),
                      "memory_total_mib": sorted(mems)},
        ))
    return findings


def memory_health(ctx: Context) -> list[Finding]:
    findings = []
    for g in ctx.gpus:
        label = gpu_label(g)
        ev = {"gpu": g.index, "ecc_enabled": g.ecc_enabled, "ecc_volatile_uncorrected": g.ecc_volatile_uncorrected,
              "ecc_aggregate_uncorrected": g.ecc_aggregate_uncorrected}
        if g.ecc_volatile_uncorrected:
            findings.append(Finding(
                id="ecc-uncorrected-errors", severity="error", area="gpus",
                title=f"{label}: {g.ecc_volatile_uncorrected} uncorrected ECC error(s) since the last reset",
                detail="Uncorrectable memory errors corrupt results or crash jobs (Xid 48/63/64 in dmesg).",
                fix=(f"Drain the GPU, then reset it: `sudo nvidia-smi -r -i {g.index}` (or reboot). If errors come "
                     "back, run `dcgmi diag -r 3` and ask the vendor to replace it"),
                evidence=ev,
            ))
        elif g.ecc_aggregate_uncorrected:
            findings.append(Finding(
                id="ecc-uncorrected-errors", severity="warn", area="gpus",
                title=f"{label}: {g.ecc_aggregate_uncorrected} uncorrected ECC error(s) over its lifetime",
                detail="None since the last reset, but the memory has failed before.",
                fix=f"Watch it: `nvidia-smi -q -d ECC -i {g.index}`; run `dcgmi diag -r 3` if errors grow",
                evidence=ev,
            ))
        ev_pages = {"gpu": g.index, "retired_pages": g.retired_pages, "retired_pages_pending": g.retired_pages_pending}
        if g.retired_pages_pending:
            findings.append(Finding(
                id="memory-pages-retired", severity="error", area="gpus",
                title=f"{label}: a memory page retirement is pending",
                detail="A page with errors is marked for retirement, which only takes effect after a GPU reset.",
                fix=f"Reset the GPU: `sudo nvidia-smi -r -i {g.index}` (or reboot)",
                evidence=ev_pages,
            ))
        elif g.retired_pages:
            findings.append(Finding(
                id="memory-pages-retired", severity="warn", area="gpus",
                title=f"{label}: {g.retired_pages} memory page(s) retired",
                detail="Retired pages are taken out of use; a growing count means the memory is failing.",
                fix=f"Watch `nvidia-smi -q -d PAGE_RETIREMENT -i {g.index}`; past 60 pages, ask the vendor to replace it",
                evidence=ev_pages,
            ))
        ev_rows = {"gpu": g.index, "remapped_rows_uncorrectable": g.remapped_rows_uncorrectable,
                   "remapped_rows_pending": g.remapped_rows_pending, "remapped_rows_failed": g.remapped_rows_failed}
        if g.remapped_rows_failed:
            findings.append(Finding(
                id="memory-rows-remapped", severity="error", area="gpus",
                title=f"{label}: memory row remapping failed",
                detail="The GPU ran out of spare rows to remap failing memory; it will keep producing errors.",
                fix="Take it out of service and ask the vendor to replace it (`nvidia-smi -q -d ROW_REMAPPER` shows the state)",
                evidence=ev_rows,
            ))
        elif g.remapped_rows_pending:
            findings.append(Finding(
                id="memory-rows-remapped", severity="error", area="gpus",
                title=f"{label}: a memory row remap is pending",
                detail="Rows with uncorrectable errors are remapped at the next GPU reset; until then they may fail again.",
                fix=f"Reset the GPU: `sudo nvidia-smi -r -i {g.index}` (or reboot)",
                evidence=ev_rows,
            ))
        elif g.remapped_rows_uncorrectable:
            findings.append(Finding(
                id="memory-rows-remapped", severity="warn", area="gpus",
                title=f"{label}: {g.remapped_rows_uncorrectable} memory row(s) remapped for uncorrectable errors",
                detail="Remapping worked, but the memory has had uncorrectable errors.",
                fix=f"Watch `nvidia-smi -q -d ROW_REMAPPER -i {g.index}`; if the count grows, run `dcgmi diag -r 3`",
                evidence=ev_rows,
            ))
    return findings


def modes(ctx: Context) -> list[Finding]:
    findings = []
    mig = [g for g in ctx.gpus if g.mig_enabled]
    if mig:
        findings.append(Finding(
            id="mig-enabled", severity="warn", area="gpus",
            title=f"MIG is enabled on {gpu_list(mig)}",
            detail=("A MIG GPU is split into instances, each a separate small device; NCCL cannot join MIG "
                    "instances, so data-parallel training across them does not work."),
            fix=" && ".join(f"sudo nvidia-smi -i {g.index} -mig 0" for g in mig)
                + " (stop the processes on it first; some GPUs need a reset or reboot after)",
            evidence={"mig_enabled": [g.index for g in mig]},
        ))
    prohibited = [g for g in ctx.gpus if (g.compute_mode or "").lower() == "prohibited"]
    exclusive = [g for g in ctx.gpus if (g.compute_mode or "").lower().startswith("exclusive")]
    if prohibited:
        findings.append(Finding(
            id="compute-mode-prohibited", severity="error", area="gpus",
            title=f"Compute mode is Prohibited on {gpu_list(prohibited)}",
            detail="No process may create a CUDA context on these GPUs.",
            fix=" && ".join(f"sudo nvidia-smi -i {g.index} -c DEFAULT" for g in prohibited),
            evidence={"compute_mode": {g.index: g.compute_mode for g in prohibited}},
        ))
    if exclusive:
        findings.append(Finding(
            id="compute-mode-exclusive", severity="warn", area="gpus",
            title=f"Exclusive compute mode on {gpu_list(exclusive)}",
            detail=("Only one process may use each GPU: a second one (a monitoring tool, an evaluation job, a "
                    "DataLoader worker touching CUDA) fails with \"all CUDA-capable devices are busy\"."),
            fix=" && ".join(f"sudo nvidia-smi -i {g.index} -c DEFAULT" for g in exclusive)
                + " (unless the cluster scheduler set it on purpose)",
            evidence={"compute_mode": {g.index: g.compute_mode for g in exclusive}},
        ))
    off = [g for g in ctx.gpus if g.persistence_mode is False]
    if off:
        findings.append(Finding(
            id="persistence-mode-off", severity="info", area="gpus",
            title=f"Persistence mode is off on {gpu_list(off)}",
            detail=("The driver tears the GPU state down when the last process exits, so every start pays "
                    "a second or more of initialisation."),
            fix="`sudo nvidia-smi -pm 1` (or enable the nvidia-persistenced service); in a container, on the host",
            evidence={"persistence_mode_off": [g.index for g in off]},
        ))
    return findings


def memory_in_use(ctx: Context) -> list[Finding]:
    findings = []
    for g in ctx.gpus:
        held = sum(p.used_memory_mib or 0 for p in g.processes)
        used = g.memory_used_mib
        total = g.memory_total_mib
        busy_by_count = used is not None and used > MEMORY_IN_USE_MIB and (
            total is None or used > MEMORY_IN_USE_FRACTION * total)
        if not g.processes and not busy_by_count:
            continue
        if g.processes and held <= MEMORY_IN_USE_MIB and not busy_by_count:
            continue  # a small context (a monitor, Xorg): not worth a warning
        procs = ", ".join(f"{p.name or '?'} (pid {p.pid}, {p.used_memory_mib or 0:.0f} MiB)" for p in g.processes)
        findings.append(Finding(
            id="gpu-memory-in-use", severity="warn", area="gpus",
            title=f"{gpu_label(g)}: {used or held:.0f} MiB of memory already in use"
                  + (f" of {total:.0f} MiB" if total else ""),
            detail=(f"Held by: {procs}." if procs else
                    "No process is listed (it may run in another container or PID namespace).")
                   + " Training gets less memory and shares the GPU's time.",
            fix=("Stop the other job (`nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv`, "
                 "then `kill <pid>`), or pick free GPUs with CUDA_VISIBLE_DEVICES"),
            evidence={"gpu": g.index, "memory_used_mib": used, "memory_total_mib": total,
                      "processes": [vars(p) for p in g.processes]},
        ))
    return findings


def throttling(ctx: Context) -> list[Finding]:
    findings = []
    for g in ctx.gpus:
        reasons = set(g.throttle_reasons or [])
        ev = {"gpu": g.index, "throttle_reasons": g.throttle_reasons, "temperature_c": g.temperature_c,
              "power_draw_w": g.power_draw_w, "power_limit_w": g.power_limit_w,
              "sm_clock_mhz": g.sm_clock_mhz, "sm_clock_max_mhz": g.sm_clock_max_mhz}
        thermal = sorted(reasons & THERMAL_REASONS)
        brake = sorted(reasons & POWER_BRAKE_REASONS)
        clocks = (f" SM clock {g.sm_clock_mhz} of {g.sm_clock_max_mhz} MHz."
                  if g.sm_clock_mhz is not None and g.sm_clock_max_mhz else "")
        temp = f" Temperature {g.temperature_c:.0f} °C." if g.temperature_c is not None else ""
        if thermal or brake:
            findings.append(Finding(
                id="gpu-throttled", severity="warn", area="gpus",
                title=f"{gpu_label(g)} is slowed down: {', '.join(thermal + brake)}",
                detail=("Thermal slowdown means it runs too hot (airflow, fans, dust, a hot room); a hardware power "
                        "brake comes from the power supply or the board." + temp + clocks),
                fix=(f"Check cooling and power: `nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER -i {g.index}`; "
                     "fix airflow or the PSU; in a data centre, report it to the operator"),
                evidence=ev,
            ))
        elif reasons & POWER_CAP_REASONS:
            limit = f" at its {g.power_limit_w:.0f} W limit" if g.power_limit_w else ""
            findings.append(Finding(
                id="gpu-power-capped", severity="info", area="gpus",
                title=f"{gpu_label(g)} is holding its clocks down to stay{limit}",
                detail="Normal under full load; a limit set below the card's default costs speed." + clocks,
                fix=f"Compare `nvidia-smi -q -d POWER -i {g.index}` (Current vs Default Power Limit); restore with "
                    f"`sudo nvidia-smi -i {g.index} -pl <default watts>`",
                evidence=ev,
            ))
    return findings


RULES = [gpu_summary, memory_health, modes, memory_in_use, throttling]
