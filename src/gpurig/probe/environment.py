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

# TensorFlow's variables, by name: a bare "TF_" prefix would also take Terraform's TF_VAR_* and
# TF_TOKEN_* (credentials) into a snapshot meant to be sent to a colleague.
TF_NAMES = (
    "TF_CONFIG",
    "TF_CPP_MIN_LOG_LEVEL",
    "TF_CPP_MAX_VLOG_LEVEL",
    "TF_CPP_VMODULE",
    "TF_FORCE_GPU_ALLOW_GROWTH",
    "TF_GPU_ALLOCATOR",
    "TF_GPU_THREAD_MODE",
    "TF_GPU_THREAD_COUNT",
    "TF_GPU_HOST_MEM_LIMIT_IN_MB",
    "TF_FORCE_UNIFIED_MEMORY",
    "TF_ENABLE_ONEDNN_OPTS",
    "TF_XLA_FLAGS",
    "TF_USE_LEGACY_KERAS",
    "TF_DETERMINISTIC_OPS",
    "TF_CUDNN_DETERMINISTIC",
    "TF_CUDNN_USE_AUTOTUNE",
    "TF_ENABLE_AUTO_MIXED_PRECISION",
    "TF_NUM_INTEROP_THREADS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_COLLECTIVE_OPS_IMPLEMENTATION",
)

# Kept by prefix: every NCCL knob, torch/torchelastic settings.
PREFIXES = ("NCCL_", "TORCH_", "TORCHELASTIC_")


def collect_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables that matter, sorted by name.

    >>> collect_env({"NCCL_P2P_DISABLE": "1", "HOME": "/root"})
    {'NCCL_P2P_DISABLE': '1'}
    """
    env = os.environ if environ is None else environ
    kept = {k: v for k, v in env.items() if (k in NAMES or k in TF_NAMES or k.startswith(PREFIXES))}
    return dict(sorted(kept.items()))
