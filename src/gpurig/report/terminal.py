"""Terminal rendering (rich) of doctor results: the machine in a few lines, then findings by area."""

from __future__ import annotations

from collections import OrderedDict

from rich.console import Console
from rich.markup import escape

from gpurig.diagnose.findings import Finding, sort_findings
from gpurig.probe.facts import RigFacts

STYLE = {"error": "bold red", "warn": "yellow", "info": "cyan", "ok": "green"}
MARK = {"error": "✗", "warn": "!", "info": "i", "ok": "✓"}
AREA_TITLES = {
    "driver": "Driver",
    "gpus": "GPUs",
    "links": "Links between GPUs",
    "frameworks": "Frameworks",
    "system": "System and container",
    "environment": "Environment variables",
}


def _na(value, unit: str = "") -> str:
    return "n/a" if value is None else f"{value}{unit}"


def _gib(mib: float | None) -> str:
    return "n/a" if mib is None else f"{mib / 1024:.0f} GiB"


def machine_lines(facts: RigFacts) -> list[str]:
    """A few lines that say what this machine is: GPUs, links, driver, frameworks, system."""
    lines: list[str] = []
    d = facts.driver
    if facts.gpus:
        names = OrderedDict()
        for g in facts.gpus:
            names[g.name or "unknown GPU"] = names.get(g.name or "unknown GPU", 0) + 1
        what = ", ".join(f"{n}× {name}" for name, n in names.items())
        lines.append(
            f"[bold]{what}[/bold] — driver {_na(d.driver_version)}"
            f" (supports CUDA up to {_na(d.cuda_driver_version)}), read through {_na(d.source)}"
        )
        for g in facts.gpus:
            up = [link for link in g.nvlinks if link.active]
            nvl = f"NVLink {len(up)}/{len(g.nvlinks)} up" if g.nvlinks else "no NVLink"
            pcie = (
                f"PCIe Gen{_na(g.pcie_gen_current)} x{_na(g.pcie_width_current)}"
                f" (max Gen{_na(g.pcie_gen_max)} x{_na(g.pcie_width_max)})"
            )
            lines.append(
                f"  GPU {g.index}  CC {_na(g.compute_capability)}  {_gib(g.memory_total_mib)}"
                f"  {pcie}  {nvl}  bus {_na(g.pci_bus_id)}"
            )
        if facts.pairs:
            pairs = "  ".join(
                f"{p.gpu_a}↔{p.gpu_b} {_na(p.link)}"
                + ("" if p.p2p_read is None else (" P2P" if p.p2p_read else " no-P2P"))
                for p in facts.pairs[:12]
            )
            more = f"  (+{len(facts.pairs) - 12} more pairs)" if len(facts.pairs) > 12 else ""
            lines.append(f"  links: {pairs}{more}")
    else:
        nvidia_pci = [p for p in (facts.pci_devices or []) if p.kind == "gpu"]
        if nvidia_pci:
            lines.append(f"[bold]{len(nvidia_pci)} NVIDIA GPU(s) on the PCI bus, but the driver does not answer[/bold]")
        else:
            lines.append("[bold]No NVIDIA GPU[/bold] — CPU-only machine")
    fw = facts.frameworks
    if not fw.probed:
        seen = []
        for name, f in (("torch", fw.torch), ("TensorFlow", fw.tensorflow)):
            if f.installed and f.version:
                seen.append(f"{name} {f.version} ({'CUDA ' + f.cuda_build if f.cuda_build else 'CPU'} build)")
        if seen:
            lines.append(f"  frameworks: {'; '.join(seen)}; read from their files, not probed (--fast)")
        else:
            lines.append("  frameworks: not probed (--fast, or a snapshot saved without them)")
    else:
        t = fw.torch
        if t.installed:
            tdesc = f"torch {_na(t.version)}"
            tdesc += f" (CUDA {t.cuda_build}, NCCL {_na(t.nccl_version)}" if t.cuda_build else " (CPU-only build"
            tdesc += f", sees {t.device_count} GPU(s))" if t.cuda_available else ", no GPU visible to it)"
            if t.error:
                tdesc = f"torch: {t.error}"
        else:
            tdesc = "torch not installed" if not t.error else f"torch: {t.error}"
        tf = fw.tensorflow
        if tf.installed:
            tfdesc = f"TensorFlow {_na(tf.version)}"
            tfdesc += f" (CUDA {tf.cuda_build}, cuDNN {_na(tf.cudnn_build)}" if tf.cuda_build else " (CPU build"
            tfdesc += f", sees {len(tf.gpus or [])} GPU(s))"
            if tf.error:
                tfdesc = f"TensorFlow: {tf.error}"
        else:
            tfdesc = "TensorFlow not installed" if not tf.error else f"TensorFlow: {tf.error}"
        cached = f" [dim](cached {_when(fw.from_cache)}; --refresh probes again)[/dim]" if fw.from_cache else ""
        lines.append(f"  frameworks: {tdesc}; {tfdesc}{cached}")
    s = facts.system
    shm = "n/a" if s.shm_total_bytes is None else f"{s.shm_total_bytes / 2**30:.1f} GiB"
    lines.append(
        f"  system: {_na(s.os)}, Python {_na(s.python)}, {_na(s.cpu_count)} cores,"
        f" {_na(None if s.ram_total_gib is None else round(s.ram_total_gib))} GiB RAM, /dev/shm {shm},"
        f" {'container: ' + s.container if s.container else 'not in a container'}"
    )
    return lines


def _when(iso: str) -> str:
    """'2026-12-02T03:10:25+00:00' -> '2026-12-02 03:10 UTC' (as written, when it is not that form)."""
    import datetime as _dt

    try:
        t = _dt.datetime.fromisoformat(iso).astimezone(_dt.UTC)
    except ValueError:
        return iso
    return t.strftime("%Y-%m-%d %H:%M UTC")


def render_findings(console: Console, findings: list[Finding], show_ok: bool = True) -> None:
    """Findings grouped by area; areas ordered by their worst finding, worst first."""
    groups: OrderedDict[str, list[Finding]] = OrderedDict()
    for f in sort_findings(findings):
        if f.severity == "ok" and not show_ok:
            continue
        groups.setdefault(f.area, []).append(f)
    for area, items in groups.items():
        console.print(f"\n[bold]{escape(AREA_TITLES.get(area, area.title()))}[/bold]")
        for f in items:
            style = STYLE[f.severity]
            console.print(f"  [{style}]{MARK[f.severity]} {f.severity.upper():5}[/{style}] {escape(f.title)}")
            if f.detail and f.severity != "ok":
                console.print(f"          {escape(f.detail)}", style="dim", soft_wrap=True)
            if f.fix and f.severity != "ok":
                console.print(f"          [bold]fix:[/bold] {escape(f.fix)}", soft_wrap=True)


def summary_line(findings: list[Finding]) -> str:
    counts = {s: sum(1 for f in findings if f.severity == s) for s in ("error", "warn", "info", "ok")}
    verdict = (
        "[bold red]NOT READY[/bold red]"
        if counts["error"]
        else ("[yellow]ready, with warnings[/yellow]" if counts["warn"] else "[green]ready[/green]")
    )
    return (
        f"{verdict}: {counts['error']} error(s), {counts['warn']} warning(s),"
        f" {counts['info']} note(s), {counts['ok']} check(s) passed"
    )


def render_doctor(console: Console, facts: RigFacts, findings: list[Finding]) -> None:
    console.print("[bold]gpurig doctor[/bold]")
    for line in machine_lines(facts):
        console.print(line, soft_wrap=True)
    render_findings(console, findings)
    console.print("\n" + summary_line(findings))
