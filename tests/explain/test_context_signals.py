"""Context that tells a failure from its near relatives: the lines around the error (a frame, a
device the user chose, a line of nvidia-smi) that a reader uses to name the cause, read by the
catalogue on excerpts of real logs."""

from __future__ import annotations

from gpurig.diagnose.explain import explain_text


def _first(log: str) -> str | None:
    matches = explain_text(log, index=None).matches
    return matches[0].id if matches else None


def test_memory_taken_on_gpu0_by_a_process_put_on_another_gpu_is_a_stray_context():
    # https://github.com/jayleicn/TVQA/issues/6
    assert _first("When I let device =1 in config.py, the program always occupies GPU 0 for ~600MB memory.\n") \
        == "stray-context-on-gpu0"
    # https://github.com/pytorch/pytorch/issues/8480
    assert _first("I want to only use GPU:1 to train my model. I put the gru layer and input tensor to the cuda:1. "
                  "After I feed the data into gru layer there, pytorch will allocate some memory on GPU:0.\n") \
        == "stray-context-on-gpu0"
    # Memory compared with GPU 0's, not taken on it: no reading.
    assert _first("I set device = 1, but the model still allocates more memory than GPU 0 had.\n") is None


def test_an_illegal_access_in_the_repositorys_own_nms_kernel_is_the_kernel_on_the_wrong_device():
    # https://github.com/open-mmlab/mmdetection/pull/1603
    log = ("RuntimeError: cuda runtime error (700) : an illegal memory access was encountered at "
           "mmdet/ops/nms/src/nms_kernel.cu:103\n")
    assert _first(log) == "custom-kernel-wrong-device"
    # https://github.com/facebookresearch/maskrcnn-benchmark/pull/537
    log = ("maskrcnn_benchmark.trainer INFO: Start training\nTHCudaCheck FAIL file=maskrcnn_benchmark/csrc/cuda/nms.cu "
           "line=103 error=77 : an illegal memory access was encountered\n")
    assert _first(log) == "custom-kernel-wrong-device"
    # An illegal access with no kernel of the repository named stays the general reading.
    assert _first("RuntimeError: CUDA error: an illegal memory access was encountered\n") == "cuda-illegal-memory-access"


def test_the_watchdogs_backtrace_through_check_timeout_is_a_collective_timeout():
    # https://github.com/jpata/particleflow/issues/390 (the message itself cut off; the frames remain)
    log = ("frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
           "std::ratio<1l, 1000l> > >) + 0x1d2 (0x1554e9e0f8f2 in libtorch_cuda.so)\n"
           "frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x233 (0x1554e9e16333 in libtorch_cuda.so)\n"
           "frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x10c (0x1554e9e1871c in libtorch_cuda.so)\n\n"
           "Exception raised from ncclCommWatchdog at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1521 "
           "(most recent call first):\n")
    assert _first(log) == "nccl-watchdog-timeout"


def test_cuda_error_802_named_by_its_number_is_the_fabric_manager():
    # https://github.com/aws-samples/aws-deep-learning-ami-ubuntu-dcv-desktop/issues/33
    assert _first("CUDA initialization fails with 802 system error owing to lack of nvidia-fabricmanager install\n") \
        == "fabric-manager-not-running"
    # 802 as an amount is not the error.
    assert _first("CUDA error: out of memory; tried to allocate 802 MiB\n") == "cuda-out-of-memory"


def test_nvidia_smi_without_a_cuda_version_is_an_image_that_asks_for_no_compute_libraries():
    # https://github.com/NVIDIA/nvidia-docker/issues/1198
    assert _first("| NVIDIA-SMI 440.59       Driver Version: 440.59       CUDA Version: N/A      |\n") \
        == "image-missing-nvidia-env"
    assert _first("| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |\n") is None


def test_a_checkpoint_moved_or_removed_under_a_saving_process_is_a_save_race_between_ranks():
    # https://github.com/huggingface/pytorch-image-models/pull/693
    assert _first("FileNotFoundError: [Errno 2] No such file or directory: 'output/timm_confs/effnet_b0.txt/tmp.pth.tar' "
                  "-> 'output/timm_confs/effnet_b0.txt/last.pth.tar'\n") == "checkpoint-save-race-between-ranks"
    # https://github.com/huggingface/transformers/issues/20988
    assert _first("FileNotFoundError: [Errno 2] No such file or directory: 'rng_state_1.pth'\n") \
        == "checkpoint-save-race-between-ranks"
    # https://github.com/huggingface/transformers/issues/36076
    assert _first('[rank1]:   File "/lib/python3.11/site-packages/transformers/trainer.py", line 3035, in '
                  "_maybe_log_save_evaluate\nOSError: [Errno 39] Directory not empty\n") == "checkpoint-save-race-between-ranks"
    # A checkpoint that is simply not there (a wrong path to resume from) is not a race.
    assert _first("FileNotFoundError: [Errno 2] No such file or directory: 'checkpoints/last.pth.tar'\n") is None


def test_stop_iteration_next_to_data_parallel_is_a_replica_without_parameters():
    # https://github.com/dmis-lab/GeNER/issues/3
    assert _first("StopIteration raised from outputs = model(**inputs) inside torch/nn/parallel/data_parallel.py "
                  "DataParallel.forward during self-training (run_self_training_ner.py)\n") \
        == "dataparallel-replica-no-parameters"
    # https://github.com/huggingface/transformers/pull/10215
    assert _first("With PyTorch's DataParallel, it is not possible to simply iterate over parameters in order to find "
                  "the `nn.Module`'s dtype or device.\nSome efforts were made to catch the error (`StopIteration`) in "
                  "most cases, but the some were forgotten.\n") == "dataparallel-replica-no-parameters"
    assert _first("model = DistributedDataParallel(model)\nStopIteration\n") is None


def test_processes_said_to_run_on_the_same_gpu_are_ranks_sharing_a_device():
    # https://github.com/facebookincubator/submitit/issues/1704
    assert _first("Submitit puts all tasks on a single GPU\n") == "duplicate-gpu"
    # https://github.com/mpi4jax/mpi4jax/issues/194
    assert _first("I found the two processes are running on the same GPU.\n") == "duplicate-gpu"
    assert _first("AssertionError: MMDataParallel only supports single GPU training\n") != "duplicate-gpu"


def test_a_failure_after_nccl_loaded_its_topology_from_a_file_is_the_injected_topology():
    # https://github.com/NVIDIA/nccl/issues/1008
    log = ("a100-4x-machines-23fsd-2-dev:648288:648307 [1] NCCL INFO Loading topology file /opt/microsoft/ncv4/topo.xml\n"
           "a100-4x-machines-23fsd-2-dev:648288:648307 [1] NCCL INFO Loading unnamed topology\n"
           "it works fine. However when I set -g2 or -g3 it fails with an error:  "
           "Test NCCL failure common.cu:953 'unhandled system error.\n")
    assert _first(log) == "nccl-bad-env-setting"
    # The same line in a run that worked says nothing.
    assert _first("node1:6482:6483 [1] NCCL INFO Loading topology file /opt/microsoft/ncv4/topo.xml\n") is None


def test_jax_finding_no_gpu_backend_at_all_is_a_missing_cuda_plugin():
    # https://github.com/gladiaio/gladia/issues/927 (xla_bridge's warning of older jax releases)
    log = ("2022-11-30 12:50:08,211 - jax._src.lib.xla_bridge - WARNING - No GPU/TPU found, falling back to CPU. "
           "(Set TF_CPP_MIN_LOG_LEVEL=0 and rerun for more info.)\n")
    assert _first(log) == "jax-cuda-plugin-missing"
    # https://github.com/jax-ml/jax/issues/17634
    assert _first("jax 0.4.6 does not provide the extra 'cuda12_pip' | No GPU/TPU found, falling back to CPU\n") \
        == "jax-cuda-plugin-missing"


def _notice(log: str) -> str | None:
    result = explain_text(log, index=None)
    return result.benign[0].id if not result.matches and result.benign else None


def test_open_mpi_finding_no_infiniband_interface_is_a_harmless_notice():
    # https://github.com/espressopp/espressopp/issues/183
    log = ("[[59756,1],0]: A high-performance Open MPI point-to-point messaging module\n"
           "was unable to find any relevant network interfaces:\n\nModule: OpenFabrics (openib)\n  Host: pd\n\n"
           "Another transport will be used instead, although this may result in\nlower performance.\n")
    assert _notice(log) == "openmpi-openib-no-interface-notice"


def test_torchruns_master_addr_notice_is_harmless():
    # https://github.com/pytorch/pytorch/pull/114335
    log = ("$ python -u -m torch.distributed.run --nproc_per_node=1 --rdzv_endpoint localhost:6000  --rdzv_backend c10d test.py\n"
           "master_addr is only used for static rdzv_backend and when rdzv_endpoint is not specified\n")
    assert _notice(log) == "torchrun-master-addr-notice"


def test_tensorflows_virtual_gpu_nccl_fallback_is_a_harmless_notice():
    # https://github.com/tensorflow/tensorflow/issues/40735
    assert _notice("NCCL is not supported when using virtual GPUs, fallingback to reduction to one device\n") \
        == "tf-nccl-virtual-gpu-fallback-notice"


def test_xlas_driver_older_than_ptxas_warning_is_a_harmless_notice():
    # https://github.com/YoshitakaMo/localcolabfold/issues/126 (the version cut by the paste's line wrap)
    log = ("2022-12-16 18:31:30.311235: W external/org_tensorflow/tensorflow/compiler/xla/service/gpu/nvptx_compiler.cc:497]"
           " The NVIDIA driver's CUDA version is 11.\n0 which is older than the ptxas CUDA version (11.6.124). Because the "
           "driver is older than the ptxas version, XLA is disabling parallel compilation, whic\nh may slow down compilation.\n")
    assert _notice(log) == "xla-driver-older-than-ptxas-notice"


def test_mpirun_missing_a_variable_to_forward_is_a_harmless_notice():
    # https://github.com/horovod/horovod/pull/1087
    assert _notice('Warning: could not find environment variable "OLDPWD"\n') == "mpirun-env-var-missing-notice"


def test_a_skipped_fp16_step_with_a_large_loss_scale_is_a_normal_notice():
    # https://github.com/LEEYOONHYUNG/BVAE-TTS/issues/3
    assert _notice("Gradient overflow. Skipping step, loss scaler 0 reducing loss scale to 32768.0\n") \
        == "amp-loss-scale-notice"
    # A scale falling to 1 is no longer normal.
    falling = "".join(f"Gradient overflow. Skipping step, loss scaler 0 reducing loss scale to {2.0 ** k}\n" for k in range(15, -1, -1))
    assert _notice(falling) is None


def test_data_parallel_failing_to_gather_uneven_replicas_is_a_partial_batch():
    # https://github.com/huggingface/transformers/pull/4757
    log = ("RuntimeError: Gather got an input of invalid size: got [2, 1, 20, 256, 64], but expected [2, 2, 20, 256, 64] "
           "(gather at /AWS-PyTorch/torch/csrc/cuda/comm.cpp:231)\n")
    assert _first(log) == "dataparallel-partial-last-batch"
    # https://github.com/Morizeyao/GPT2-Chinese/issues/118
    assert _first("RuntimeError: Gather got an input of invalid size:\n") == "dataparallel-partial-last-batch"


def test_nvidia_smi_not_found_in_other_words_is_a_container_without_a_gpu():
    # https://github.com/mmartial/ComfyUI-Nvidia-Docker/issues/57
    assert _first("!! ERROR: nvidia-smi not found\n") == "container-no-gpu-requested"


def test_a_remote_shell_without_orted_is_open_mpi_missing_from_the_remote_path():
    # https://github.com/open-mpi/ompi/issues/599
    log = ("bash: orted: command not found\n" + "-" * 74 + "\nORTE was unable to reliably start one or more daemons.\n")
    assert _first(log) == "mpi-orted-not-found-remote"


def test_updating_a_mirrored_variable_without_aggregation_is_named():
    # https://github.com/mlcommons/training/issues/204
    assert _first("ValueError: You must specify an aggregation method to update a MirroredVariable in Tower Context.\n") \
        == "tf-mirrored-variable-no-aggregation"


def test_horovodrun_not_recognising_mpirun_is_named():
    # https://github.com/tlkh/ai-lab/issues/26
    log = ("Open MPI not found in output of mpirun --version.\nTraceback (most recent call last):\n"
           "Exception: horovodrun convenience script does not find an installed OpenMPI.\n")
    assert _first(log) == "horovodrun-openmpi-not-detected"


def test_deepspeed_finding_no_latest_file_is_no_engine_checkpoint_to_resume():
    # https://github.com/tdrussell/diffusion-pipe/issues/159
    log = ("[2025-03-16 18:48:13,525] [WARNING] [engine.py:2914:load_checkpoint] Unable to find latest file at "
           "/runs/lora/20250316_15-44-14/latest, if trying to load latest checkpoint please ensure this file exists or "
           "pass an explicit checkpoint tag when loading a checkpoint.\n")
    assert _first(log) == "deepspeed-resume-missing-engine-state"


def test_tensorflow_without_the_nccl_op_is_a_build_without_nccl():
    # https://github.com/tensorflow/tensorflow/issues/21470
    assert _first("Op type not registered 'NcclAllReduce' in binary running on Windows10.\n") == "nccl-not-built-in"


def test_lightnings_second_line_alone_still_names_gpus_the_process_cannot_see():
    # https://github.com/ray-project/ray_lightning/issues/32
    log = "(pid=1521966)  But your machine only has: [0]\n(pid=1521966) Exception in thread Thread-2:\n"
    assert _first(log) == "lightning-requested-gpus-unavailable"


def test_ssh_stopping_at_the_host_key_prompt_is_a_launcher_that_cannot_log_in():
    # https://github.com/FlagAI-Open/Aquila2/issues/92
    log = ("Master node: 172.21.0.17\nStarting node 0/1: 172.21.0.17\n"
           "The authenticity of host '172.21.0.17 (172.21.0.17)' can't be established.\n"
           "ED25519 key fingerprint is SHA256:A0VIuh9eIWnoJ2ty4WE/pixJOnBY3aX8KBQw/OjXQCA.\n")
    assert _first(log) == "launcher-ssh-auth"


def test_processes_that_also_allocate_on_one_gpu_are_not_read_as_ranks_sharing_it():
    # The other ranks' stray contexts on GPU 0 (stray-context-on-gpu0), not two ranks on one device.
    assert _first("All processes also allocate memory on the same GPU 0.\n") != "duplicate-gpu"
