"""The environment variables that change how CUDA, NCCL, PyTorch and TensorFlow behave.

Only variables that matter for multi-GPU work are kept, so a saved snapshot carries no unrelated
(possibly private) settings of the user's shell.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# Kept by exact name.
NAMES = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "CUDA_LAUNCH_BLOCKING",
    "CUDA_MODULE_LOADING",
    "CUDA_HOME",
    "NVIDIA_VISIBLE_DEVICES",  # set by the NVIDIA container runtime
    "NVIDIA_DRIVER_CAPABILITIES",
    "OMP_NUM_THREADS",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "PYTORCH_NVML_BASED_CUDA_CHECK",
    "LD_LIBRARY_PATH",
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GLOO_SOCKET_IFNAME",
)

# Kept by prefix: every NCCL knob, torch/torchelastic settings, TensorFlow settings.
PREFIXES = ("NCCL_", "TORCH_", "TORCHELASTIC_", "TF_")


def collect_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables that matter, sorted by name.

    >>> collect_env({"NCCL_P2P_DISABLE": "1", "HOME": "/root"})
    {'NCCL_P2P_DISABLE': '1'}
    """
    env = os.environ if environ is None else environ
    kept = {k: v for k, v in env.items() if (k in NAMES or k.startswith(PREFIXES))}
    return dict(sorted(kept.items()))
