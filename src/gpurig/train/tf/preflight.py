"""Before a TensorFlow run: is TensorFlow installed, and does it see the GPUs the doctor sees?

`tf_preflight(facts)` judges a `RigFacts` snapshot (TensorFlow probed in a child process by the
doctor), so this process never imports TensorFlow. It raises `BadInput` with the install command,
or with the likely cause taken from the doctor's own findings.
"""

from __future__ import annotations

import importlib.util

from gpurig.errors import BadInput
from gpurig.probe.facts import RigFacts

INSTALL_CPU = "pip install 'gpurig[tf]'"
INSTALL_GPU = "pip install 'tensorflow[and-cuda]'"


def _doctor_causes(findings: list | None) -> list[str]:
    """The doctor's error/warn findings about TensorFlow, the driver or GPU visibility, worst first.

    The caller (the command layer) judges the facts and passes the findings in: this module sits
    below `gpurig.diagnose` and does not import it.
    """
    order = {"error": 0, "warn": 1}
    causes = []
    for f in sorted(findings or [], key=lambda f: order.get(f.severity, 2)):
        if f.severity not in ("error", "warn") or f.id.startswith("torch-"):
            continue
        text = f"{f.id} {f.title} {f.area}".lower()
        if any(k in text for k in ("tensorflow", "tf-", "driver", "visible", "cuda", "cudnn", "container")):
            causes.append(f"{f.title}" + (f" (fix: {f.fix})" if f.fix else ""))
    return causes


def tf_preflight(facts: RigFacts | None, device: str = "auto", findings: list | None = None) -> None:
    """Raise `BadInput` when TensorFlow is missing or cannot see the GPUs NVML shows; else return.

    `device` is the run's `--device`: with "cpu" only the installation matters. `findings` are the
    doctor's findings on `facts` (`gpurig.diagnose.rules.judge`), quoted as the likely cause.
    """
    tf_facts = facts.frameworks.tensorflow if facts is not None else None
    probed = facts is not None and facts.frameworks.probed
    installed = tf_facts.installed if probed and tf_facts else importlib.util.find_spec("tensorflow") is not None
    if not installed:
        detail = f" ({tf_facts.error})" if tf_facts and tf_facts.error else ""
        raise BadInput(
            f"--framework tf: TensorFlow is not installed{detail}. Install it with {INSTALL_CPU} "
            f"(CPU), or {INSTALL_GPU} on a GPU machine"
        )
    if facts is None or device == "cpu":
        return
    gpus_seen = len(facts.gpus)
    if gpus_seen == 0:
        if device == "cuda":
            raise BadInput("--device cuda: no GPU is visible (run `gpurig doctor` to see why)")
        return
    if not probed or tf_facts is None:
        return  # the worker checks again once TensorFlow is imported, and says the same
    tf_gpus = len(tf_facts.gpus or [])
    if tf_gpus >= gpus_seen:
        return
    if tf_facts.error:
        cause = f"TensorFlow failed in the probe: {tf_facts.error}"
    elif tf_facts.built_with_cuda is False:
        cause = (f"TensorFlow {tf_facts.version or ''} is a CPU-only build (tensorflow-cpu, or a wheel without "
                 f"CUDA); install {INSTALL_GPU}").replace("  ", " ")
    else:
        causes = _doctor_causes(findings)
        cause = ("the doctor says: " + "; ".join(causes[:3])) if causes else (
            f"TensorFlow {tf_facts.version or ''} could not load its CUDA/cuDNN libraries or the driver is too old "
            f"for them; run `gpurig doctor` and check {INSTALL_GPU}"
        ).replace("  ", " ")
    raise BadInput(
        f"--framework tf: TensorFlow sees {tf_gpus} GPU(s) but the machine shows {gpus_seen}: {cause}. "
        "Use --device cpu to train on the CPU instead"
    )
