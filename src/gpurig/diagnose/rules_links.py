"""Doctor rules about how the GPUs talk: NVLink, the NVSwitch fabric, PCIe links, peer access."""

from __future__ import annotations

import re
from collections import Counter

from gpurig.diagnose.findings import Finding
from gpurig.diagnose.rules_context import Context, gpu_label, gpu_list, is_nvlink_pair, valid_cc
from gpurig.knowledge import link_speeds as kls
from gpurig.probe.facts import GpuFacts

# A GPU counts as busy (so a low PCIe generation is not idle power saving) above this utilisation.
BUSY_UTILIZATION_PCT = 20.0
# An active NVLink this much slower than the fastest of its kind is reported.
SLOW_LINK_RATIO = 0.9


def fabric_manager(ctx: Context) -> list[Finding]:
    s = ctx.facts.system
    if not s.nvswitch_count:
        return []
    ev = {"system.nvswitch_count": s.nvswitch_count, "system.fabric_manager_running": s.fabric_manager_running,
          "system.container": s.container}
    branch = ctx.driver_version.split(".")[0] if ctx.driver_version else "<driver branch, e.g. 580>"
    if s.fabric_manager_running is False:
        inactive = {g.index: sum(1 for nl in g.nvlinks if nl.active is False) for g in ctx.gpus if g.nvlinks}
        ports = {g.index: len(g.nvlinks) for g in ctx.gpus if g.nvlinks}
        if inactive and len(set(inactive.values())) == 1 and inactive == ports:
            down = f" All {next(iter(ports.values()))} NVLinks of every GPU are inactive."
        elif inactive:
            down = " Inactive NVLinks per GPU: " + ", ".join(f"GPU {i}: {n}" for i, n in inactive.items()) + "."
        else:
            down = ""
        return [Finding(
            id="nvswitch-no-fabric-manager", severity="error", area="links",
            title=f"NVSwitch system ({s.nvswitch_count} switches) without a running fabric manager",
            detail=("On NVSwitch boards (HGX/DGX) the fabric manager sets up the NVLink fabric; without it CUDA "
                    "fails to start (\"system not yet initialized\", error 802) and NVLinks stay down." + down),
            fix=(f"Install the fabric manager of exactly the driver's version and start it: "
                 f"`sudo apt install nvidia-fabricmanager-{branch}`, then "
                 "`sudo systemctl enable --now nvidia-fabricmanager` and check `systemctl status nvidia-fabricmanager`"),
            evidence={**ev, "inactive_nvlinks": inactive},
        )]
    if s.fabric_manager_running is None:
        return [Finding(
            id="fabric-manager-unknown", severity="info", area="links",
            title=f"NVSwitch system ({s.nvswitch_count} switches): could not tell whether the fabric manager runs",
            detail=("Inside a container the host's services are invisible. Without the fabric manager, CUDA "
                    "fails with error 802 (\"system not yet initialized\")."),
            fix="On the host: `systemctl status nvidia-fabricmanager` (start it with `sudo systemctl enable --now nvidia-fabricmanager`)",
            evidence=ev,
        )]
    return [Finding(
        id="fabric-manager-ok", severity="ok", area="links",
        title=f"NVSwitch fabric ({s.nvswitch_count} switches) with the fabric manager running",
        detail="The NVLink fabric is managed.", fix="Nothing to do", evidence=ev,
    )]


def _by_model(gpus: list[GpuFacts]) -> dict[str, list[GpuFacts]]:
    out: dict[str, list[GpuFacts]] = {}
    for g in gpus:
        out.setdefault(g.name or "unknown", []).append(g)
    return out


def nvlinks(ctx: Context) -> list[Finding]:
    if ctx.nvswitch_without_fabric_manager:
        return []  # the links are down because of it: said once, by fabric_manager()
    with_links = [g for g in ctx.gpus if g.nvlinks and any(nl.active is not None for nl in g.nvlinks)]
    if not with_links:
        return []
    findings = []
    active = {g.index: sum(1 for nl in g.nvlinks if nl.active) for g in with_links}
    if all(n == 0 for n in active.values()):
        return [Finding(
            id="nvlink-inactive", severity="info", area="links",
            title=f"{gpu_list(with_links)} have NVLink ports but none is connected",
            detail="GPU-to-GPU traffic goes over PCIe. That is expected for PCIe cards without an NVLink bridge.",
            fix="If a bridge is fitted, power off and reseat it; check with `nvidia-smi nvlink -s`",
            evidence={"nvlink_ports": {g.index: len(g.nvlinks) for g in with_links}},
        )]
    for name, gpus in _by_model(with_links).items():
        best = max(active[g.index] for g in gpus)
        short = [g for g in gpus if active[g.index] < best]
        for g in short:
            down = [nl.link for nl in g.nvlinks if nl.active is False]
            findings.append(Finding(
                id="nvlink-links-down", severity="warn", area="links",
                title=f"{gpu_label(g)}: {active[g.index]} NVLinks active, other {name} GPUs have {best}",
                detail=(f"Links down: {down or 'state unknown'}. Collectives through this GPU run slower, and "
                        "every ring passes through it."),
                fix=(f"`nvidia-smi nvlink -s -i {g.index}` and `nvidia-smi nvlink -e -i {g.index}` (error counters); "
                     f"reset the GPU (`sudo nvidia-smi -r -i {g.index}`) or reboot; if links stay down, reseat the "
                     "bridge or call the vendor"),
                evidence={"gpu": g.index, "active_links": active[g.index], "best_active_links": best,
                          "down_links": down},
            ))
        speeds = [nl.speed_gbps for g in gpus for nl in g.nvlinks if nl.active and nl.speed_gbps]
        if speeds:
            top = max(speeds)
            for g in gpus:
                slow = [(nl.link, nl.speed_gbps) for nl in g.nvlinks
                        if nl.active and nl.speed_gbps and nl.speed_gbps < SLOW_LINK_RATIO * top]
                if slow:
                    findings.append(Finding(
                        id="nvlink-slow-links", severity="warn", area="links",
                        title=f"{gpu_label(g)}: {len(slow)} NVLink(s) run below {top:g} GB/s",
                        detail=f"Link speeds (GB/s): {dict(slow)}; the other links of this model run at {top:g} GB/s.",
                        fix=f"`nvidia-smi nvlink -s -i {g.index}`; reset the GPU or reboot, then call the vendor",
                        evidence={"gpu": g.index, "slow_links": dict(slow), "top_speed_gbps": top},
                    ))
    if findings:
        return findings
    return _nvlink_ok(ctx, with_links, active)


def _nvlink_ok(ctx: Context, with_links: list[GpuFacts], active: dict[int, int]) -> list[Finding]:
    pairs = [p for p in ctx.facts.pairs if is_nvlink_pair(p.link, p.nvlink_count)]
    g0 = with_links[0]
    cc = valid_cc(g0.compute_capability)
    per_link = kls.nvlink_per_link_gbps(cc) if cc else None
    reported = next((nl.speed_gbps for nl in g0.nvlinks if nl.active and nl.speed_gbps), None)
    links_each = active[g0.index]
    switch = bool(ctx.facts.system.nvswitch_count) or any(
        nl.remote_device_type == "switch" for g in with_links for nl in g.nvlinks)
    rate = ""
    if per_link:
        rate = f", {per_link:g} GB/s per link each way"
    elif reported:
        rate = f", {reported:g} GB/s per link as reported"
    if len(with_links) == 2 and len(pairs) == 1:
        n = pairs[0].nvlink_count or links_each
        title = f"2 GPUs joined by {n} NVLinks ({pairs[0].link or f'NV{n}'}" + (", through NVSwitch)" if switch else ")")
    elif switch:
        title = f"{len(with_links)} GPUs on an NVSwitch fabric, {links_each} NVLinks each"
    else:
        codes = Counter(p.link or f"NV{p.nvlink_count}" for p in pairs)
        title = f"{len(with_links)} GPUs joined by NVLink (" + ", ".join(f"{c} ×{n}" for c, n in codes.items()) + ")"
    detail = f"Every GPU has all its NVLinks of its kind up ({links_each} each{rate})."
    if per_link and links_each:
        detail += f" Up to {per_link * links_each:g} GB/s each way per GPU."
    no_nv = [p for p in ctx.facts.pairs if is_nvlink_pair(p.link, p.nvlink_count) is False]
    if no_nv:
        detail += (" Pairs without NVLink go through PCIe: "
                   + ", ".join(f"{p.gpu_a}-{p.gpu_b} ({p.link})" for p in no_nv) + ".")
    return [Finding(
        id="nvlink-ok", severity="ok", area="links", title=title, detail=detail, fix="Nothing to do",
        evidence={"active_links": active, "pairs": [vars(p) for p in pairs], "per_link_gbps": per_link,
                  "reported_gbps": reported},
    )]


def _busy(g: GpuFacts) -> bool | None:
    """True when the GPU is working, False when idle, None when the snapshot does not say."""
    reasons = g.throttle_reasons or []
    if "gpu_idle" in reasons:
        return False
    if g.utilization_pct is None:
        return None
    return g.utilization_pct >= BUSY_UTILIZATION_PCT


def _gbps(gen: int | None, width: int | None) -> float | None:
    if not gen or not width:
        return None
    try:
        return kls.pcie_gbps(gen, width)
    except ValueError:
        return None


def pcie(ctx: Context) -> list[Finding]:
    findings = []
    idle_low = []
    for g in ctx.gpus:
        ev = {"gpu": g.index, "pcie_gen_current": g.pcie_gen_current, "pcie_gen_max": g.pcie_gen_max,
              "pcie_width_current": g.pcie_width_current, "pcie_width_max": g.pcie_width_max,
              "utilization_pct": g.utilization_pct, "throttle_reasons": g.throttle_reasons}
        if g.pcie_width_current and g.pcie_width_max and g.pcie_width_current < g.pcie_width_max:
            now, best = _gbps(g.pcie_gen_max, g.pcie_width_current), _gbps(g.pcie_gen_max, g.pcie_width_max)
            rate = f" ({now:.1f} instead of {best:.1f} GB/s each way at Gen{g.pcie_gen_max})" if now and best else ""
            findings.append(Finding(
                id="pcie-width-degraded", severity="warn", area="links",
                title=f"{gpu_label(g)}: PCIe link at x{g.pcie_width_current} of x{g.pcie_width_max}",
                detail=(f"The link trained to fewer lanes than the GPU and slot support{rate}: host transfers "
                        "and PCIe peer traffic are slower. Causes: a card not fully seated, a riser or cable, a slot "
                        "wired for fewer lanes, or BIOS lane bifurcation."),
                fix=(f"Check `sudo lspci -vv -s {g.pci_bus_id or '<bus id>'} | grep -E 'LnkCap|LnkSta'`; power off and "
                     "reseat the card, try another slot, and check the board manual for lane sharing"),
                evidence=ev,
            ))
        if g.pcie_gen_current and g.pcie_gen_max and g.pcie_gen_current < g.pcie_gen_max:
            busy = _busy(g)
            if busy:
                findings.append(Finding(
                    id="pcie-gen-below-max", severity="warn", area="links",
                    title=f"{gpu_label(g)}: PCIe Gen{g.pcie_gen_current} under load, Gen{g.pcie_gen_max} possible",
                    detail=(f"The GPU is busy ({g.utilization_pct:.0f}% utilisation), so this is not idle power "
                            "saving: the link trained to a lower speed (slot or riser limits, BIOS setting, signal "
                            "problems)."),
                    fix=(f"Check `sudo lspci -vv -s {g.pci_bus_id or '<bus id>'} | grep -E 'LnkCap|LnkSta'`; set the "
                         "slot to Gen{0}/Auto in the BIOS, reseat the card or replace the riser").format(g.pcie_gen_max),
                    evidence=ev,
                ))
            else:
                idle_low.append((g, busy))
    if idle_low:
        gpus = [g for g, _ in idle_low]
        known_idle = all(b is False for _, b in idle_low)
        findings.append(Finding(
            id="pcie-gen-idle-downclock", severity="info", area="links",
            title=f"{gpu_list(gpus)}: PCIe below its top generation "
                  + ("while idle (normal power saving)" if known_idle else "(load unknown)"),
            detail=(", ".join(f"GPU {g.index}: Gen{g.pcie_gen_current} of Gen{g.pcie_gen_max}" for g in gpus)
                    + ". GPUs drop the PCIe generation when idle and raise it under load, so an idle reading "
                    "says nothing about the link; only a low generation under load is a problem."),
            fix=("Re-check under load: run training (or `gpurig bench comm`) and watch "
                 "`nvidia-smi --query-gpu=index,pcie.link.gen.current,pcie.link.gen.max --format=csv -l 1`"),
            evidence={"gpus": {g.index: [g.pcie_gen_current, g.pcie_gen_max] for g in gpus},
                      "utilization_pct": {g.index: g.utilization_pct for g in gpus}},
        ))
    if any(f.severity == "warn" for f in findings):
        return findings
    known = [g for g in ctx.gpus if g.pcie_width_current and g.pcie_width_max and g.pcie_gen_max]
    if known:
        kinds = Counter((g.pcie_gen_max, g.pcie_width_max) for g in known)
        text = ", ".join(
            f"Gen{gen} x{w}" + (f" ({_gbps(gen, w):.1f} GB/s each way)" if _gbps(gen, w) else "")
            + (f" on {n} GPUs" if len(kinds) > 1 else "")
            for (gen, w), n in kinds.items())
        findings.append(Finding(
            id="pcie-ok", severity="ok", area="links",
            title=f"PCIe links at full width: {text}" + (" on every GPU" if len(kinds) == 1 and len(known) > 1 else ""),
            detail="Width matches the maximum on every GPU" + (
                "; the generation is judged under load only." if idle_low else " and so does the generation."),
            fix="Nothing to do",
            evidence={"pcie": {g.index: [g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current, g.pcie_width_max]
                               for g in known}},
        ))
    return findings


def peer_access(ctx: Context) -> list[Finding]:
    if len(ctx.gpus) < 2:
        return []
    pcie_pairs = [p for p in ctx.facts.pairs if is_nvlink_pair(p.link, p.nvlink_count) is False]
    no_p2p = [p for p in pcie_pairs if p.p2p_read is False]
    iommu = ctx.facts.system.iommu
    names = {g.name or "" for g in ctx.gpus}
    geforce = any(re.search(r"geforce rtx (40|50)\d\d", n.lower()) for n in names)
    consumer = (" GeForce RTX 40- and 50-series cards have PCIe peer access disabled by the driver in any "
                "case; NCCL then goes through host memory (SHM), which works." if geforce else "")
    pairs_text = ", ".join(f"{p.gpu_a}-{p.gpu_b}" for p in no_p2p)
    ev = {"system.iommu": iommu, "pcie_pairs": [vars(p) for p in pcie_pairs]}
    if iommu == "on" and pcie_pairs:
        if no_p2p:
            title = f"{len(no_p2p)} GPU pair(s) without peer access over PCIe, with the IOMMU on"
            detail = (f"Pairs {pairs_text} cannot read each other's memory. With the IOMMU translating DMA, PCIe "
                      "peer-to-peer traffic is blocked or redirected through the CPU root complex." + consumer)
        else:
            title = "IOMMU is on while GPUs talk peer-to-peer over PCIe"
            detail = ("Peer access is reported, but with the IOMMU (and PCIe ACS) redirecting peer traffic, NCCL "
                      "can hang or run far below the link speed.")
        return [Finding(
            id="pcie-p2p-iommu", severity="warn", area="links", title=title, detail=detail,
            fix=("Boot with the IOMMU in passthrough: add `iommu=pt` (Intel: `intel_iommu=on iommu=pt`) to "
                 "GRUB_CMDLINE_LINUX in /etc/default/grub, `sudo update-grub`, reboot (or disable VT-d/AMD-Vi in "
                 "the BIOS). Until then `export NCCL_P2P_DISABLE=1` avoids hangs"),
            evidence=ev,
        )]
    if no_p2p:
        return [Finding(
            id="pcie-p2p-unavailable", severity="info", area="links",
            title=f"{len(no_p2p)} GPU pair(s) without peer access over PCIe",
            detail=f"Pairs {pairs_text} cannot read each other's memory directly; NCCL relays through host memory." + consumer,
            fix="Nothing required; for faster exchange use GPUs joined by NVLink, or a board where the GPUs share a PCIe switch",
            evidence=ev,
        )]
    known = [p for p in ctx.facts.pairs if p.p2p_read is not None]
    if known and all(p.p2p_read for p in known) and len(known) == len(ctx.facts.pairs):
        return [Finding(
            id="p2p-ok", severity="ok", area="links",
            title=f"Peer access between every GPU pair ({len(known)} pair{'s' if len(known) > 1 else ''})",
            detail="Each GPU can read the others' memory directly (nvidia-smi topo -p2p r).",
            fix="Nothing to do", evidence={"pairs": len(known)},
        )]
    return []


RULES = [fabric_manager, nvlinks, pcie, peer_access]
