"""The verdict of `gpurig burn`: pass, watch or fail for every GPU, each with its evidence and the
next step. Pure: it reads the burn document (`burn/run.py`) and judges nothing else.

- **fail**: a product whose bits differ from the first one's (silent data corruption), a GPU that
  computes other bits than the other GPUs of its model on the same inputs, a memory word that read
  back wrong, a new uncorrectable ECC error, a page or row retirement pending or failed, an Xid the
  driver logged for the GPU during the run (`knowledge/xid.toml` says what it means), a worker
  that died.
- **watch**: a straggler (sustained rate more than 5% below the median of its siblings), a clock at
  the power limit more than 10% under its siblings' (a healthy part at its power limit runs well
  under its maximum clock, so the maximum is no yardstick), a power limit set below the board's
  default, a hardware slowdown or power brake, thermal throttling, a PCIe or
  NVLink error counter (replays, recoveries, CRC errors) that rose during the run, copies (host
  link, device memory, to another GPU) under half of what the link or the datasheet allows.
- with `--dcgm`, what `dcgmi diag -r 2` said of the GPU: a failed hardware test fails it, a
  warning or a failed setting (persistence mode, say) is watched.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from gpurig.diagnose.dcgm import dcgm_findings
from gpurig.probe.nvml import POWER_REASONS, THERMAL_REASONS
from gpurig.probe.xid import bus_of


def _xid_table() -> dict[str, dict[str, Any]]:
    import tomllib
    from importlib.resources import files

    return tomllib.loads(files("gpurig.knowledge").joinpath("xid.toml").read_text(encoding="utf-8"))["xid"]


XIDS = _xid_table()

STRAGGLER = 0.95  # a GPU's rate under this share of the median of its siblings
LOW_CLOCK = 0.90  # a clock at the power limit under this share of its siblings' (same part, same work)
POWER_CAPPED = 0.95  # a power limit under this share of the board's default
LINK_COUNTERS = {"pcie_replay_count": "PCIe replays", "nvlink_replay_errors": "NVLink replays",
                 "nvlink_recovery_errors": "NVLink recoveries", "nvlink_crc_flit_errors": "NVLink CRC (flit) errors",
                 "nvlink_crc_data_errors": "NVLink CRC (data) errors"}
SDC_NEXT = ("take it out of service; run `gpurig burn --gpus {i} --long` again, then `dcgmi diag -r 3`; if it "
            "fails again, return the card")


def _nvml_index(doc: dict[str, Any], rank: int) -> int:
    """The NVML index of the GPU a rank ran on, as the parent recorded it (`nvml_indices`)."""
    indices = doc.get("nvml_indices") or []
    return indices[rank] if rank < len(indices) else rank


def _beside(load: dict[int, dict[str, Any]], i: int) -> str:
    """'; under load it ran at 1,520 MHz and 690 W, its siblings at 1,670 MHz and 695 W' (or nothing)."""
    mine = load.get(i)
    others = [v for j, v in load.items() if j != i and mine and v["name"] == mine["name"]]
    if not mine or not others:
        return ""
    return (f"; under load it ran at {mine['clock_mhz']:,.0f} MHz and {mine['power_w']:,.0f} W, its siblings at "
            f"{statistics.median(v['clock_mhz'] for v in others):,.0f} MHz and "
            f"{statistics.median(v['power_w'] for v in others):,.0f} W")


def _by_index(table: dict[Any, Any], i: int) -> dict[str, Any]:
    return table.get(i) or table.get(str(i)) or {}


def _rose(before: dict[str, Any], after: dict[str, Any], field: str) -> bool:
    """A counter read both times that is higher now (a counter unread before is no evidence)."""
    return before.get(field) is not None and after.get(field) is not None and after[field] > before[field]


def _load_by_gpu(samples: list[dict[str, Any]], ranks: list[Any], doc: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Per GPU: its clock, power and temperature while busy, and how often a limit held it back."""
    out: dict[int, dict[str, Any]] = {}
    for r, res in enumerate(ranks):
        i = _nvml_index(doc, r)
        mine = [g for s in samples for g in s.get("gpus", []) if g.get("index") == i and not g.get("error")]
        busy = [g for g in mine if (g.get("utilization_pct") or 0) >= 50]
        if not busy:
            continue
        reasons = [set(g.get("throttle_reasons") or []) for g in busy]
        capped = [g.get("sm_clock_mhz") or 0 for g, why in zip(busy, reasons, strict=True) if why & POWER_REASONS]
        out[i] = {"name": (res or {}).get("device_name"), "busy_samples": len(busy),
                  "clock_mhz": statistics.mean(g.get("sm_clock_mhz") or 0 for g in busy),
                  "power_w": statistics.mean(g.get("power_w") or 0 for g in busy),
                  "max_temperature_c": max(g.get("temperature_c") or 0 for g in busy),
                  "capped_samples": len(capped), "capped_clock_mhz": statistics.mean(capped) if capped else None,
                  "hw_slowdown_samples": sum(bool(why & {"hw_slowdown", "hw_power_brake"}) for why in reasons),
                  "hot_samples": sum(bool(why & THERMAL_REASONS) for why in reasons)}
    return out


@dataclass
class _Gpu:
    """One GPU of a burn document, as the rules below see it; `add` records a finding."""

    doc: dict[str, Any]
    r: int  # its rank
    i: int  # its NVML index
    res: dict[str, Any]  # the rank's result ({} when the worker wrote none)
    before: dict[str, Any]  # its health counters before and after the run
    after: dict[str, Any]
    load: dict[int, dict[str, Any]]  # every GPU's clock/power/temperature under load
    rates: dict[str, dict[int, float]]  # dtype -> rank -> TFLOP/s
    findings: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ident(self) -> dict[str, Any]:
        return self.after or self.before

    @property
    def who(self) -> str:
        d = self.ident
        return f"GPU {self.i}" + (f" ({d.get('name')}, bus {d.get('pci_bus_id')}, UUID {d.get('uuid')}"
                                  + (f", serial {d['serial']}" if d.get("serial") else "") + ")"
                                  if d.get("uuid") else "")

    @property
    def name(self) -> str | None:
        return self.res.get("device_name")

    @property
    def unfinished(self) -> bool:
        return not self.res.get("done")

    def add(self, severity: str, fid: str, title: str, detail: str, fix: str, **evidence: Any) -> None:
        self.findings.append({"id": fid, "severity": severity, "title": title, "detail": detail, "fix": fix,
                              "evidence": {"gpu": self.i, "rank": self.r, **evidence}})


def _worker_died(g: _Gpu) -> None:
    if g.unfinished and not g.doc.get("interrupted"):  # stopped on purpose: judged on what it measured
        launcher = g.doc.get("launcher") or {}
        tail = " | ".join(launcher.get("tail") or [])
        g.add("fail", "burn-worker-died", f"{g.who}: the screen did not finish",
              f"the worker stopped before the end (launcher exit {launcher.get('returncode')})"
              + (f": {tail}" if tail else ""), f"read {launcher.get('log')}; then `gpurig doctor` and `dmesg | grep -i xid`")


def _wrong_products(g: _Gpu) -> None:
    for dtype, c in (g.res.get("compute") or {}).items():
        if c.get("mismatches"):
            it = c["mismatched_iterations"][0]
            g.add("fail", "burn-silent-data-corruption",
                  f"{g.who}: a {dtype} matrix product came out wrong ({c['mismatches']} of {c['iterations']} products)",
                  f"the same {c['size']}x{c['size']} product on the same inputs gave other bits in iteration {it} "
                  f"than in the first (checksum off by {c.get('difference')}): silent data corruption",
                  SDC_NEXT.format(i=g.i), dtype=dtype, iterations=c["mismatched_iterations"])


def _memory(g: _Gpu) -> None:
    mem = g.res.get("memory") or {}
    if mem.get("note"):
        g.add("watch", "burn-memory-not-tested", f"{g.who}: {mem['note']}", "other processes hold its memory, or "
              "the card is very small", "`nvidia-smi` shows who holds it; burn again with the GPU idle")
    for e in (mem.get("errors") or [])[:1]:  # one line per GPU; the rest are in the document
        g.add("fail", "burn-memory-error",
              f"{g.who}: memory read back wrong at offset {e['offset_bytes']:#x} ({e['pattern']} pattern)"
              if e.get("offset_bytes") is not None else f"{g.who}: memory read back wrong ({e['pattern']} pattern)",
              (f"read {e['read']:#010x}, wrote {e['expected']:#010x}; " if e.get("read") is not None else
               "the word could not be found again when looked for (it changed between two reads); ")
              + f"{e['words_wrong']} word(s) wrong in that slice, pass {e['pass']}",
              f"reset the GPU (`sudo nvidia-smi -r -i {g.i}`) and burn again; if it comes back, run `dcgmi diag -r 3` "
              "and return the card", **e)


def _health(g: _Gpu) -> None:
    b, a, i = g.before, g.after, g.i
    for f in ("ecc_volatile_uncorrected", "ecc_aggregate_uncorrected", "retired_pages", "remapped_rows_uncorrectable"):
        if _rose(b, a, f):
            g.add("fail", "burn-new-memory-errors", f"{g.who}: {f.replace('_', ' ')} rose during the screen",
                  f"{b.get(f)} before, {a.get(f)} after", SDC_NEXT.format(i=i), field=f)
    corrected = [(f, b[f], a[f]) for f in ("ecc_volatile_corrected", "ecc_aggregate_corrected") if _rose(b, a, f)]
    if corrected:
        f, x, y = corrected[0]
        g.add("watch", "burn-corrected-memory-errors", f"{g.who}: {y - x:,} corrected ECC error(s) during the screen",
              f"{f.replace('_', ' ')}: {x:,} before, {y:,} after. ECC fixed them, so no result was wrong; a few over "
              "a card's life are normal, but errors that keep coming under load often precede uncorrectable ones",
              f"burn it again (`gpurig burn --gpus {i} --long`) and compare the count; `nvidia-smi -q -d ECC,"
              "ROW_REMAPPER` shows the history", field=f, before=x, after=y)
    for f in ("retired_pages_pending", "remapped_rows_pending", "remapped_rows_failed"):
        if a.get(f):
            g.add("fail", "burn-memory-repair-pending", f"{g.who}: {f.replace('_', ' ')}",
                  "the memory has failing cells that only a reset (or a replacement) takes out of use",
                  f"`sudo nvidia-smi -r -i {i}`; if failed, return the card", field=f)
    # Links that had to resend: PCIe replays, NVLink replays/recoveries/CRC errors during the screen.
    retried = {f: (b[f], a[f]) for f in LINK_COUNTERS if _rose(b, a, f)}
    if retried:
        g.add("watch", "burn-link-retries", f"{g.who}: {', '.join(LINK_COUNTERS[f] for f in retried)} rose during "
              "the screen", "; ".join(f"{LINK_COUNTERS[f]}: {x:,} before, {y:,} after" for f, (x, y) in retried.items())
              + ". A link that resends packets still delivers them, but slower, and a rising count is how a "
              "failing riser, cable or NVLink bridge first shows", "reseat the card (and its NVLink bridge or "
              "cables); `nvidia-smi -q -d PCIE` and `nvidia-smi nvlink -e` show the counters; burn again and "
              "compare", counters={f: {"before": x, "after": y} for f, (x, y) in retried.items()})
    limit = a.get("power_limit_w") or b.get("power_limit_w")
    default = a.get("power_default_limit_w") or b.get("power_default_limit_w")
    if limit and default and limit < POWER_CAPPED * default:
        g.add("watch", "burn-power-capped", f"{g.who}: its power limit is {limit:,.0f} W, below its default "
              f"{default:,.0f} W", "it was lowered (`nvidia-smi -pl`, or the system's power capping): under load its "
              "clocks and its rate drop with it", f"`sudo nvidia-smi -i {i} -pl {default:.0f}` if the power supply and "
              "cooling allow it", limit_w=limit, default_w=default)


def _slow_copies(g: _Gpu) -> None:
    """Copies far below what the PCIe link, the memory or a link to another GPU allows."""
    slow = list((g.res.get("transfers") or {}).get("findings") or [])
    slow += [f for f in ((g.doc.get("p2p") or {}).get("findings") or [])
             if str(f.get("evidence", {}).get("pair", "")).split("->")[0] == str(g.r)]
    for f in slow:
        g.add("watch", f"burn-{f['id']}", f"{g.who}: {f['title']}", f["detail"], f["fix"],
              **{k: v for k, v in (f.get("evidence") or {}).items() if k not in ("gpu", "rank")})


def _siblings(g: _Gpu) -> None:
    """Against the other GPUs of the same model: the rate (stragglers) and the bits (the same inputs
    must give the same product)."""
    ranks = g.doc.get("ranks") or []
    same = [rr for rr, x in enumerate(ranks) if (x or {}).get("device_name") == g.name]
    for dtype, by_rank in g.rates.items():
        peers = [by_rank[rr] for rr in same if by_rank.get(rr)]
        mine = by_rank.get(g.r)
        if len(peers) >= 2 and mine and g.doc.get("device") == "cuda":  # CPU processes share the cores
            med = statistics.median(peers)
            if mine < STRAGGLER * med:
                g.add("watch", "burn-straggler", f"{g.who}: {dtype} at {mine:,.1f} TFLOP/s, "
                      f"{1 - mine / med:.0%} below the median of its siblings ({med:,.1f})",
                      "in synchronous training every step waits for the slowest GPU" + _beside(g.load, g.i),
                      "look at its clock, power and temperature beside the others' (`gpurig monitor`); reseat "
                      "it, check its cooling", dtype=dtype, tflops=mine, median=med)
    for dtype, c in (g.res.get("compute") or {}).items():
        sums = [s for rr in same if (s := ((ranks[rr] or {}).get("compute") or {}).get(dtype, {}).get("reference_checksum"))
                is not None]
        if len(sums) >= 2:
            common, mine = statistics.mode(sums), c.get("reference_checksum")
            if mine != common and sums.count(common) > sums.count(mine):
                g.add("fail", "burn-differs-from-siblings",
                      f"{g.who}: its {dtype} product differs from the other {g.name} GPUs' on the same inputs",
                      f"checksum {mine}, the others {common}", SDC_NEXT.format(i=g.i), dtype=dtype)


def _xids(g: _Gpu) -> None:
    """Xid events the driver reported for this GPU during the run."""
    bus = bus_of(g.ident.get("pci_bus_id"))
    for x in [x for x in g.doc.get("xids") or [] if bus and x["bus"] == bus][:3]:
        known = XIDS.get(str(x["xid"])) or {}
        g.add("fail", "burn-xid", f"{g.who}: Xid {x['xid']} during the screen"
              + (f" ({known['meaning']})" if known else ""), x["text"],
              ("a hardware fault by NVIDIA's table: " if known.get("hardware") else "")
              + f"`sudo dmesg | grep -i xid` for the whole record; reset the GPU (`sudo nvidia-smi -r -i {g.i}`), burn "
              "again, then `dcgmi diag -r 3`; return the card if it repeats", xid=x["xid"])


def _clocks(g: _Gpu) -> None:
    """NVML during the run. A healthy part under a dense GEMM sits at its power limit with its clock
    well under the maximum (one H200 at 700 W: about 1,670 of 1,980 MHz), so the clock at the power
    limit is held against the siblings', not the maximum."""
    mine = g.load.get(g.i)
    if not mine:
        return
    sib = [v["capped_clock_mhz"] for j, v in g.load.items()
           if j != g.i and v["name"] == mine["name"] and v["capped_clock_mhz"]]
    if mine["capped_clock_mhz"] and sib and mine["capped_clock_mhz"] < LOW_CLOCK * statistics.median(sib):
        med = statistics.median(sib)
        g.add("watch", "burn-low-clock-at-power-limit",
              f"{g.who}: held {mine['capped_clock_mhz']:,.0f} MHz at its power limit, "
              f"{1 - mine['capped_clock_mhz'] / med:.0%} below its siblings ({med:,.0f} MHz)",
              f"{mine['capped_samples']} of {mine['busy_samples']} busy samples at the power limit; the same "
              "work at the same power should run at the same clock", "compare `nvidia-smi -q -d POWER,CLOCK` "
              "with its siblings'; check its cooling and seating", clock=mine["capped_clock_mhz"], median=med)
    if mine["hw_slowdown_samples"]:
        g.add("watch", "burn-hardware-slowdown", f"{g.who}: the board slowed the GPU down in "
              f"{mine['hw_slowdown_samples']} samples (hardware slowdown or power brake)",
              "asserted by the board itself: over-temperature, a power supply that cannot keep up, or an "
              "external power-brake signal", "check the power supply and its cables, the airflow, and "
              "`nvidia-smi -q -d PERFORMANCE`; reseat the card", samples=mine["hw_slowdown_samples"])
    if mine["hot_samples"]:
        g.add("watch", "burn-thermal-throttle", f"{g.who}: throttled for temperature in {mine['hot_samples']} samples",
              f"up to {mine['max_temperature_c']:.0f} °C", "check airflow and the fans; reseat the card",
              samples=mine["hot_samples"])


def _dcgm(g: _Gpu) -> None:
    """NVIDIA's own diagnostic (`--dcgm`), run after the screen."""
    for f in dcgm_findings(g.doc.get("dcgm") or {}, g.i):
        g.add(f["severity"], "burn-dcgm", f"{g.who}: {f['title']}", f["detail"],
              SDC_NEXT.format(i=g.i) if f["severity"] == "fail" else "fix the setting it names, then run "
              f"`dcgmi diag -r 2 -i {g.i}` again", test=f["test"], status=f["status"])


RULES = (_worker_died, _wrong_products, _memory, _health, _slow_copies, _siblings, _xids, _clocks, _dcgm)


def judge_burn(doc: dict[str, Any]) -> dict[str, Any]:
    """{"gpus_judged": [{index, rank, name, verdict, findings: [...], rates}], "passed": bool}."""
    ranks = doc.get("ranks") or []
    before, after = doc.get("health_before") or {}, doc.get("health_after") or {}
    rates: dict[str, dict[int, float]] = {}
    for r, res in enumerate(ranks):
        for dtype, c in ((res or {}).get("compute") or {}).items():
            rates.setdefault(dtype, {})[r] = c.get("tflops") or 0.0
    load = _load_by_gpu(doc.get("nvml_samples") or [], ranks, doc)
    out = []
    for r, res in enumerate(ranks):
        i = _nvml_index(doc, r)
        g = _Gpu(doc=doc, r=r, i=i, res=res or {}, before=_by_index(before, i), after=_by_index(after, i),
                 load=load, rates=rates)
        for rule in RULES:
            rule(g)
        # Stopped on purpose before this GPU finished: what it measured is judged, but it has not passed.
        verdict = ("fail" if any(f["severity"] == "fail" for f in g.findings)
                   else "incomplete" if g.unfinished else "watch" if g.findings else "pass")
        mem = g.res.get("memory") or {}
        out.append({"index": i, "rank": r, "name": g.name, "uuid": g.ident.get("uuid"), "verdict": verdict,
                    "findings": g.findings,
                    "compute": {d: {"tflops": c.get("tflops"), "vs_plain": c.get("vs_plain")}
                                for d, c in (g.res.get("compute") or {}).items()},
                    "memory": {k: mem.get(k) for k in ("bytes_tested", "gbps", "copy_gbps", "vs_copy", "passes")},
                    "transfers": g.res.get("transfers"), "load": load.get(i)})
    return {"gpus_judged": out, "passed": bool(out) and all(g["verdict"] in ("pass", "watch") for g in out)}
