"""The training decisions of the TensorFlow trainer (precision, global batch), as small pure functions.

Each function takes what the machine is (device kind, compute capabilities, GPU count, P2P facts,
environment variables) and returns a `Choice` that says what was picked and why. The worker applies
them; `gpurig train --framework tf` prints them, so a user on a GPU machine can check each one.
Nothing here imports TensorFlow, so these run and are tested anywhere.
"""

from __future__ import annotations

import re

from gpurig.errors import BadInput
from gpurig.launch.tfjob import Choice

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
LOOPS = ("custom", "fit")


def _capability(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", str(text))
    return (int(m.group(1)), int(m.group(2))) if m else None


def precision_policy(device: str, compute_capabilities: list[str | None], requested: str = "auto") -> Choice:
    """The Keras mixed-precision policy for this run.

    `auto`: `mixed_bfloat16` when every GPU is compute capability 8.0 or newer (Ampere, Hopper:
    bf16 Tensor Cores, no loss scaling needed), `mixed_float16` with loss scaling on 7.x (Volta,
    Turing: fp16 Tensor Cores only), `float32` below 7.0 and on the CPU. The slowest GPU decides,
    since every replica runs the same graph. The output layer stays float32 in every policy.

    >>> precision_policy("gpu", ["9.0", "9.0"]).value
    'mixed_bfloat16'
    """
    if requested not in PRECISIONS:
        raise BadInput(f"precision: must be one of {', '.join(PRECISIONS)}, got {requested!r}")
    if device == "cpu":
        if requested in ("bf16", "fp16"):
            raise BadInput(
                f"precision={requested}: mixed precision is for GPUs; on the CPU it is slower than float32 "
                "(use precision=auto or fp32)"
            )
        return Choice("precision", "float32", "CPU run: float32 (mixed precision only pays off on GPU Tensor Cores)")
    caps = [_capability(c) for c in compute_capabilities]
    known = [c for c in caps if c is not None]
    lowest = min(known) if known else None
    shown = f"{lowest[0]}.{lowest[1]}" if lowest else "unknown"
    if requested == "fp32":
        return Choice("precision", "float32", "asked for fp32")
    if requested == "bf16":
        if lowest is not None and lowest < (8, 0):
            raise BadInput(
                f"precision=bf16: needs compute capability 8.0 or newer, the slowest GPU here is {shown} "
                "(use precision=fp16 or auto)"
            )
        return Choice("precision", "mixed_bfloat16", "asked for bf16")
    if requested == "fp16":
        return Choice("precision", "mixed_float16", "asked for fp16; dynamic loss scaling on")
    if lowest is None:
        return Choice("precision", "float32", "compute capability unknown: float32 to be safe")
    if lowest >= (8, 0):
        return Choice(
            "precision", "mixed_bfloat16",
            f"compute capability {shown} >= 8.0: bf16 Tensor Cores, same range as float32, no loss scaling",
        )
    if lowest >= (7, 0):
        return Choice(
            "precision", "mixed_float16",
            f"compute capability {shown} (7.x): fp16 Tensor Cores; dynamic loss scaling keeps small gradients",
        )
    return Choice("precision", "float32", f"compute capability {shown} < 7.0: no Tensor Cores, float32")


def needs_loss_scaling(policy: str) -> bool:
    """float16 has a narrow exponent range: gradients underflow without loss scaling. bf16 does not."""
    return policy == "mixed_float16"


def global_batch(batch_size_per_device: int, replicas_per_worker: int, workers: int) -> Choice:
    """Global batch = per-replica batch x replicas x workers (the TensorFlow tutorials' GLOBAL_BATCH_SIZE)."""
    if batch_size_per_device < 1:
        raise BadInput(f"batch_size: must be at least 1, got {batch_size_per_device}")
    total = batch_size_per_device * replicas_per_worker * workers
    parts = f"{batch_size_per_device} per replica x {replicas_per_worker} replicas"
    if workers > 1:
        parts += f" x {workers} workers"
    return Choice("global_batch", total, parts)


def check_dataset_fits(dataset_size: int, global_batch_size: int, dataset: str) -> None:
    """One step needs a full global batch; say the arithmetic when the data set is smaller."""
    if dataset_size < global_batch_size:
        raise BadInput(
            f"batch_size: the global batch {global_batch_size} is larger than the {dataset_size} "
            f"training examples of dataset {dataset!r}; lower batch_size"
        )


# ----- many machines: where TF_CONFIG comes from ---------------------------------------------------


