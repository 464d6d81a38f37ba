"""The environment variables a snapshot keeps, and those it must not."""

from __future__ import annotations

from gpurig.probe.environment import collect_env


def test_keeps_the_variables_that_change_multi_gpu_behaviour():
    env = {
        "CUDA_VISIBLE_DEVICES": "0,1", "CUDA_DEVICE_ORDER": "FASTEST_FIRST", "NCCL_P2P_DISABLE": "1",
        "NCCL_DEBUG": "INFO", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "TORCHELASTIC_RESTART_COUNT": "0",
        "TF_FORCE_GPU_ALLOW_GROWTH": "true", "TF_CONFIG": "{}", "OMP_NUM_THREADS": "1",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
    }
    assert collect_env(env) == dict(sorted(env.items()))


def test_drops_unrelated_and_look_alike_variables():
    env = {"HOME": "/root", "PATH": "/usr/bin", "TF_VAR_region": "eu", "TF_TOKEN_app_terraform_io": "secret",
           "TF_CLI_CONFIG_FILE": "/root/.terraformrc", "AWS_SECRET_ACCESS_KEY": "x", "NCCL": "not a knob"}
    assert collect_env(env) == {}


def test_output_is_sorted_by_name():
    assert list(collect_env({"NCCL_B": "1", "CUDA_VISIBLE_DEVICES": "0", "NCCL_A": "1"})) == [
        "CUDA_VISIBLE_DEVICES", "NCCL_A", "NCCL_B"]
