"""`gpurig check`'s steps and their runner: each step returns a `StepResult` (passed, failed,
skipped or interrupted, with its reason and its data); `run_check` runs them in order, stops early
when the doctor finds an error, and returns the `gpurig check --json` document."""

from __future__ import annotations

import socket
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpurig import __version__
from gpurig.errors import BadInput


@dataclass
class StepResult:
    name: str
    status: str  # "passed", "failed", "skipped", "interrupted"
    seconds: float = 0.0
    reason: str = ""
    data: Any = None

    def summary(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "seconds": round(self.seconds, 2), "reason": self.reason}


@dataclass
class CheckContext:
    device: str
    nproc: str
    out_dir: Path
    quick: bool
    echo: Callable[[str], None]
    facts: Any = None
    device_choice: Any = None
    burn: bool = False  # gpurig check --burn: the quick burn-in of every GPU after the doctor
    results: dict[str, Any] = field(default_factory=dict)


def _step_doctor(ctx: CheckContext) -> StepResult:
    from gpurig.diagnose.findings import has_error
    from gpurig.suite.doctor import doctor_data, doctor_document, gather

    facts, findings = doctor_data(gather(None, frameworks=True, use_cache=True, refresh=True))
    ctx.facts = facts
    doc = doctor_document(facts, findings)
    errors = [f for f in findings if f.severity == "error"]
    if has_error(findings):
        return StepResult("doctor", "failed", reason="; ".join(f.title for f in errors), data=doc)
    warns = sum(1 for f in findings if f.severity == "warn")
    return StepResult("doctor", "passed", reason=f"no error finding, {warns} warning(s)", data=doc)


def _step_verify(ctx: CheckContext) -> StepResult:
    from gpurig.comm.verify import run_verify

    result = run_verify(
        device=ctx.device, nproc=ctx.nproc, out_dir=str(ctx.out_dir / "verify"), quick=ctx.quick, facts=ctx.facts
    )
    data = result.to_dict() if hasattr(result, "to_dict") else result
    failed = [c["name"] for c in data.get("checks", []) if not c.get("passed")]
    if data.get("passed"):
        return StepResult("verify", "passed", reason=f"{len(data.get('checks', []))} checks passed", data=data)
    return StepResult("verify", "failed", reason="failed: " + ", ".join(failed), data=data)


def _size(nbytes: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= factor and nbytes % factor == 0:
            return f"{nbytes // factor} {unit}"
    return f"{nbytes} B"


def _step_bench_comm(ctx: CheckContext) -> StepResult:
    from gpurig.comm.bench import run_bench_comm

    data = run_bench_comm(
        device=ctx.device, nproc=ctx.nproc, out_dir=str(ctx.out_dir / "bench-comm"), short=True, facts=ctx.facts
    )
    data = data.to_dict() if hasattr(data, "to_dict") else data
    results = data.get("results", [])
    mem = data.get("memory")
    if not results and mem:
        host, dev = mem.get("host_link") or {}, mem.get("device_memory") or {}

        def of(eff: float | None, what: str | None) -> str:
            return f" ({eff:.0%} of {what})" if eff is not None and what else ""

        return StepResult(
            "bench comm", "passed" if data.get("ok") else "failed",
            reason=(f"one GPU, no link between GPUs: host → device {mem.get('h2d_gbps', 0):.1f} GB/s"
                    f"{of(mem.get('h2d_efficiency'), host.get('how'))}, device memory {mem.get('d2d_gbps', 0):.0f} GB/s"
                    f"{of(mem.get('d2d_efficiency'), 'its datasheet peak' if dev.get('gbps') else None)}"),
            data=data,
        )
    if not results:
        return StepResult("bench comm", "failed", reason="no measurement came back", data=data)
    best = max(results, key=lambda r: r.get("busbw_gbps") or 0)
    return StepResult(
        "bench comm",
        "passed",
        reason=f"{len(results)} points; best {best['op']} busbw {best.get('busbw_gbps', 0):.2f} GB/s"
               f" at {_size(best['bytes'])}",
        data=data,
    )


def _step_bench_train(ctx: CheckContext) -> StepResult:
    from gpurig.train.bench import run_bench_train

    data = run_bench_train(
        device=ctx.device, nproc=ctx.nproc, out_dir=str(ctx.out_dir / "bench-train"), short=True, facts=ctx.facts
    )
    data = data.to_dict() if hasattr(data, "to_dict") else data
    rows = data.get("results", [])
    if not rows:
        return StepResult("bench train", "failed", reason="no training run completed", data=data)
    last = rows[-1]
    eff = last.get("scaling_efficiency")
    reason = (f"{data.get('workload', 'workload')}: {last.get('samples_per_s_per_device', 0):,.0f} samples/s"
              f" per device at {last.get('nproc')} process(es)")
    if eff is not None and len(rows) > 1:
        reason += f", scaling efficiency {eff:.2f}"
    elif len(rows) == 1:
        reason += " (one process count: no scaling to measure)"
    return StepResult("bench train", "passed", reason=reason, data=data)


def _step_burn(ctx: CheckContext) -> StepResult:
    from gpurig.burn.run import LEVELS, run_burn

    doc = run_burn(device=ctx.device, seconds=LEVELS["quick"], out_dir=ctx.out_dir / "burn")
    counts = {v: sum(1 for g in doc["gpus_judged"] if g["verdict"] == v) for v in ("pass", "watch", "fail")}
    rates = [(g["compute"].get("bf16") or g["compute"].get("fp32") or {}).get("tflops") for g in doc["gpus_judged"]]
    rates = [r for r in rates if r]
    reason = (", ".join(f"{n} {v}" for v, n in counts.items() if n) + f" of {len(doc['gpus_judged'])}"
              + (f"; {min(rates):,.3g}-{max(rates):,.3g} TFLOP/s checked" if rates else ""))
    data = {k: v for k, v in doc.items() if k != "ranks"}
    return StepResult("burn", "passed" if doc["passed"] else "failed", reason=reason, data=data)


STEPS: list[tuple[str, Callable[[CheckContext], StepResult]]] = [
    ("doctor", _step_doctor),
    ("verify", _step_verify),
    ("bench comm", _step_bench_comm),
    ("bench train", _step_bench_train),
]


def _verdicts(summary: dict | None, verify: dict | None, doctor: dict | None) -> list[dict[str, Any]]:
    """Bottleneck verdicts for the short training run, told what verify saw of the transport."""
    if not summary:
        return []
    from gpurig.diagnose.verdicts import training_verdicts

    enriched = dict(summary)
    for entry in ((verify or {}).get("transport") or {}).get("verdict") or []:
        if entry.get("src_gpu") is None or entry.get("dst_gpu") is None:
            continue
        a, b = sorted((entry["src_gpu"], entry["dst_gpu"]))
        enriched.setdefault("transport", {})[f"{a}-{b}"] = entry.get("main")
        if entry.get("link"):
            enriched.setdefault("links", {})[f"{a}-{b}"] = entry["link"]
    found = [f.to_dict() for f in training_verdicts(enriched)]
    summary["verdicts"] = found
    return found


def run_check(ctx: CheckContext, on_step: Callable[[str, StepResult | None], None] | None = None) -> dict[str, Any]:
    """Run every step; returns the `gpurig check --json` document (see `gpurig.report.html`).

    A Ctrl-C or SIGTERM during a step (its workers already stopped) marks that step "interrupted",
    skips the rest and returns at once; the document's `interrupted` names the step and `signal`
    the signal."""
    from gpurig.launch.signals import signal_words

    steps: list[StepResult] = []
    stop_reason = ""
    interrupted: tuple[str, str] | None = None  # (step, signal)
    steps_to_run = list(STEPS)
    if ctx.burn:
        steps_to_run.insert(1, ("burn", _step_burn))  # after the doctor: the hardware before the jobs
    for name, fn in steps_to_run:
        if on_step:
            on_step(name, None)
        if stop_reason:
            res = StepResult(name, "skipped", reason=stop_reason)
        else:
            t0 = time.monotonic()
            try:
                res = fn(ctx)
            except BadInput:
                raise
            except KeyboardInterrupt as exc:
                signame = getattr(exc, "signame", "SIGINT")
                interrupted = (name, signame)
                res = StepResult(name, "interrupted", reason=f"stopped by {signal_words(signame)}")
                stop_reason = f"not run: the check was interrupted during {name}"
            except Exception as exc:  # a step that crashes is a failed step with its reason, not a dead check
                res = StepResult(name, "failed", reason=f"{type(exc).__name__}: {exc}")
                (ctx.out_dir / f"{name.replace(' ', '-')}-error.txt").write_text(traceback.format_exc())
            res.seconds = time.monotonic() - t0
            if name == "doctor" and res.status == "failed":
                stop_reason = f"the doctor found an error ({res.reason}); fix it first: `gpurig doctor`"
        steps.append(res)
        if on_step:
            on_step(name, res)
    by_name = {s.name: s for s in steps}
    doctor = by_name["doctor"].data
    verify = by_name["verify"].data
    bench_comm = by_name["bench comm"].data
    bench_train = by_name["bench train"].data
    train_summary = (bench_train or {}).get("summary") if isinstance(bench_train, dict) else None
    verdicts = _verdicts(train_summary, verify, doctor)
    return {
        "gpurig_version": __version__,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "device": ctx.device_choice.device if ctx.device_choice else ctx.device,
        "passed": all(s.status == "passed" for s in steps),
        **({"interrupted": interrupted[0], "signal": interrupted[1]} if interrupted else {}),
        "steps": [s.summary() for s in steps],
        "doctor": doctor,
        "verify": verify,
        "bench_comm": bench_comm,
        "bench_train": bench_train,
        **({"burn": by_name["burn"].data} if "burn" in by_name else {}),
        "train": train_summary,
        "verdicts": verdicts,
    }
