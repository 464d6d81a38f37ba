"""gpurig from Python: what `import gpurig` offers.

    import gpurig
    gpurig.doctor()    # the `gpurig doctor --json` document: {facts, findings}
    gpurig.verify()    # the `gpurig verify --json` document
    gpurig.check()     # the `gpurig check --json` document (and report.html in its run directory)
    gpurig.fit(build_model, build_data, steps=500)   # `gpurig train --model --data`; see gpurig.train.fit

Each returns the same data as the command's `--json`, as a dict that renders in Jupyter. None of
them initialises CUDA in the calling process: the work runs in child processes, as the commands do.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from gpurig.train.fitting import fit

__all__ = ["check", "doctor", "fit", "verify"]


class Document(dict):
    """A command's `--json` document; in Jupyter, its findings or checks as a table."""

    def _repr_html_(self) -> str:
        if "steps" in self and "verify" in self:  # gpurig check: the whole HTML report
            from gpurig.report.html import render_report

            return render_report(dict(self))
        rows = []
        for f in self.get("findings") or []:
            rows.append((f.get("severity", ""), f.get("title", ""), f.get("fix") or ""))
        for c in self.get("checks") or []:
            rows.append(("passed" if c.get("passed") else "FAILED", c.get("name", ""), c.get("detail") or ""))
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>" for row in rows)
        head = "passed" if self.get("passed") else ("" if "passed" not in self else "FAILED")
        return (f"<p><b>{html.escape(head)}</b></p>" if head else "") + f"<table>{body}</table>"


def doctor(facts_file: str | Path | None = None, refresh: bool = False) -> Document:
    """Judge this machine (or a saved facts snapshot): {"facts": ..., "findings": [...]}, worst first."""
    from gpurig.suite.doctor import doctor_data, doctor_document, gather

    facts = gather(Path(facts_file) if facts_file else None, frameworks=True, use_cache=True, refresh=refresh)
    return Document(doctor_document(*doctor_data(facts)))


def verify(device: str = "auto", nproc: str | int = "auto", out: str | Path | None = None,
           quick: bool = False) -> Document:
    """Prove the GPUs (or two CPU processes) sync correctly: every collective, P2P and the transport."""
    from gpurig.comm.verify import run_verify

    result = run_verify(device=device, nproc=nproc, out_dir=str(out) if out else None, quick=quick)
    return Document(result.to_dict() if hasattr(result, "to_dict") else result)


def check(device: str = "auto", nproc: str | int = "auto", out: str | Path | None = None) -> Document:
    """doctor, verify, a short bench comm and a short bench train, as `gpurig check --json`; the
    report is written to <out>/report.html as the command writes it."""
    from gpurig.errors import BadInput, write_file_atomic
    from gpurig.launch.plan import default_run_dir, resolve_device
    from gpurig.report.html import render_report
    from gpurig.report.output import to_json
    from gpurig.suite.runner import CheckContext, run_check

    choice = resolve_device(device, nproc)
    out_dir = Path(out) if out else Path(default_run_dir("check-"))
    if (out_dir / "check.json").exists():
        raise BadInput(f"check(out={str(out_dir)!r}): holds an earlier check's results; choose another out")
    out_dir.mkdir(parents=True, exist_ok=True)
    ctx = CheckContext(device=choice.device, nproc=str(choice.nproc), out_dir=out_dir, quick=True,
                       echo=lambda _: None, device_choice=choice)
    doc: dict[str, Any] = run_check(ctx)
    write_file_atomic(str(out_dir / "check.json"), to_json(doc) + "\n", "out")
    write_file_atomic(str(out_dir / "report.html"), render_report(doc), "out")
    return Document(doc)
