"""What `dcgmi diag -j` said, per GPU: the results of NVIDIA's own diagnostic, read for `gpurig burn --dcgm`.

DCGM prints one of two document shapes, and a banner line may precede either:

- DCGM 3.x: `{"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name",
  "results": [{"gpu_ids" | "gpu_id": "0", "status": "Pass", "warnings": ["..."]}]}]}], "version"}}`
- DCGM 4.x: `{"DCGM Diagnostic": {"test_categories": [... {"results": [{"entity_group": "GPU",
  "entity_id": 0, "status": "Fail", "warnings": [{"warning": "...", "error_id": 29}]}]}]},
  "metadata": {"version": "4.2.3", "Driver Version Detected": "..."}}` (some builds put `tests` at
  the top level).

A status word this reader does not know is never read as a pass. A failed "Deployment"/"software"
test is about the node's settings (persistence mode off, a library missing), not the silicon: it is
reported, but as something to watch, not a failed GPU.
"""

from __future__ import annotations

import json
from typing import Any

STATUSES = {"pass": "pass", "fail": "fail", "warn": "warn", "warning": "warn", "skip": "skip", "skipped": "skip",
            "not run": "not run"}
SETTINGS_TESTS = {"software", "denylist", "nvml library", "cuda main library", "permissions and os blocks",
                  "persistence mode", "environmental variables", "page retirement/row remap", "graphics processes",
                  "inforom"}


def _document(text: str) -> dict[str, Any]:
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise ValueError("no JSON document in dcgmi's output")
    doc = json.loads(text[start:end + 1])
    if not isinstance(doc, dict):
        raise ValueError("dcgmi's output is not a JSON object")
    return doc


def _warnings(result: dict[str, Any]) -> list[str]:
    out = []
    for w in result.get("warnings") or []:
        text = w.get("warning") if isinstance(w, dict) else w
        if text:
            out.append(str(text).strip())
    return out


def _gpus(result: dict[str, Any]) -> list[int] | None:
    """The GPUs a result is about; [] when it names none (it is about all of them); None when it is
    about another kind of entity (a CPU, an NVSwitch)."""
    if str(result.get("entity_group", "GPU")).upper() != "GPU":
        return None
    if "entity_id" in result:
        return [int(result["entity_id"])]
    ids = result.get("gpu_id", result.get("gpu_ids"))
    if ids is None:
        return []
    return [int(x) for x in str(ids).split(",") if x.strip().isdigit()]


def parse_dcgm_diag(text: str) -> dict[str, Any]:
    """{"version", "results": [{"test", "category", "gpu", "status", "warnings"}]} from `dcgmi diag -j`
    output; ValueError when it holds no result document."""
    doc = _document(text)
    body = next((v for k, v in doc.items() if isinstance(v, dict) and "test_categories" in v), None)
    if body is not None:
        categories = body["test_categories"]
    elif isinstance(doc.get("tests"), list):
        categories = [{"category": None, "tests": doc["tests"]}]
    else:
        raise ValueError("dcgmi's document has no test results")
    meta = doc.get("metadata") or {}
    version = (body or {}).get("version") or meta.get("version") or doc.get("version")
    results = []
    for cat in categories:
        for test in cat.get("tests") or []:
            for res in test.get("results") or []:
                word = str(res.get("status", "")).strip().lower()
                gpus = _gpus(res)
                if gpus is None:
                    continue
                for gpu in gpus or [None]:
                    results.append({"test": test.get("name"), "category": cat.get("category"), "gpu": gpu,
                                    "status": STATUSES.get(word, f"unknown ({res.get('status')})"),
                                    "warnings": _warnings(res)})
    return {"version": version, "results": results}


def dcgm_findings(parsed: dict[str, Any], gpu: int) -> list[dict[str, Any]]:
    """[{severity: fail|watch, title, detail, test}] for one GPU (its NVML index, which DCGM uses)."""
    out = []
    for r in parsed.get("results") or []:
        if r["gpu"] not in (gpu, None) or r["status"] in ("pass", "skip", "not run"):
            continue
        settings = (r["category"] or "").lower() == "deployment" or (r["test"] or "").lower() in SETTINGS_TESTS
        severity = "fail" if r["status"] == "fail" and not settings else "watch"
        out.append({"severity": severity, "test": r["test"], "status": r["status"],
                    "title": f"DCGM's {r['test']} test: {r['status']}",
                    "detail": "; ".join(r["warnings"]) or "dcgmi gave no reason"})
    return out
