"""Parent side of `gpurig burn`: one worker per GPU through torchrun, NVML watched from here.

`run_burn()` plans the run (the GPUs, the length), starts `gpurig.burn.worker` on every GPU at
once, samples every GPU's clock, power, temperature and throttle reasons through NVML the whole
time (the parent never touches CUDA), reads the health counters (ECC, retired pages, remapped
rows) before and after, and hands everything to `diagnose/burn.py` for a verdict per GPU.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpurig.burn.faults import FAULT_ENV, parse_faults
from gpurig.diagnose.burn import judge_burn
from gpurig.diagnose.links import judge_host_and_memory, judge_p2p
from gpurig.errors import BadInput
from gpurig.launch.plan import default_run_dir, plan_torchrun, resolve_device
from gpurig.launch.runner import raise_if_interrupted, run_plan
from gpurig.probe.xid import read_xids

LEVELS = {"quick": 30.0, "default": 180.0, "long": 900.0}
STARTUP_S = 90.0  # torch import, process group, first kernels
HEALTH_FIELDS = ("power_limit_w", "power_default_limit_w", "ecc_volatile_corrected", "ecc_aggregate_corrected",
                 "ecc_volatile_uncorrected", "ecc_aggregate_uncorrected", "retired_pages", "retired_pages_pending",
                 "remapped_rows_uncorrectable", "remapped_rows_pending", "remapped_rows_failed")


def parse_duration(text: str | float | None, flag: str = "--duration") -> float:
    """'90', '90s', '3m', '1h' -> seconds."""
    if text is None:
        return LEVELS["default"]
    if isinstance(text, int | float):
        seconds = float(text)
    else:
        raw = text.strip().lower()
        scale = {"s": 1, "m": 60, "h": 3600}.get(raw[-1:], None)
        try:
            seconds = float(raw[:-1]) * scale if scale else float(raw)
        except ValueError:
            raise BadInput(f"{flag}: {text!r} is not a duration (e.g. 90s, 3m, 1h)") from None
    if not 5 <= seconds <= 24 * 3600:
        raise BadInput(f"{flag}: {text!r} must be between 5 seconds and 24 hours")
    return seconds


def parse_gpus(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        gpus = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BadInput(f"--gpus: {text!r} must be GPU indices such as 0,1") from None
    if not gpus or len(set(gpus)) != len(gpus) or min(gpus) < 0:
        raise BadInput(f"--gpus: {text!r} must list distinct GPU indices such as 0,1")
    return gpus


class Watcher:
    """NVML samples of every GPU, once a second, in a thread (nothing when there is no NVML)."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self.samples: list[dict[str, Any]] = []
        self.xids: list[dict[str, Any]] = []
        self.xid_events: Any = None
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        from gpurig.probe.xid import XidEvents

        self.xid_events = XidEvents().start()
        try:
            from gpurig.monitor.sampler import MonitorUnavailable, Sampler

            self.sampler = Sampler()
            self.sampler.open()
        except (ImportError, MonitorUnavailable) as exc:
            self.error = str(exc)
            return
        self._thread = threading.Thread(target=self._loop, name="gpurig-burn-nvml", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(self.sampler.sample().to_dict())
                self.xids += self.xid_events.poll()
            except Exception as exc:  # a reading that fails is recorded, the run goes on
                self.error = str(exc)
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            if self._thread.is_alive():  # stuck inside NVML (a GPU that fell off the bus): leave NVML to it
                self.error = self.error or "an NVML reading did not return within 5 s"
                return
            self.sampler.close()
        if self.xid_events is not None:
            self.xids += self.xid_events.poll()
            self.xid_events.stop()


def read_facts() -> Any:
    """The NVML facts of every GPU now, or None without NVML."""
    try:
        from gpurig.probe.nvml import read_nvml

        return read_nvml()
    except Exception:
        return None


def health(result: Any) -> dict[int, dict[str, Any]]:
    """Each GPU's identity and health counters in `result` (NVML facts); empty without them."""
    if result is None:
        return {}
    from gpurig.probe.nvml import NVLINK_ERROR_COUNTERS

    def link_sum(g: Any, name: str) -> int | None:
        values = [getattr(nl, name) for nl in g.nvlinks if getattr(nl, name, None) is not None]
        return sum(values) if values else None

    return {g.index: {"name": g.name, "uuid": g.uuid, "pci_bus_id": g.pci_bus_id,
                      "serial": g.serial, "pcie_replay_count": g.pcie_replay_count,
                      **{f"nvlink_{name}": link_sum(g, name) for name, _ in NVLINK_ERROR_COUNTERS},
                      **{f: getattr(g, f, None) for f in HEALTH_FIELDS}} for g in result.gpus}


def nvml_indices(gpus: list[int] | None, nproc: int) -> list[int]:
    """The NVML index of the GPU each rank runs on: --gpus, else CUDA_VISIBLE_DEVICES when it lists
    indices, else the rank (read here, in the parent, so the verdict reads no environment)."""
    if gpus:
        return list(gpus)
    visible = [v.strip() for v in (os.environ.get("CUDA_VISIBLE_DEVICES") or "").split(",") if v.strip()]
    return [int(visible[r]) if r < len(visible) and visible[r].isdigit() else r for r in range(nproc)]


def judge_links(doc: dict[str, Any], facts: Any) -> None:
    """Each rank's copies beside what its PCIe link and memory allow, and the peer copies beside the
    links between the GPUs (the facts' NVML indices), in place: `transfers` gains the capabilities
    and `findings`, the document gains `p2p`."""
    indices = doc["nvml_indices"]
    for r, res in enumerate(doc["ranks"]):
        if res and res.get("transfers"):
            judged, findings = judge_host_and_memory(res["transfers"], facts, indices[r] if r < len(indices) else r)
            res["transfers"] = {**(judged or {}), "findings": [f.to_dict() for f in findings]}
    p2p = next((res.get("p2p") for res in doc["ranks"] if res and res.get("p2p")), None)
    if p2p:
        rows, findings = judge_p2p(p2p, facts, lambda i: indices[i] if i < len(indices) else i)
        doc["p2p"] = {"bytes": p2p["bytes"], "pairs": rows, "findings": [f.to_dict() for f in findings]}


DCGM_LEVEL = 2
DCGM_TIMEOUT_S = 1200.0


def run_dcgm(run_dir: Path, indices: list[int], level: int = DCGM_LEVEL, timeout: float = DCGM_TIMEOUT_S) -> dict[str, Any]:
    """`dcgmi diag -r <level> -j` on the run's GPUs, after the screen (both load the GPUs fully);
    its output is kept in the run directory and read by `diagnose/dcgm.py`."""
    import shutil
    import subprocess

    from gpurig.diagnose.dcgm import parse_dcgm_diag

    cmd = [shutil.which("dcgmi") or "dcgmi", "diag", "-r", str(level), "-j", "-i", ",".join(map(str, indices))]
    out: dict[str, Any] = {"command": " ".join(["dcgmi", *cmd[1:]]), "level": level}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {**out, "error": f"dcgmi did not finish in {timeout:.0f} s"}
    except OSError as exc:
        return {**out, "error": f"dcgmi could not start: {exc}"}
    (run_dir / "dcgm.txt").write_text(proc.stdout + ("\n--- stderr ---\n" + proc.stderr if proc.stderr else ""))
    out["returncode"] = proc.returncode
    try:
        out.update(parse_dcgm_diag(proc.stdout))
    except ValueError as exc:
        said = " | ".join(ln.strip() for ln in (proc.stdout + "\n" + proc.stderr).splitlines() if ln.strip())[:400]
        out["error"] = f"{exc} (exit {proc.returncode}): {said}" if said else f"{exc} (exit {proc.returncode})"
    return out


def progress_line(line: str, echo) -> None:
    """Show a worker's progress record (`gpurig-burn: {...}`). A line two ranks' writes ran together
    in (a worker cut off by Ctrl-C mid-line) is skipped: the next record says the same, and a
    traceback in the reader would help no one."""
    if not line.startswith("gpurig-burn: "):
        return
    try:
        record = json.loads(line[len("gpurig-burn: "):])
    except ValueError:
        return
    if isinstance(record, dict):
        echo(record)


def run_burn(device: str = "auto", gpus: list[int] | None = None, seconds: float = LEVELS["default"],
             out_dir: str | os.PathLike | None = None, echo: Callable[[dict[str, Any]], None] | None = None,
             size: int | None = None, dcgm: bool = False) -> dict[str, Any]:
    """Screen every visible GPU (or `gpus`) for `seconds`, then (`dcgm`) run DCGM's level-2
    diagnostic on them; returns the `gpurig burn --json` document."""
    env: dict[str, str] = {}
    try:
        parse_faults(os.environ.get(FAULT_ENV))  # a typo in an injected fault is bad input, not a failed GPU
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    if gpus is not None:
        if device == "cpu":
            raise BadInput("--gpus chooses GPUs; it does not combine with --device cpu")
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible:
            names = [v.strip() for v in visible.split(",")]
            missing = [g for g in gpus if g >= len(names)]
            if missing:
                raise BadInput(f"--gpus: GPU {missing[0]} is not among the {len(names)} visible ones")
            env["CUDA_VISIBLE_DEVICES"] = ",".join(names[g] for g in gpus)
        else:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    choice = resolve_device(device, len(gpus) if gpus else "auto")
    if gpus is not None and choice.device != "cuda":
        raise BadInput("--gpus: no GPU is visible here")
    if dcgm:
        import shutil

        if shutil.which("dcgmi") is None:
            raise BadInput("--dcgm: `dcgmi` is not on the PATH; install DCGM (the datacenter-gpu-manager package) "
                           "and start its host engine (`sudo systemctl start nvidia-dcgm`), or leave out --dcgm")
        if choice.device != "cuda":
            raise BadInput("--dcgm runs NVIDIA's GPU diagnostic: it needs a GPU (this run is on the CPU)")
    run_dir = Path(out_dir) if out_dir is not None else Path(default_run_dir("burn-"))
    if run_dir.exists() and any(run_dir.glob("result-rank*.json")):
        raise BadInput(f"--out {run_dir}: holds an earlier burn's results; choose another --out")
    run_dir.mkdir(parents=True, exist_ok=True)
    side = size or (8192 if choice.device == "cuda" else 256)
    entry = ["-m", "gpurig.burn.worker", "--run-dir", str(run_dir), "--device", choice.device,
             "--seconds", f"{seconds:g}", "--size", str(side)]
    plan = plan_torchrun(entry, choice.nproc, choice.device, run_dir=str(run_dir), env=env)

    def on_line(line: str) -> None:
        if echo:
            progress_line(line, echo)

    facts_before = read_facts() if choice.device == "cuda" else None
    before = health(facts_before)
    xids_before = read_xids() if choice.device == "cuda" else None
    watcher = Watcher()
    if choice.device == "cuda":
        watcher.start()
    t0 = time.monotonic()
    try:
        run = run_plan(plan, timeout=STARTUP_S + seconds * 1.5, echo=on_line)
    finally:
        watcher.stop()
    facts_after = read_facts() if choice.device == "cuda" else None
    after = health(facts_after)
    xids_after = read_xids() if choice.device == "cuda" else None
    new_xids = None
    if xids_before is not None and xids_after is not None:
        seen = {x["text"] for x in xids_before}
        new_xids = [x for x in xids_after if x["text"] not in seen]
    if watcher.xids:  # NVML's events; the kernel log's line for the same Xid says more, so it is kept
        logged = {(x["bus"], x["xid"]) for x in new_xids or []}
        new_xids = (new_xids or []) + [x for x in watcher.xids if (x["bus"], x["xid"]) not in logged]
    ranks = {}
    for r in range(choice.nproc):
        p = run_dir / f"result-rank{r}.json"
        if p.is_file():
            ranks[r] = json.loads(p.read_text())
    doc = {
        "device": choice.device, "nproc": choice.nproc, "reason": choice.reason, "seconds_asked": seconds,
        "seconds": time.monotonic() - t0, "run_dir": str(run_dir), "gpus": gpus,
        "nvml_indices": nvml_indices(gpus, choice.nproc),
        "ranks": [ranks.get(r) for r in range(choice.nproc)], "health_before": before, "health_after": after,
        "nvml_samples": watcher.samples, "nvml_error": watcher.error, "xids": new_xids,
        "xid_sources": [name for name, ok in (("kernel log", xids_after is not None),
                                               ("NVML events", bool(watcher.xid_events and watcher.xid_events.gpus))) if ok],
        "launcher": {"returncode": run.returncode, "timed_out": run.timed_out, "log": run.log_path,
                     "tail": run.output_tail[-8:]},
    }
    judge_links(doc, facts_after or facts_before)
    doc["interrupted"] = bool(run.interrupted)

    def keep() -> None:
        doc.update(judge_burn(doc))
        (run_dir / "burn.json").write_text(json.dumps(doc, indent=1, default=str))  # kept, even when interrupted

    keep()  # before DCGM's minutes: a Ctrl-C there loses nothing of the screen
    raise_if_interrupted(run)
    if dcgm:
        try:
            doc["dcgm"] = run_dcgm(run_dir, doc["nvml_indices"])
        except KeyboardInterrupt:
            doc["dcgm"] = {"error": "stopped before dcgmi finished", "level": DCGM_LEVEL}
            doc["interrupted"] = True
            keep()
            raise
        keep()
    return doc
