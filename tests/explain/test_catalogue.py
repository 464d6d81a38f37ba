"""The error catalogue: every entry matches the real messages it lists and none of its near misses,
and every row of the reference table of errors users meet is covered."""

from __future__ import annotations

import re

import pytest

from gpurig.diagnose.catalogue import (
    CatalogueError,
    hidden_by,
    load_catalogue,
    match_catalogue,
    match_entry,
    parse_catalogue,
)
from gpurig.diagnose.explain import explain_text

CATALOGUE = load_catalogue()
EXAMPLES = [(e.id, i, ex) for e in CATALOGUE for i, ex in enumerate(e.examples)]
NEAR_MISSES = [(e.id, i, nm) for e in CATALOGUE for i, nm in enumerate(e.near_misses)]
BY_ID = {e.id: e for e in CATALOGUE}


def test_every_entry_is_complete_and_sourced():
    assert len(CATALOGUE) >= 30
    for e in CATALOGUE:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", e.id), e.id
        assert e.examples, f"{e.id} has no example message"
        assert e.near_misses, f"{e.id} has no near miss"
        assert e.source.strip(), f"{e.id} has no source"
        assert e.cause and e.fix and e.title
        assert 0 < e.confidence <= 1


@pytest.mark.parametrize("entry_id, index, example", EXAMPLES, ids=[f"{e}-{i}" for e, i, _ in EXAMPLES])
def test_example_matches_its_entry(entry_id, index, example):
    match = match_entry(BY_ID[entry_id], example)
    assert match is not None, f"{entry_id} does not match its example {index}"
    assert match.evidence  # the line it was read from
    # ... and the whole explainer puts it among its answers (or a more specific entry that hides it).
    ids = [m.id for m in match_catalogue(example, benign=True)]
    assert entry_id in ids or any(entry_id in hidden_by(i) for i in ids)


@pytest.mark.parametrize("entry_id, index, near_miss", NEAR_MISSES, ids=[f"{e}-{i}" for e, i, _ in NEAR_MISSES])
def test_near_miss_does_not_match(entry_id, index, near_miss):
    assert match_entry(BY_ID[entry_id], near_miss) is None


# The reference table (errors users meet on multi-GPU machines): each row's message as users see
# it, and the entry that must explain it.
REFERENCE_ROWS = [
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 23.55 GiB", "cuda-out-of-memory"),
    ("ResourceExhaustedError: OOM when allocating tensor with shape[64,3,224,224]", "tf-resource-exhausted-oom"),
    ("Could not create cudnn handle: CUDNN_STATUS_INTERNAL_ERROR", "tf-cudnn-handle"),
    ("RuntimeError: Physical devices cannot be modified after being initialized", "tf-devices-already-initialized"),
    ("Could not load dynamic library 'libcudnn.so.8'; dlerror: libcudnn.so.8: cannot open shared object file", "cuda-library-not-found"),
    ("ImportError: libcudart.so.11.0: cannot open shared object file: No such file or directory", "cuda-library-not-found"),
    ("The NVIDIA driver on your system is too old (found version 11040)", "driver-too-old"),
    ("CUDA driver version is insufficient for CUDA runtime version", "driver-too-old"),
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device", "no-kernel-image"),
    ("NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation.", "no-kernel-image"),
    ("CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected", "no-cuda-device"),
    ("torch.cuda.is_available() returns False", "no-cuda-device"),
    ("RuntimeError: CUDA error: invalid device ordinal", "invalid-device-ordinal"),
    ("RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable", "device-busy"),
    ("RuntimeError: CUDA error: system not yet initialized", "fabric-manager-not-running"),
    ("Failed to initialize NVML: Driver/library version mismatch", "nvml-driver-mismatch"),
    ("nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: cannot open shared object file", "container-toolkit-missing"),
    ('docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].', "container-toolkit-missing"),
    ("RuntimeError: DataLoader worker (pid 1234) is killed by signal: Bus error.", "shared-memory-bus-error"),
    ("Bus error (core dumped)", "shared-memory-bus-error"),
    ("RuntimeError: DataLoader worker (pid 1234) is killed by signal: Killed.", "host-out-of-memory-killed"),
    ("ChildFailedError\n  exitcode  : -9 (pid: 4321)", "host-out-of-memory-killed"),
    ("NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details)", "nccl-system-error"),
    ("ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.", "nccl-system-error"),
    ("failed to open CUDA IPC handle : 217 peer access is not supported between these two devices", "p2p-not-supported"),
    ("NCCL INFO comm 0x1 rank 0 nranks 2 - Init COMPLETE\n[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600042 milliseconds before timing out.", "hang-after-nccl-init"),
    ("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=57, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600013 milliseconds before timing out.", "nccl-watchdog-timeout"),
    ("The server socket has failed to listen on any local network address. The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).", "rendezvous-port-in-use"),
    ("RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one.", "ddp-unused-parameters"),
    ("Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000", "duplicate-gpu"),
    ("NCCL WARN Bootstrap : no socket interface found", "nccl-socket-interface"),
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "ecc-uncorrectable"),
    ("NVRM: Xid (PCI:0000:b1:00): 79, pid=1911, GPU has fallen off the bus.", "gpu-fell-off-bus"),
    ("INFO:tensorflow:Using MirroredStrategy with devices ('/job:localhost/replica:0/task:0/device:GPU:0', '/job:localhost/replica:0/task:0/device:GPU:1')\nthe first epoch stalls, no progress", "tf-mirrored-strategy-stall"),
    ("  exitcode  : -6 (pid: 77)", "worker-aborted"),
    ("  exitcode  : -11 (pid: 77)", "worker-segfault"),
    ("  exitcode  : -7 (pid: 77)", "shared-memory-bus-error"),
    # Older and other wordings of the same causes, as real logs print them.
    ("ValueError: `FlatParameter` requires uniform `requires_grad`", "fsdp-mixed-dtype"),
    ("RuntimeError: PyTorch built without distributed support", "torch-distributed-unavailable"),
    ("RuntimeError: arguments are located on different GPUs at /pytorch/aten/src/THC/generic/THCTensorMathBlas.cu:236",
     "tensors-on-different-devices"),
    ("RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error",
     "gloo-socket-interface"),
    ("    store = TCPStore(master_addr, master_port, start_daemon)\nValueError: host not found: Name or service not known",
     "rendezvous-hostname-unresolvable"),
    ("sbatch: error: Batch job submission failed: Requested node configuration is not available", "slurm-gres-request-invalid"),
    ("nvidia-container-cli: mount error: failed to add device rules: unable to find any existing device filters attached "
     "to the cgroup: bpf_prog_query(BPF_CGROUP_DEVICE) failed: operation not permitted: unknown.", "rootless-container-permissions"),
    ("error: cannot find libdevice", "tf-xla-cuda-tools-missing"),
    ("nvidia-container-cli: mount error: file creation failed: /var/lib/docker/overlay2/bd45/merged/usr/bin/nvidia-smi: "
     "file exists: unknown", "image-bundles-driver-libs"),
    ("nvidia-docker | 2016/06/07 18:49:33 Error: unsupported CUDA version: driver 7.0 < image 7.5", "driver-too-old"),
    # Messages torch's own sources raise (c10d, elastic, autograd), each seen in public multi-GPU issues.
    ("RuntimeError: [1] is setting up NCCL communicator and retreiving ncclUniqueId from [0] via c10d key-value store by "
     "key '0', but store->get('0') got error: Timeout waiting for key: default_pg/0/0 after 1800000 ms", "nccl-unique-id-timeout"),
    ("torch.distributed.DistNetworkError: on node-7.cluster, port: 29400 already in use", "rendezvous-port-in-use"),
    ("RuntimeError: grad can be implicitly created only for scalar outputs", "dataparallel-loss-not-scalar"),
    ("[E ProcessGroupNCCL.cpp:475] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA "
     "kernels, subsequent GPU operations might run on corrupted/incomplete data.", "nccl-watchdog-teardown"),
    ("    raise RendezvousClosedError()\ntorch.distributed.elastic.rendezvous.api.RendezvousClosedError", "rendezvous-closed"),
    ("RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory", "checkpoint-file-truncated"),
    ("[1,0]<stderr>:[2021-04-10 21:28:20.658706: W horovod/common/stall_inspector.cc:105] One or more tensors were "
     "submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more "
     "than 60 seconds.", "horovod-stall-warning"),
    ("RuntimeError: DDP expects same model across all ranks, but Rank 0 has 686 params, while rank 1 has inconsistent 0 "
     "params.", "ddp-model-differs-across-ranks"),
    ("RuntimeError: Rank 1 successfully reached monitoredBarrier, but received errors while waiting for send/recv from "
     "rank 0. Please check rank 0 logs for faulty rank.", "monitored-barrier-missing-rank"),
    ("torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGKILL", "host-out-of-memory-killed"),
    ("[rank1]: RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:276] ss1.ss_family == "
     "ss2.ss_family. 10 vs 2", "gloo-mixed-address-families"),
    ("host:92777:92889 [0] graph/xml.cc:332 NCCL WARN Could not find real path of /sys/class/pci_bus/0000:01/../../0000:01:00.0",
     "nccl-pci-sysfs-not-visible"),
    ("$ docker run --rm --gpus 0 nvidia/cuda:12.4.1-base-ubuntu22.04 nvidia-smi", "docker-gpus-count-not-index"),
    ("AssertionError: Loading a checkpoint for MP=2 but world size is 1", "checkpoint-parallel-layout-mismatch"),
    ("RuntimeError: HIP error: invalid device function", "no-kernel-image"),
    ("[rank3]: RuntimeError: Unsloth currently does not support multi GPU setups - but we are working on it!",
     "unsloth-single-gpu-only"),
    ("ValueError: pmap got inconsistent sizes for array axes to be mapped:\n  * one axis had size 1: axis 0 of argument x",
     "pmap-input-not-split-per-device"),
    ("ssh: Could not resolve hostname worker-1: Name or service not known\n  File \"/usr/bin/deepspeed\", line 6",
     "deepspeed-hostfile-host-unresolvable"),
    ("ValueError: Could not find the transformer layer class Qwen2DecoderLayer in the model.", "fsdp-wrap-class-not-in-model"),
    ("[rank0]: torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\n[rank0]: RuntimeError: Cannot find a "
     "working triton installation. More information on installing Triton can be found at https://github.com/openai/triton",
     "triton-missing-for-compile"),
    # An extension built for a CUDA torch, reporting the CPU build it found (not an ABI mismatch).
    ("WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers was built for:\n"
     "    PyTorch 2.1.2+cu121 with CUDA 1201 (you have 2.1.2+cpu)", "torch-not-compiled-with-cuda"),
    ("nvcc fatal   : Value 'c++17' is not defined for option 'std'", "cuda-toolkit-mismatch"),
    ("ImportError: libtorch_cuda_cu.so: cannot open shared object file: No such file or directory", "extension-abi-mismatch"),
    ("E external/local_xla/xla/stream_executor/cuda/cuda_driver.cc:282] failed call to cuInit: CUDA_ERROR_NOT_FOUND: "
     "named symbol not found", "wsl-container-driver-library-missing"),
    ("NotImplementedError: Only DistributedDataParallel is supported.", "dataparallel-multi-gpu-unsupported"),
    ("    1. torch._C._distributed_c10d.TCPStore(host_name: str, port: int, world_size: Optional[int] = None, is_master: bool = False)\n"
     "Invoked with: '10.0.0.1', 92345, 4, False", "rendezvous-port-invalid"),
    ("node-1:211:230 [0] NCCL INFO NET/Plugin : Plugin load returned 2 : /opt/ofi/lib/libnccl-net.so: undefined symbol: fi_opx_ini.",
     "nccl-net-plugin-load-failed"),
    ("    assert prev_state_dict_config is not None\nAssertionError", "fsdp-state-dict-type-without-fsdp"),
    ("ERROR: Detected NVIDIA Tesla K80 GPU, which is not supported by this container", "gpu-too-old-for-library"),
    ("/usr/bin/ld: cannot find -lcudart: No such file or directory", "cuda-home-missing"),
    ("RuntimeError: unexpected EOF, expected 4423 more bytes. The file might be corrupted.", "checkpoint-file-truncated"),
    ("ValueError: transformer is of type: <class 'torch.nn.parallel.data_parallel.DataParallel'>, but should be "
     "<class 'diffusers.models.modeling_utils.ModelMixin'>", "ddp-wrapper-attribute"),
    ("ValueError: When using DeepSpeed, `accelerate.prepare()` requires you to pass at least one of training or evaluation "
     "dataloaders with `batch_size` attribute", "deepspeed-config-auto-unresolved"),
    ("AttributeError: 'MMDataParallel' object has no attribute 'reducer'", "dataparallel-multi-gpu-unsupported"),
    ("RuntimeError:  [!] 4 active GPUs. Define the target GPU by `CUDA_VISIBLE_DEVICES`. For multi-gpu training use "
     "`python -m trainer.distribute`.", "dataparallel-multi-gpu-unsupported"),
    ("Error: crun: cannot stat `/usr/lib64/libnvidia-ml.so.535.104.05`: No such file or directory: OCI runtime attempted "
     "to invoke a command that was not found", "cdi-spec-missing-or-stale"),
    ('level=fatal msg="Error: unable to load config: unsupported config version: 3"', "container-toolkit-version-bug"),
    ("Error: stat nvidia.com/gpu=0: no such file or directory", "container-engine-cdi-too-old"),
    ("docker: failed to register layer: ApplyLayer exit status 1 stdout:  stderr: write /opt/conda/lib/libcudnn.so.8: "
     "no space left on device.", "container-image-storage-full"),
    ("Check failed: allow_missing: Device API cuda is not enabled. Please install the cuda version of dgl.",
     "gpu-library-cpu-only-build"),
    ("ValueError: The global train batch size (3 x 4) must be evenly divisible by the number of generations per prompt (8).",
     "grpo-batch-not-divisible-by-generations"),
    ("Multi-processing is handled by Slurm.\nLOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0,1,2,3]\n"
     "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/4\n", "slurm-job-without-srun"),
    ("  File \"fairseq/distributed_utils.py\", line 73, in distributed_init\n"
     "    raise ValueError('Cannot initialize distributed with distributed_world_size=1')", "stray-distributed-env-vars"),
    ('RuntimeError: NVML_SUCCESS == r INTERNAL ASSERT FAILED at "../c10/cuda/CUDACachingAllocator.cpp":830, please report a bug',
     "mig-nvml-assert-masks-oom"),
    ("ValueError: Optimizer has to be an instance of tensorflow.keras.optimizers.legacy.Optimizer starting from Keras 2.11: Adam",
     "wrapper-api-changed"),
    ("$ podman run --rm --device nvidia.com/gpu=all ubuntu nvidia-smi\n"
     "Failed to initialize NVML: GPU access blocked by the operating system", "toolkit-no-cgroups-devices-missing"),
    ("ModuleNotFoundError: No module named 'colossal_C'", "extension-not-built"),
    ("ValueError: We detected accelerator mps on your machine. But we don't know which communication backend to use for "
     "this accelerator.", "no-default-backend-for-device"),
    ("RuntimeError: Requested to allreduce, allgather, or broadcast a tensor with the same name as another tensor that is "
     "currently being processed.", "duplicate-allreduce-tensor-names"),
    ("RuntimeError:\n        An attempt has been made to start a new process before the\n        current process has finished "
     "its bootstrapping phase.", "spawn-without-main-guard"),
    ("ValueError: The optimizer does not seem to reference any FSDP parameters.", "optimizer-created-before-fsdp-wrap"),
    ("RuntimeError: Incoming model is an instance of torch.nn.parallel.DistributedDataParallel. Parallel wrappers should "
     "only be applied to the model(s) AFTER", "amp-initialize-after-parallel-wrap"),
    ("ValueError: Please use `tf.keras.losses.Reduction.SUM` or `tf.keras.losses.Reduction.NONE` for loss reduction when "
     "losses are used with `tf.distribute.Strategy` outside of the built-in training loops.", "tf-loss-reduction-under-strategy"),
    ("UserWarning: PyTorch is not compiled with NCCL support", "nccl-not-built-in"),
    ("ValueError: ctypes objects containing pointers cannot be pickled", "spawn-pickle-error"),
    ('    raise AssertionError("Invalid device id")\nAssertionError: Invalid device id', "gpu-count-request-exceeds-visible"),
    ("ValueError: The input size is not aligned with the quantized weight shape. This can be caused by too large tensor "
     "parallel size.", "parallel-size-not-divisible"),
    ("RuntimeError: [TensorRT-LLM][ERROR] Assertion failed: mpiSize == tp * pp", "checkpoint-parallel-layout-mismatch"),
    ('  File "torch/nn/parallel/parallel_apply.py", line 45, in parallel_apply\n    raise output\n'
     "ValueError: lengths array has incorrect size", "dataparallel-rnn-batch-dim"),
    ("[  +0.000844] nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)", "gpu-fell-off-bus"),
    ("kern: err: nvidia-nvswitch1: SXid (PCI:0000:aa:00.0): 24007, Severity 1 Engine instance 12", "faulty-gpu-hardware"),
    ('Operator "gen_nccl_id" has not been registered.', "nccl-not-built-in"),
    ("ValueError: Default process group has not been initialized, please make sure to call init_process_group.\n"
     "File /envs/lib/python3.10/site-packages/ultralytics/engine/trainer.py:207, in BaseTrainer.train(self)",
     "stray-distributed-env-vars"),
    ("WARNING ([5.5.888~1-d619]:SelectGpuId():cu-device.cc:197) Will try again to get a GPU after 20 seconds.", "device-busy"),
    ("    mean, var_biased = syncbn.welford_mean_var(input)\n"
     "RuntimeError: Dimension out of range (expected to be in range of [-2, 1], but got 2)", "syncbn-error"),
    ("TypeError: get_world_size() takes 0 positional arguments but 1 was given", "wrapper-version-incompat"),
    ("The following zero checkpoints paths are missing: ['./out/step_5/bf16_zero_pp_rank_8_mp_rank_00_optim_states.pt']",
     "zero-checkpoint-node-local-storage"),
    ("ValueError: Unknown CUDA arch (9.0+PTX) or GPU not supported", "nvcc-arch-unsupported"),
    ("ptxas fatal   : Value 'sm_121a' is not defined for option 'gpu-name'", "nvcc-arch-unsupported"),
    ("ValueError: DataLoader with IterableDataset: expected unspecified sampler option, but got "
     "sampler=<torch.utils.data.distributed.DistributedSampler object at 0x7f>", "sampler-with-iterable-dataset"),
    ("ValueError: you need to add an explicit nodesplitter to your input pipeline for multi-node training",
     "iterable-dataset-node-split-missing"),
    ("RuntimeError: You can't use batches of different size with `dispatch_batches=True` or when using an "
     "`IterableDataset`.", "dispatched-batches-uneven-shapes"),
    ("AssertionError: No inf checks were recorded for this optimizer.", "optimizer-created-before-model-to-device"),
    ("AssertionError: No inf checks were recorded prior to update.", "manual-amp-scaler-under-wrapper"),
    ("Unknown MPI implementation given in output of mpirun --version:\nHYDRA build details:",
     "horovodrun-openmpi-not-detected"),
    ("[mpiexec@node1] match_arg (utils/args/args.c:163): unrecognized argument allow-run-as-root",
     "mpirun-mpi-implementation-mismatch"),
    ("AssertionError: only support equal chunk. Got size of DataProto 2 and chunk 4.", "batch-size-not-divisible-by-gpus"),
    ("  - Value not in list: device: 'cuda:1' not in ['cuda:0']", "invalid-device-ordinal"),
    ("node1:22671:22795 [1] transport/p2p.cu:431 WARN failed to open CUDA IPC handle : 30 unknown error",
     "duplicate-hostnames-across-nodes"),
    ("[[25215,0],1] FORCE-TERMINATE AT Data unpack would read past end of buffer:-26 - error grpcomm_direct.c(359)",
     "openmpi-hwloc-library-conflict"),
    ("UnknownError (see above for traceback): ncclAllReduce failed: invalid data type", "nccl-library-conflict"),
    ("invoking the NVIDIA Container Runtime Hook directly (e.g. specifying the docker --gpus flag) is not supported. "
     "Please use the NVIDIA Container Runtime instead.: unknown.", "container-runtime-csv-mode-gpus-flag"),
    ("Allocate failed due to rpc error: code = Unknown desc = request for 'nvidia.com/gpu: 2' too large: maximum "
     "request size for shared resources is 1, which is unexpected", "k8s-shared-gpu-request-too-large"),
    ("RuntimeError: /job:localhost/replica:0/task:0/device:GPU:2 unknown device", "invalid-device-ordinal"),
    ("AssertionError: You can't use same `Accelerator()` instance with multiple models when using DeepSpeed",
     "deepspeed-multiple-models-one-engine"),
    ("ValueError: Less than two GPU ids were configured and tried to run on multiple GPUs.", "accelerate-gpu-ids-too-few"),
    ("WARNING: infoROM is corrupted at gpu 0000:0B:00.0", "inforom-corrupted"),
    ('AssertionError: You are using an untested ZeRO Optimizer. Please add <"zero_allow_untested_optimizer": true> in '
     'the configuration file to use it.', "deepspeed-untested-zero-optimizer"),
    ("RuntimeError: Using hostfile at /job/hostfile but host=worker-1 was not reachable via ssh.",
     "deepspeed-hostfile-ssh-unreachable"),
    ("RuntimeError: launcher 'pdsh' not installed.", "deepspeed-launcher-backend-missing"),
    ("ValueError: Expected a string path to an existing deepspeed config, or a dictionary or a valid base64. Received: "
     "ds.json", "deepspeed-config-path-missing"),
    ("AssertionError: bfloat16 and fp16 modes cannot be simultaneously enabled", "deepspeed-fp16-bf16-both"),
    ("AssertionError: zero stage 2 requires an optimizer", "deepspeed-zero12-without-optimizer"),
    ("ValueError: device_ids can only be None or contain a single element.", "ddp-multiple-device-ids"),
    ("TypeError: Invalid function argument. Expected parameter `tensor_list` of type List[torch.Tensor]\n"
     "             but got <class 'torch.Tensor'> instead.", "collective-argument-type"),
    ("ValueError: Rank 4 is out of range. Valid ranks are 0 to 3 (world_size=4)", "process-group-ranks-out-of-range"),
    ("ValueError: device_id cuda:4 is out of range. Please use a device index less than the number of accelerators "
     "available: 4.", "invalid-device-ordinal"),
    ("ValueError: local_rank 4 exceeds available GPUs in CUDA_VISIBLE_DEVICES=0,1,2,3", "invalid-device-ordinal"),
    ("ValueError: SyncBatchNorm layers only work with GPU modules", "syncbn-error"),
    ("TimeoutError: timed out waiting for all 2 members to join", "rendezvous-timeout"),
    ("_pickle.UnpicklingError: Weights only load failed. This file can still be loaded, to do so you have two options",
     "torch-load-weights-only-default"),
    ("ValueError: The module has CPU parameters or buffers when `sync_module_states=True`, which requires them to be on "
     "GPU.", "fsdp-sync-states-on-cpu"),
    ("RuntimeError: FSDP only supports single device modules but got params on {device(type='cuda', index=0), "
     "device(type='cpu')}", "fsdp-mixed-device-module"),
    ("RuntimeError: FSDP parameters should be materialized from meta device before training, but the following were "
     "still on meta device: ['w']", "fsdp2-meta-params-not-materialized"),
    ("RuntimeError: unscale_() has already been called on this optimizer since the last update().",
     "amp-unscale-called-twice"),
    ("ValueError: batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last",
     "batch-sampler-exclusive-options"),
    ("ValueError: FSDP doesn't support scalar parameters. Change logit_scale to a 1D tensor with numel equal to 1.",
     "fsdp-scalar-parameter"),
    ("UserWarning: Found GPU0 NVIDIA GeForce RTX 5090 which is of compute capability (CC) 12.0.\nThe following list "
     "shows the CCs this version of PyTorch was built for and the hardware CCs it supports:", "no-kernel-image"),
    ("ValueError: Size mismatch between saved torch.Size([32000, 4096]) and current: torch.Size([32064, 4096]) for "
     "model.embed_tokens.weight", "state-dict-architecture-mismatch"),
    ("horovod.common.exceptions.HorovodInternalError: Mismatched ALLREDUCE tensor shapes: One rank sent a tensor of "
     "shape [512, 10], but another rank sent a tensor of shape [512, 12].", "horovod-mismatched-tensor-shapes"),
    ("ImportError: Framework pytorch installed with version 1.13.1+cu117 but found version 2.1.0+cu121.",
     "horovod-framework-version-changed"),
    ("RuntimeError: could not connect to some hosts via ssh", "horovodrun-ssh-unreachable"),
    ("node01:1:1 [0] init.cc:1043 NCCL WARN Mismatched NCCL version detected : rank 1 version 22703 rank 0 version "
     "22105", "nccl-version-mismatch-across-ranks"),
    ("node01:1:1 [0] init.cc:1339 NCCL WARN Detected mixed local Net device counts across ranks (min 4, max 8).",
     "nccl-net-mismatch-across-nodes"),
    ("node01:1:1 [0] p2p.cc:688 NCCL WARN NET/IB: Got completion from peer 10.0.0.2<45678> with status=transport retry "
     "counter exceeded(12) opcode=RDMA_WRITE(0) vendor_err=129", "nccl-ib-error"),
    ("node01:1:1 [0] linux.cc:302 NCCL WARN socketStartConnect: connect to 10.0.0.1<29500> failed : Connection refused",
     "node-connection-refused"),
    ("node01:1:1 [0] net_socket.cc:636 NCCL WARN NET/Socket : peer 10.0.0.2<45678> message truncated : receiving "
     "1048576 bytes instead of 65536.", "collective-mismatch"),
    ("node01:1:1 [0] init.cc:307 NCCL WARN NET/IB : No IP interface found.", "nccl-socket-interface"),
    ("RuntimeError: Timeout waiting for the cluster, timeout is 300 seconds", "tf-multiworker-peers-unreachable"),
    ("WARNING:tensorflow:There are non-GPU devices in `tf.distribute.Strategy`, not using nccl allreduce.",
     "tf-strategy-without-gpus"),
    ("ValueError: The `task_id` 2 exceeds the maximum id of worker.", "tf-config-task-invalid"),
    ("ValueError: All workers should have the same number of GPUs.", "tf-workers-unequal-gpus"),
    ("ValueError: Call the `batch` method on the input Dataset in order to be able to split your input across 2 "
     "replicas.", "tf-dataset-not-batched"),
    ("RuntimeError: Method requires being in cross-replica context, use get_replica_context().merge_call()",
     "tf-replica-context-misuse"),
    ("WARNING:tensorflow:Nccl kernel is not found, not using nccl allreduce.", "nccl-not-built-in"),
    ("ValueError: The `global_batch_size` 30 is not divisible by `num_replicas_in_sync` 4 ", "batch-size-not-divisible-by-gpus"),
    ("horovod.common.exceptions.HorovodInternalError: Mismatched data types: One rank had type float32, but another "
     "rank had type int64.", "horovod-mismatched-tensor-shapes"),
    ("RuntimeError: Lightning attempted to launch new distributed processes with `local_rank > 0`. This should not "
     "happen.", "lightning-external-launcher-undetected"),
    ("ValueError: Requested more processes (8) than there are available slots (4)", "mpi-not-enough-slots"),
    ("Exception: horovod does not find an installed MPI.", "horovodrun-openmpi-not-detected"),
    ("ValueError: generation_batch_size (12) must be divisible by num_generations (8).",
     "grpo-batch-not-divisible-by-generations"),
    ("ConnectionError: The vLLM server can't be reached at http://0.0.0.0:8000 after 240.0 seconds. Make sure the "
     "server is running by running `trl vllm-serve`.", "trl-vllm-server-unreachable"),
    ("RuntimeError: Weight update group already initialized. Call close_communicator first.", "trl-vllm-weight-group-open"),
    ("ValueError: tensor_parallel_size (4) must divide world size (6) evenly.", "parallel-size-not-divisible"),
    ("ValueError: `model` and `ref_model` cannot be the same object.", "dpo-model-is-ref-model"),
    ("ValueError: Unable to find 'latest' file at output/checkpoint-500/latest", "zero-to-fp32-tag-missing"),
    ("NotImplementedError: Calling `trainer.fit()` twice on the same Trainer instance using a spawn-based strategy is "
     "not supported.", "lightning-fit-twice-spawn"),
    ("RuntimeError: The selected device indices [1, 3] don't match the local rank values of processes. If you need to "
     "select GPUs at a specific index, set the `CUDA_VISIBLE_DEVICES` environment variable instead.",
     "lightning-deepspeed-device-indices"),
    ("MisconfigurationException: DeepSpeed currently only supports single optimizer, single optional scheduler.",
     "lightning-deepspeed-config-conflict"),
    ("ImportError: PyTorch >= 2.6 requires DeepSpeed >= 0.16.0. Detected DeepSpeed version: 0.14.4.",
     "wrapper-pair-version-mismatch"),
    ("RuntimeError: Unable to JIT load the cpu_adam op due to ninja not being installed.", "ninja-missing"),
    ("RuntimeError: The sizes `data_parallel_size=2` and `tensor_parallel_size=2` multiplied should equal the world "
     "size (8).", "parallel-size-not-divisible"),
    ("ValueError: You set `devices=4` in Lightning, but the number of tasks per node configured in SLURM "
     "`--ntasks-per-node=1` does not match. HINT: Set `devices=1`.", "slurm-nodes-mismatch-trainer-num-nodes"),
    ("ValueError: You set `devices=4` and `num_nodes=1` in Lightning, but the product (4 * 1) does not match the world "
     "size (8).", "lightning-devices-vs-world-size"),
    ("lightning.fabric.utilities.exceptions.MisconfigurationException: `ModelCheckpoint(monitor='val_loss')` could not "
     "find the monitored key in the returned metrics: ['train_loss', 'epoch', 'step'].", "checkpoint-monitor-key-missing"),
    ("lightning.fabric.utilities.exceptions.MisconfigurationException: No supported gpu backend found!",
     "lightning-accelerator-unavailable"),
    ("RuntimeError: \nLaunching multiple processes with the 'spawn' start method requires that your script guards the "
     "main\nfunction with an `if __name__ == \"__main__\"` clause.", "spawn-without-main-guard"),
    ("AssertionError: Mismatch in local rank setting, args.local_rank=0 but env['LOCAL_RANK']=1.",
     "deepspeed-local-rank-arg-mismatch"),
    ("AssertionError: \n   This assert indicates that your module has parameters that\n   were not used in producing "
     "loss.", "zero-unused-parameters"),
    ("ValueError: Expected 8 of '*_optim_states.pt' under 'out/global_step500' but found 4 files. Possibly due to an "
     "overwrite of an old checkpoint, or a checkpoint didn't get saved by one or more processes.",
     "zero-checkpoint-node-local-storage"),
    ("AssertionError: DeepSpeed requires the LOCAL_RANK environment variable, it is set by the deepspeed launcher, "
     "deepspeed.init_distributed, or the torch's launcher.", "not-launched-with-torchrun"),
    ("RuntimeError: Fetching value for `jax.Array` that spans non-addressable (non process local) devices is not "
     "possible.", "jax-fetch-non-addressable"),
    ("RuntimeError: Attempting to use the same CUDA device for multiple distinct roles/ranks within the same "
     "communicator.", "trl-vllm-server-same-gpus"),
    ("I0624 22:58:05.486697       1 health.go:185] XidCriticalError: Xid=79 on Device=GPU-adb24b25; marking device as "
     "unhealthy.", "gpu-fell-off-bus"),
    ("XidCriticalError: Xid=48 on Device=GPU-e3dbf294-2783-f38b-4274-5bc836df5be1; marking device as unhealthy.",
     "ecc-uncorrectable"),
    ("prted: error while loading shared libraries: libimf.so: cannot open shared object file: No such file or directory",
     "mpi-orted-not-found-remote"),
    ("btl_tcp_endpoint.c:572:mca_btl_tcp_endpoint_complete_connect: connect() failed with errno=113",
     "mpi-btl-uses-docker0-interface"),
    ("ValueError: Cannot get 16bit model weights because `stage3_gather_16bit_weights_on_model_save` in DeepSpeed "
     "config is False.", "zero3-16bit-save-disabled"),
    ("ValueError: When using `--fsdp_cpu_ram_efficient_loading` set `--fsdp_sync_module_states` to `True`",
     "fsdp-ram-efficient-loading-needs-sync"),
    ("GPU available: True (cuda), used: True\nInitializing distributed: GLOBAL_RANK: 0, MEMBER: 1/4\n",
     "lightning-members-never-joined"),
    ("accelerate.utils.operations.DistributedOperationException:\nCannot apply desired operation due to shape mismatches. "
     "All shapes across devices must be valid.", "collective-mismatch"),
    ("node1:1234:1290 [0] NCCL WARN failed to open CUDA IPC handle : 217 peer access is not supported between these "
     "two devices", "p2p-not-supported"),
    ("[W socket.cpp:426] [c10d] The server socket has failed to bind to 0.0.0.0:80 (errno: 13 - Permission denied).\n"
     "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address.",
     "rendezvous-port-privileged"),
    ('  File "/usr/lib/python3/dist-packages/torch/multiprocessing/spawn.py", line 69, in _wrap\n    fn(i, *args)\n'
     "TypeError: train_worker() takes 3 positional arguments but 27 were given", "spawn-args-not-tuple"),
    ("gpu7:5512:5601 [1] enqueue.cc:197 NCCL WARN Cuda failure 'invalid device function'", "no-kernel-image"),
    ("Invalid argument: 'visible_device_list' listed an invalid GPU id '3' but visible device count is 2",
     "invalid-device-ordinal"),
    ("ValueError: `handle` is not available outside the replica context or a `tf.distribute.Strategy.update()` call.",
     "tf-replica-context-misuse"),
    ("[rank3]: AssertionError: Expects tensor to be on the compute device cuda:3, was on cpu", "fsdp-offloaded-params-not-reloaded"),
    ("[rank1]: AssertionError: Expects tensor to be on the compute device cuda:0, was on cuda:1", "fsdp-current-device-not-set"),
    ('  File "fairscale/nn/data_parallel/fully_sharded_data_parallel.py", line 701, in _init_param_attributes\n'
     '    assert p._fp32_shard.device == torch.device("cpu")\nAssertionError', "fsdp-cpu-offload-model-on-gpu"),
    ("AssertionError: Attempted to load weight (torch.Size([0])) into parameter (torch.Size([151936, 2048]))",
     "deepspeed-zero3-partitioned-param"),
    ("paddle.fluid.core.EnforceNotMet: The number of samples of current batch is less than the count of devices, "
     "currently, it is not allowed. (4 vs 3)", "batch-size-not-divisible-by-gpus"),
    ("E1122 external/xla/xla/stream_executor/cuda/cuda_dnn.cc:535] There was an error before creating cudnn handle (2): "
     "cudaErrorMemoryAllocation : out of memory", "jax-gpu-preallocation"),
    ("nvidia-container-cli: detection error: open failed: /usr/lib64/libnvidia-ptxjitcompiler.so.535.104.05",
     "host-driver-userspace-missing"),
    ("`[<some path>/gloo/gloo/transport/tcp/pair.cc:761] connect [127.0.1.1]:60817: Connection refused`.",
     "gloo-socket-interface"),
    ("Address already in use\n", "rendezvous-port-in-use"),
    ("gcn75:2336636:2336906 [0] enqueue.cc:58 NCCL WARN Cuda failure 'named symbol not found'", "no-kernel-image"),
    ('  File "transformers/modeling_xlnet.py", line 761, in forward\n    dtype_float = next(self.parameters()).dtype\n'
     "StopIteration", "dataparallel-replica-no-parameters"),
    ("pytorch_lightning.utilities.debugging.MisconfigurationException: \n            You requested GPUs: [0]\n"
     "            But your machine only has: []\n_pytorch_select           0.1                       cpu_0  ",
     "torch-not-compiled-with-cuda"),
    ("pytorch_lightning.utilities.debugging.MisconfigurationException: \n            You requested GPUs: [0]\n"
     "            But your machine only has: []", "no-cuda-device"),    ("_pickle.UnpicklingError: Weights only load failed...\nUnsupported global: GLOBAL omegaconf.listconfig.ListConfig ...",
     "torch-load-weights-only-default"),
    ("RuntimeError: Error(s) in loading state_dict for DataParallel:\n        Unexpected key(s) in state_dict: \"conv1_1.weight\", \"conv1_1.bias\", \"conv1_2.weight\", \"conv1_2.bias\", \"conv2_1.weight\", \"conv2_1.bias\", \"conv2_2.weight\", \"conv2_2.bias\", \"conv3_1.weight\", \"conv3_1.bias\",",
     "state-dict-module-prefix"),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasGemmStridedBatchedEx(handle, opa, opb, (int)m, (int)n, (int)k, (void*)&falpha, a, CUDA_R_16BF, (int)lda, stridea, b, CUDA_R_16BF, (int)ldb, strideb, (void*)&fbeta, c, CUDA_R_16BF, (int)ldc, stridec, (int)num_batches, compute_type, CUBLAS_GEMM_DEFAULT_TENSOR_OP)`",
     "bf16-tf32-unsupported-gpu"),
    ("tensorflow.python.framework.errors_impl.NotFoundError: ./multi_worker_model/variables/variables_temp/part-00000-of-00001.index; No such file or directory [Op:MergeV2Checkpoints]",
     "checkpoint-save-race-between-ranks"),
    ("ValueError: `--mixed_precision` arg cannot be set to `bf16` when `fp16` is set in the DeepSpeed config file.",
     "deepspeed-fp16-bf16-both"),
    ("[Errno 2] No such file or directory: 'llama_13b_pp/global_step001/zero_pp_rank_0_mp_rank_03_optim_states.pt'",
     "deepspeed-resume-missing-engine-state"),
    ("RuntimeError: Optimizer state has not been consolidated on this rank.                 Please call `consolidate_state_dict()` on all ranks beforehand if you meant to save the global state",
     "sharded-optimizer-state-not-consolidated"),
    ("2023-11-18 03:39:16,283 WARNING services.py:1996 -- WARNING: The object store is using /tmp instead of /dev/shm "
     "because /dev/shm has only 67108864 bytes available. This will harm performance!", "nccl-shared-memory"),
    ("ibv_create_cq(cqe=4096) failed: Cannot allocate memory", "ib-memlock-limit"),
    ("slurmstepd: error: execve(): torchrun: No such file or directory", "launcher-executable-missing"),
    ("Tue Jun  9 20:10:40 2020[1]<stderr>:  what():  [horovod/common/gloo/http_store.cc:53] "
     "[horovod/common/gloo/http_store.cc:53] Wait timeout for key(s): 0", "rendezvous-timeout-too-short-at-scale"),
    ("misc/ibvwrap.cc:288 NCCL WARN Call to ibv_reg_dmabuf_mr failed with error Operation not supported", "nccl-dmabuf-unsupported"),
    ("it raise an error: ZeRO-2 and ZeRO-3 are incompatible with pipline parallelism.", "zero-stage-incompatible-with-feature"),
    ("ModuleNotFoundError: No module named 'megatron.optimizer'", "megatron-lm-not-importable"),
    ("FileNotFoundError: [Errno 2] No such file or directory: '/home/s2/Documents/segmentation/mmsegmentation/work_dirs/"
     "segformer_mit-b5_512x512_160k_es/.eval_hook/part_2.pkl'", "output-dir-not-shared-across-nodes"),
    ("megatron/fused_kernels/scaled_upper_triang_masked_softmax.o: file not recognized: File format not recognized "
     "collect2: error: ld returned 1 exit status", "stale-extension-build-artifacts"),
    ("AssertionError: Device compute capability 8.9 or higher required for FP8 execution.", "gpu-too-old-for-library"),
    ("ValueError: FP8 quantized models is only supported on GPUs with compute capability >= 9.0 (e.g H100).", "gpu-too-old-for-library"),
    ("AttributeError: module 'transformer_engine' has no attribute 'pytorch'", "extension-not-built"),
    ("`fused_weight_gradient_mlp_cuda` module not found. gradient accumulation fusion with weight gradient computation disabled.",
     "extension-not-built"),
    ("assert self.data_parallel_size % self.zero1_parallel_size == 0", "parallel-size-not-divisible"),
    ("ModuleNotFoundError: No module named 'torch.distributed.device_mesh'", "framework-older-than-project-requires"),
    ("ImportError: cannot import name 'fully_shard' from 'torch.distributed.fsdp'", "framework-older-than-project-requires"),
    ("There is an imbalance between your GPUs. You may want to exclude GPU 0 which\n"
     "has less than 75% of the memory or cores of GPU 1.", "weak-gpu-included-in-multi-gpu-run"),
    ("ncclInvalidArgument: Invalid value for an argument.\nLast error:\nInvalid config blocking attribute value -2147483648",
     "nccl-library-conflict"),
    ("INFO[0000] Found 3 CDI devices\nnvidia.com/gpu=0\nnvidia.com/gpu=all\n\nError: setting up CDI devices: "
     "unresolvable CDI devices nvidia.com/gpu=0", "container-engine-cdi-too-old"),
    # 2026-12-05 (b31): Slurm, MPI/PMIx, InfiniBand, Kubernetes gang scheduling and Ray, and typed slips
    ("RuntimeError: Distributed package does not hava NCCLbuilt in", "nccl-not-built-in"),
    ("srun: Job 9479148 step creation temporarily disabled, retrying (Requested nodes are busy)",
     "slurm-step-resources-held-by-other-step"),
    ("srun: error: Task launch for StepId=34.0 failed on node gpu4: Socket timed out on send/recv operation",
     "slurm-munge-key-mismatch"),
    ("*** An error occurred in MPI_Init\n*** on a NULL communicator\nsrun: error: gpu1: task 0: Exited with exit code 1",
     "srun-pmi-not-matching-mpi"),
    ("[n01:07143] PMIX ERROR: OUT-OF-RESOURCE in file gds_ds21_lock_pthread.c at line 99", "pmix-gds-shmem-datastore-failure"),
    ("[   51.2] nvidia_peermem: Unknown symbol ib_register_peer_memory_client (err -2)", "peer-memory-module-symbol-mismatch"),
    ("Warning  FailedScheduling  12s  volcano  2/2 tasks in gang unschedulable: pod group is not ready, 2 Pending, 2 minAvailable",
     "gang-podgroup-waits-for-uncreated-pods"),
    ("Permissions 0644 for '/etc/secret-volume/id_rsa' are too open.\nThis private key will be ignored.", "launcher-ssh-auth"),
    ("rc_verbs_iface.c:67   send completion with error: transport retry counter exceeded", "nccl-ib-error"),
    ("Error: No available node types can fulfill resource request {'node:10.0.0.5': 0.001, 'GPU': 1.0}. Add suitable node types",
     "ray-node-ip-mismatch"),
    ("RuntimeError: Version mismatch: The cluster was started with:\n    Ray: 2.9.0\n    Python: 3.10.12\nThis process",
     "ray-version-mismatch-across-processes"),
    ("[HAMI-core ERROR (utils.c:160)]: host pid is error!", "gpu-sharing-layer-bug"),
    # 2026-12-05 (b32): GPU servers' daemons, resets and installation; data-parallel run-time faults
    ("level=fatal msg=\"Failed to watch metrics: Error watching fields: The third-party Profiling module returned an "
     "unrecoverable error\"", "dcgm-profiling-counters-held-by-other-hostengine"),
    ("nvidia-persistenced[77]: NUMA: Failed to enable NUMA memory Auto-Online", "persistenced-unprivileged-numa-online"),
    ("GPU 00000000:1B:00.0 is currently in use by another process.", "gpu-reset-blocked-by-device-holder"),
    ("[ERROR] not all local fabric manager instances finished their configuration", "fabric-manager-started-too-early"),
    ("E: Failed to fetch https://developer.download.nvidia.com/compute/cuda/repos/debian13/x86_64/Packages  404  Not Found",
     "cuda-repo-missing-for-os-release"),
    ("NVRM: installed in this system requires use of the NVIDIA open kernel modules.",
     "proprietary-kernel-module-unsupported-gpu"),
    ("[  12.1] NVRM: GPU 0000:41:00.0: RmInitAdapter failed! (0x22:0x56:762)", "faulty-gpu-hardware"),
    ("Compiler version check failed:\nThe major and minor number of the compiler used to compile the kernel",
     "driver-build-kernel-incompatible"),
    ("Last error:\nFailed to bind NVLink SHARP (NVLS) Multicast memory of size 2097152 : CUDA error 401",
     "fabric-manager-state-stale"),
    ("Thread 12 received signal SIGBUS, Bus error.\n0x00007f in ncclShmOpen(char*, unsigned long, void**) ()",
     "shared-memory-bus-error"),
    ("An MPI process has executed an operation involving a call to the\n\"fork()\" system call to create a child "
     "process.  Open MPI is currently", "dataloader-fork-under-mpi"),
    ("RuntimeError: Parent directory /ckpt/run7 does not exist.", "main-process-only-state"),
    # 2026-12-05 (b33): the watchdog's desync report names the rank that never joined
    ("[rank0]:[E515 ProcessGroupNCCL.cpp:1937] Rank 0\n - [0] Timeout at collective: ALLREDUCE, #315\n"
     " - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:\n"
     "     [3] joined but didn't finish collective #315 (count from 1)", "collective-desync-lagging-rank"),
    # 2026-12-06 (b34): a framework's worker that sees one GPU; a task registered twice; PS without a chief;
    # a truncated downloaded NCCL; vLLM's symmetric-memory all-reduce; a script fixed to 8 GPUs
    ("(RayTrainWorker pid=812, ip=10.0.0.4) gpu7:812:901 [1] NCCL WARN failed to open CUDA IPC handle : 217 "
     "peer access is not supported between these two devices", "per-process-gpu-masking-breaks-nccl-p2p"),
    ("E0101 coordination_service.cc:962] /job:jax_worker/replica:0/task:3 unexpectedly tried to connect with a "
     "different incarnation. It has likely restarted.", "distributed-init-rerun-in-data-worker-processes"),
    ("  (0) Unavailable:  failed to connect to all addresses\nAdditional GRPC error information from remote target "
     "/job:chief/replica:0/task:0/device:CPU:0:", "ps-strategy-cluster-missing-chief"),
    ("INFO pynccl.py:58] Loading nccl from library /home/u/.config/vllm/nccl/cu12/libnccl.so.2.18.1\n"
     "Bus error (core dumped)", "downloaded-library-incomplete"),
    ("    handle = torch_symm_mem.rendezvous(self.buffer, self.group.group_name)\nRuntimeError: CUDA driver error: "
     "invalid argument", "vllm-symm-mem-allreduce-setup"),
    ("    assert ddp_world_size == 8\nAssertionError", "script-hardcodes-world-size"),
    # (b41) each in another wording than the entry's own example
    ('sshd[41]: chroot("/var/run/sshd"): Operation not permitted [preauth]', "sshd-missing-sys-chroot-capability"),
    ("$ colossalai run --nproc_per_node 4 --hostfile hosts train.py\nbash: line 1: export: `-x=1': not a valid identifier\n"
     "Error: failed to run torchrun on 10.0.0.2, exception: Encountered a bad command exit code!", "launcher-env-export-invalid"),
    ("[W socket.cpp:436] [c10d] The server socket has failed to bind to 10.1.2.3:29500 (errno: 99 - Cannot assign "
     "requested address).", "bind-address-not-on-this-host"),
    ("RuntimeError: All tensors must be on devices[0]: 0", "ddp-device-ids-omitted"),
    ("  File \"/opt/conda/lib/python3.10/site-packages/torch/nn/modules/_functions.py\", line 56, in forward\n"
     "RuntimeError: Expected counts to have type Half but got Float", "syncbn-half-model"),
    ("E coordination_service.cc:1170] /job:jax_worker/replica:0/task:5 has been set to ERROR in coordination service: "
     "UNAVAILABLE: Task /job:jax_worker/replica:0/task:5 heartbeat timeout. This indicates that the remote task has "
     "failed, got preempted, or crashed unexpectedly.", "jax-heartbeat-timeout-too-short"),
    ("WARNING:absl:Conversion for <class 'jax._src.sharding_impls.PmapSharding'> has not been implemented.",
     "orbax-save-pmap-replicated-state"),
    ("ValueError: PositionalSharding([[{GPU 0}] [{GPU 1}]]) is only valid for values of rank 2, but was applied to a "
     "value of rank 1", "jax-sharding-rank-mismatch"),
    ("torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: TCP client failed to connect/validate to "
     "host trainer-0:29400 - Temporary failure in name resolution", "rendezvous-hostname-unresolvable"),
    # (b42)
    ("NVRM: The NVIDIA Tesla K80 GPU installed in this system is supported through the NVIDIA 470.xx Legacy drivers. "
     "Please visit http://www.nvidia.com/object/unix.html for more information.  The 535.129.03 NVIDIA driver will "
     "ignore this GPU.  Continuing probe...", "driver-branch-dropped-gpu"),
    ("$ dcgmi diag -r 1\nError: Detected unsupported Cuda version", "dcgm-older-than-driver-cuda"),
    ("RuntimeError: CUDA error in cuMemCreate(&handle, size, &prop, 0): CUDA_ERROR_NOT_PERMITTED",
     "cuda-fabric-memory-not-permitted"),
    ("  File \"/env/lib/python3.10/site-packages/torchmetrics/metric.py\", line 590, in _sync_dist\n"
     "    if isinstance(output_dict[attr][0], Tensor):\nIndexError: list index out of range", "metric-state-empty-on-rank"),
    ("  File \"/env/lib/python3.11/site-packages/accelerate/accelerator.py\", line 1459, in prepare_model\n"
     "AssertionError: found no DeviceMesh from dtensor args for c10d.broadcast_.default!", "ddp-over-dtensor-params"),
    ("[rank1]: RuntimeError: Trying to create tensor with negative dimension -4611686018427387904: [-4611686018427387904]",
     "collective-garbage-size"),
    ("NotImplementedError: NF4Tensor dispatch: attempting to run aten.split.Tensor, this is not supported",
     "tensor-subclass-missing-distributed-op"),
    ("model = FullyShardedDataParallel(model)  # after convert_to_float8_training\n"
     "AttributeError: 'WeightWithDynamicFloat8CastTensor' object has no attribute '_tensor'", "fsdp2-only-feature-used-with-fsdp1"),
    ("  File \"/env/site-packages/torchao/float8/float8_utils.py\", line 102, in tensor_to_amax\n"
     "RuntimeError: max(): Expected reduction dim to be specified for input.numel() == 0.", "fsdp-float8-all-gather-uneven-shard"),
    # (b43)
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device (nms_kernel at "
     "/src/myproject/csrc/nms_cuda.cu:103)", "extension-built-for-other-gpu-arch"),
    ("ValueError: Cannot use multiple GPUs with different Compute Capabilities for the same model",
     "heterogeneous-gpus-in-one-model"),
    ("PermissionError: [Errno 13] Permission denied: '/tmp/torch_extensions/py310_cu121/fused_adam/lock'",
     "extension-cache-dir-not-writable"),
    ("  File \"/env/site-packages/mamba_ssm/ops/triton/ssd_combined.py\", line 316\n"
     "RuntimeError: Triton Error [CUDA]: context is destroyed", "triton-kernel-on-wrong-device"),
    ("torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\nRuntimeError: Triton Error [CUDA]: device "
     "kernel image is invalid", "triton-ptxas-newer-than-driver"),
    ("RuntimeError: Index file /tmp/tmpa81b2c3d/val/index.json took too long to download, bailing out: 120.000 < 120.002 sec.",
     "streaming-per-rank-random-local-dir"),
    ("AssertionError: Each bucket's buffer size should be divisible by 8", "megatron-distopt-bucket-not-padded-to-dp"),
    ("    writer = SummaryWriter()\n  File \"/env/site-packages/torch/utils/tensorboard/writer.py\", line 247, in "
     "__init__\n    mkdir(name, mode)\nFileExistsError: [Errno 17] File exists: 'runs/Jan02_10-00-00_node1'",
     "logger-init-on-every-rank"),
    ("composer.utils.dist.MissingEnvironmentError: Torch distributed is initialized but environment variable "
     "LOCAL_WORLD_SIZE is not set.", "not-launched-with-torchrun"),
    ("node3:1234:1290 [0] NCCL INFO Could not find NET with id 0", "nccl-release-bug"),
    ("TypeError: can't pickle _thread.RLock objects", "spawn-pickle-error"),
    # (b45)
    ("E1102 08:15:44.120 sharding.py:431] The available devices are different from the devices used to save the "
     "checkpoint.  Please restore checkpoint by passing new shardings for target devices.",
     "orbax-restore-on-other-devices-without-sharding"),
    ("FileNotFoundError: [Errno 2] No such file or directory: '/nfs/u/.cache/huggingface/datasets/parquet/"
     "default-8c1d2e3f4a5b6c7d/0.0.0/0123abcd/cache-9f8e7d6c5b4a3f2e.arrow'", "cache-files-race-between-ranks"),
    ("  File \"/opt/conda/lib/python3.9/site-packages/datasets/builder.py\", line 690, in download_post_processing_resources\n"
     "    for split in self.info.splits:\nTypeError: 'NoneType' object is not iterable", "cache-files-race-between-ranks"),
    ("    os.makedirs(out_dir, exist_ok=True)\n  File \"/usr/lib/python3.10/os.py\", line 225, in makedirs\n"
     "    mkdir(name, mode)\nFileExistsError: [Errno 17] File exists: '/gpfs/proj/run7/ckpt'", "concurrent-mkdir-on-shared-fs"),
    ("NCCL_ALGO=Tree NCCL_PROTO=LL128 ./build/all_reduce_perf -b 1M -e 64M -f 2 -g 8\n"
     "# Out of bounds values : 12 FAILED\n# Avg bus bandwidth    : 101.3", "nccl-forced-protocol-corruption"),
    ("WARN: IPC failure: Sending data over socket failed: No such file or directory\n"
     "/workspace/nvshmem_src/src/host/mem/mem_heap.cpp:exchange_heap_memory_handle:812: Fatal IPC Failure",
     "duplicate-hostnames-across-nodes"),
    ("  File \"/usr/local/lib/python3.10/dist-packages/torch/distributed/elastic/agent/server/api.py\", line 600, in "
     "_rendezvous\n    workers = self._assign_worker_ranks(store, group_rank, group_world_size, spec)\n"
     "TypeError: _assign_worker_ranks() takes 4 positional arguments but 5 were given", "wrapper-version-incompat"),
    ("RuntimeError: replicas_[0].size() >= 1 ASSERT FAILED at /opt/pytorch/torch/csrc/distributed/c10d/reducer.cpp:54, "
     "please report a bug to PyTorch. Expected at least one parameter.", "ddp-no-trainable-params"),
    ("  File \"/usr/local/lib/python3.8/dist-packages/keras/metrics/base_metric.py\", line 140, in update_state_fn\n"
     "ValueError: SyncOnReadVariable does not support `assign_add` in cross-replica context when aggregation is set "
     "to `tf.VariableAggregation.SUM`.", "tf-variable-outside-strategy-scope"),
    ("[rank3]:[W1201 09:00:00.000000000 socket.cpp:462] [c10d] waitForInput: socket SocketImpl(fd=55, "
     "addr=[node1]:50000, remote=[node0]:29400) timed out after 600000ms", "nccl-watchdog-timeout"),
    # (b46)
    ("F0301 10:11:12.000000  4242 python_layer.hpp:25] PythonLayer is not implemented in Multi-GPU training\n"
     "*** Check failure stack trace: ***", "caffe-python-layer-multi-gpu"),
    ("horovodrun -np 4 python train.py\nsh: 1: mpirun: not found", "mpi-not-installed"),
    ("  File \"/opt/conda/lib/python3.6/site-packages/cntk/cntk_py.py\", line 18, in swig_import_helper\n"
     "ImportError: libmpi_cxx.so.1: cannot open shared object file: No such file or directory", "mpi-not-installed"),
    ("Faiss assertion 'p + size == head_' failed in void faiss::gpu::StackDeviceMemory::Stack::returnAlloc(char*, "
     "size_t, cudaStream_t) at /project/faiss/faiss/gpu/utils/StackDeviceMemory.cpp:144", "faiss-gpu-index-used-from-threads"),
    ("  File \"D:\\envs\\det\\lib\\site-packages\\mylib\\dist.py\", line 80, in __init__\n"
     "    signal.signal(signal.SIGUSR2, self.handler)\nAttributeError: module 'signal' has no attribute 'SIGUSR2'",
     "multi-gpu-unsupported-on-windows"),
    ("I0301 10:00:00.000000  101 parallel.cpp:170] USE_NCCL := 1 must be specified for multi-GPU", "nccl-not-built-in"),
    ("mxnet.base.MXNetError: [09:00:00] src/kvstore/kvstore.cc:40: compile with USE_DIST_KVSTORE=1 to use dist_sync",
     "nccl-not-built-in"),
    ("xgboost.core.XGBoostError: [10:00:00] ../src/collective/nccl_device_communicator.cu:40: Check failed: n_uniques "
     "== world (1 vs. 4) : Multiple processes within communication group running on same CUDA device is not supported.",
     "duplicate-gpu"),
    ("[rank0]: AssertionError: parallel_world_size 8 must be equal to dit_parallel_size 4", "parallel-size-not-divisible"),
    ("ModuleNotFoundError: No module named 'tensorflow.contrib'", "wrapper-api-changed"),
    # (b47)
    ("/job/run.sh: line 12: 40213 Illegal instruction     (core dumped) python -c 'import tensorflow'",
     "cpu-lacks-avx-for-prebuilt-binary"),
    ("  File \"/opt/conda/lib/python3.11/site-packages/torch/distributed/pipelining/schedules.py\", line 1442, in __init__\n"
     "ValueError: Number of microbatches (2) must be greater than or equal to the number of stages (4).",
     "pipeline-microbatches-fewer-than-stages"),
    ("node2:811:811 [0] misc/argcheck.cc:30 NCCL WARN Send : comm argument is NULL\nnode2:811:811 [0] NCCL INFO enqueue.cc:1442 -> 4",
     "nccl-call-without-communicator"),
    ("node1:52:98 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 169.254.3.1<38123> failed : "
     "Connection timed out\nnode1:52:98 [3] NCCL INFO misc/socket.cc:565 -> 2", "nccl-socket-interface"),
    # (b48)
    ("  File \"train.py\", line 88, in capture\n    dist.all_reduce(buf)\n"
     "RuntimeError: CUDA error: operation not permitted when stream is capturing", "graph-capture-hits-uncapturable-op"),
    ("[rank3]:   File \"/usr/lib/python3.12/site-packages/torch/_inductor/compile_worker/subproc_pool.py\", line 335, in submit\n"
     "[rank3]: RuntimeError: Attempting to use a closed pool", "inductor-compile-worker-pool-died"),
    ("ValueError: QWenLMHeadModel does not support `device_map='auto'`. To implement support, the model class needs to "
     "implement the `_no_split_modules` attribute.", "model-no-split-modules-undefined"),
    ("/usr/lib/python3.11/site-packages/torch/autograd/graph.py:824: UserWarning: The AccumulateGrad node's stream does "
     "not match the stream of the node that produced the incoming gradient.", "ddp-initialized-on-side-stream"),
    ("  File \"/opt/conda/lib/python3.10/site-packages/mmengine/dist/utils.py\", line 91, in init_dist\n"
     "    raise ValueError(f'Invalid launcher type: {launcher}')\nValueError: Invalid launcher type: none",
     "not-launched-with-torchrun"),
    # (b49-b52)
    ("  File \"/work/clip/loss.py\", line 41, in gather_features\n"
     "    all_image_features = torch.distributed.nn.all_gather(image_features)\n"
     "AttributeError: module 'torch.distributed' has no attribute 'nn'", "torch-distributed-nn-not-imported"),
    ("  File \"/usr/lib/python3.8/site-packages/pytorch_lightning/plugins/training_type/ddp.py\", line 113, in "
     "_call_children_scripts\n    assert self.local_rank == 0\nAssertionError", "launcher-and-framework-both-spawn-ranks"),
    ("    from torch.distributed.tensor.experimental._attention import _templated_ring_attention\n"
     "ModuleNotFoundError: No module named 'torch.distributed.tensor.experimental'", "framework-older-than-project-requires"),
    ("ValueError: Failed to import Ray: No module named 'pyarrow'.Please install Ray with `pip install ray`.",
     "vllm-ray-import-failed"),
    # (b53-b56: a failed allocation of bytes or kilobytes is memory reserved before, not a model too big)
    ("2020-05-03 02:06:12.464132: I tensorflow/stream_executor/cuda/cuda_driver.cc:764] failed to allocate 256B "
     "(256 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory", "tf-gpu-memory-preallocated"),
    ("E tensorflow/stream_executor/cuda/cuda_driver.cc:924] failed to allocate 512.0K (524288 bytes) from device: "
     "CUDA_ERROR_OUT_OF_MEMORY", "tf-gpu-memory-preallocated"),
]


@pytest.mark.parametrize("message, entry_id", REFERENCE_ROWS, ids=[r[1] + "-" + str(i) for i, r in enumerate(REFERENCE_ROWS)])
def test_reference_row_is_explained_best_first(message, entry_id):
    matches = explain_text(message).matches
    assert matches, f"nothing matched {message!r}"
    assert matches[0].id == entry_id, [m.id for m in matches]


def test_the_watchdog_teardown_gives_way_to_the_error_it_reports():
    """"Some NCCL operations have failed or timed out" and an aborted communicator are consequences:
    the NCCL error reported with them is the answer, and a bare port-retry warning is no failure."""
    log = ("[E ProcessGroupNCCL.cpp:475] Some NCCL operations have failed or timed out. Due to the asynchronous nature of "
           "CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.\n"
           "RuntimeError: NCCL communicator was aborted on rank 1. Original reason for failure was: NCCL error: "
           "unhandled cuda error, NCCL version 2.10.3\nncclUnhandledCudaError: Call to CUDA function failed.\n"
           "Last error:\nCuda failure 'out of memory'\n")
    ids = [m.id for m in match_catalogue(log)]
    assert "nccl-watchdog-teardown" in ids and ids[0] != "nccl-watchdog-teardown", ids
    warning = "WARNING:torch.distributed.elastic.utils.distributed:port: 29500 already in use, attempt: [1/3]"
    assert "rendezvous-port-in-use" not in [m.id for m in match_catalogue(warning)]


def test_a_specific_reading_hides_the_generic_one():
    first_collective = REFERENCE_ROWS[25][0]
    ids = [m.id for m in match_catalogue(first_collective)]
    assert "hang-after-nccl-init" in ids and "nccl-watchdog-timeout" not in ids


def test_syncbatchnorm_asking_a_run_without_a_group_for_its_size_is_one_answer():
    # SyncBatchNorm's forward asks for the world size; with no process group that raises the generic
    # "Default process group has not been initialized", which is not a second cause beside it.
    log = ("  File \"/usr/local/lib/python3.8/site-packages/torch/nn/modules/batchnorm.py\", line 731, in forward\n"
           "    world_size = torch.distributed.get_world_size(process_group)\n"
           "RuntimeError: Default process group has not been initialized, please make sure to call init_process_group.\n")
    assert [m.id for m in match_catalogue(log)] == ["syncbn-error"]
    # the same message with no SyncBatchNorm in the traceback is the generic reading
    assert [m.id for m in match_catalogue(log.split("\n", 2)[2])] == ["default-pg-not-initialized"]


def test_a_specific_reading_hides_the_generic_ones_below_it_even_when_the_middle_one_is_absent():
    # A stale JIT build lock hides "the first collective timed out", which hides "a collective timed
    # out": at a later collective (SeqNum 7) the middle reading does not match, and the generic
    # timeout must still not stand beside the build lock as a second cause.
    log = ("Using /root/.cache/torch_extensions/py310_cu118 as PyTorch extensions root...\n"
           "[rank1]:[E829 16:32:30.656674606 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation "
           "timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600062 "
           "milliseconds before timing out.")
    assert [m.id for m in match_catalogue(log)] == ["stale-extension-build-lock"]
    assert hidden_by("stale-extension-build-lock") == {"hang-after-nccl-init", "nccl-watchdog-timeout", "nccl-watchdog-teardown"}


def test_own_fault_comes_before_consequences():
    log = (
        "[rank0]: RuntimeError: [pair.cc:561] Connection closed by peer [127.0.0.1]:4000\n"
        "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79 GiB\n"
    )
    ids = [m.id for m in explain_text(log).matches if m.kind == "catalogue"]
    assert ids == ["cuda-out-of-memory", "peer-connection-lost"]


def test_catalogue_errors_are_reported_clearly():
    base = {"id": "x", "title": "t", "cause": "c", "fix": "f", "role": "primary", "confidence": 0.5,
            "patterns": ["a"], "examples": ["a"], "source": "s"}
    with pytest.raises(CatalogueError, match="entry x: patterns"):
        parse_catalogue({"entry": [{**base, "patterns": ["("]}]})
    with pytest.raises(CatalogueError, match="role 'main'"):
        parse_catalogue({"entry": [{**base, "role": "main"}]})
    with pytest.raises(CatalogueError, match="source is missing"):
        parse_catalogue({"entry": [{k: v for k, v in base.items() if k != "source"}]})
    with pytest.raises(CatalogueError, match="used twice"):
        parse_catalogue({"entry": [base, base]})


def test_a_harmless_notice_is_a_note_never_an_error():
    notice = "Using bfloat16 Automatic Mixed Precision (AMP)\nYou are using a CUDA device ('NVIDIA A100-SXM4-80GB') that has Tensor Cores. To properly utilize them, you should set `torch.set_float32_matmul_precision('medium' | 'high')` which will trade-off precision for performance."
    alone = explain_text(notice)
    assert alone.matches == [] and [m.id for m in alone.benign] == ["lightning-tf32-matmul-warning"]
    assert alone.to_dict()["benign"][0]["role"] == "benign" and alone.next_steps
    # Beside a real failure the notice is not mentioned at all.
    failing = explain_text(notice + "\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert failing.matches[0].id == "cuda-out-of-memory" and failing.benign == []
    # ... and a launch's per-rank reading never takes a notice for a rank's fault.
    assert all(m.role != "benign" for m in match_catalogue(notice))


def test_the_docs_list_every_entry():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "explain.md").read_text()
    missing = [e.id for e in CATALOGUE if f"| `{e.id}` |" not in doc]
    assert missing == [], "run `python -m gpurig.diagnose.threads table` and put it in docs/explain.md"


def test_the_literal_prefilter_never_hides_a_match():
    """Each pattern's required strings (looked for before the regex runs, for speed) must be in
    every text the regex matches: checked on every example and near miss of the catalogue."""
    import re

    from gpurig.diagnose.catalogue import load_catalogue, required_literals

    texts = [t for e in load_catalogue() for t in list(e.examples) + list(e.near_misses)]
    checked = 0
    for e in load_catalogue():
        for p in list(e.patterns) + list(e.requires):
            for t in texts:
                assert (p.search(t) is None) == (p.regex.search(t) is None), (e.id, p.pattern, t[:80])
            checked += p.literals is not None
    assert checked > 500  # most patterns do get a prefilter
    assert required_literals(re.compile(r"(?i)Foo Bar|baz quux")) == ("foo bar", "baz quux")
    assert required_literals(re.compile(r"x|yyyyyy")) is None  # a branch without a long enough string
    assert required_literals(re.compile(r"a(?:bcdef)?ghij")) == ("ghij",)  # optional parts never count


def test_a_harmless_notice_is_said_once_with_its_threads_beside_it():
    # The catalogue names the notice and resolved threads of the same class match too: one note,
    # the threads as "see also", never the same notice twice.
    result = explain_text("[1,5]<stderr>:[8311b4012d34:153937] Read -1, expected 131072, errno = 1\n")
    assert result.matches == [] and [b.id for b in result.benign] == ["openmpi-vader-docker-notice"]
    assert any("github.com" in url for url in result.benign[0].see_also)


def test_an_entry_no_real_thread_has_confirmed_is_never_sure():
    from gpurig.diagnose.catalogue import UNPROVEN, entry_confidence, load_catalogue
    from gpurig.diagnose.threads import SURE, load_entry_record

    record = load_entry_record()
    for entry in load_catalogue():
        if entry.role == "primary" and entry.id not in record:
            assert entry_confidence(entry) <= UNPROVEN < SURE, entry.id
    # One that real threads confirmed keeps a confidence of its own, read from its record.
    proven = next(e for e in load_catalogue() if record.get(e.id, (0, 0))[0] >= 10 and e.role == "primary")
    answered, right = record[proven.id]
    assert abs(entry_confidence(proven) - (right + 4 * proven.confidence) / (answered + 4)) < 0.001


def test_a_timeout_reading_is_sure_only_as_often_as_it_named_the_cause(monkeypatch):
    """A collective timeout is a consequence: when the real threads it matched mostly name a deeper
    cause, "sure" would be confidently wrong; a good record never lifts it above what it states."""
    from dataclasses import replace

    from gpurig.diagnose import catalogue, threads

    watchdog = next(e for e in catalogue.load_catalogue() if e.id == "nccl-watchdog-timeout")
    assert watchdog.role == "timeout" and watchdog.confidence >= threads.SURE
    monkeypatch.setattr(threads, "load_entry_record", lambda: {watchdog.id: (10, 5)})
    assert catalogue.entry_confidence(watchdog) < threads.SURE
    monkeypatch.setattr(threads, "load_entry_record", lambda: {watchdog.id: (10, 10)})
    assert catalogue.entry_confidence(watchdog) == watchdog.confidence
    primary = replace(watchdog, role="primary")  # an entry naming a rank's own fault may rise with its record
    assert catalogue.entry_confidence(primary) > watchdog.confidence


def test_a_launcher_stopped_from_outside_is_read_as_a_casualty_not_a_hangup():
    # The elastic agent got SIGTERM (a scheduler, an orchestrator, a kill): nothing failed in the
    # job's ranks, and it is not the SIGHUP of a closed terminal.
    log = ("[default0]:12:13:46    INFO Starting training step 0\n"
           "W1130 12:13:49.388000 124326 torch/distributed/elastic/agent/server/api.py:723] Received 15 death signal, "
           "shutting down workers\n"
           "W1130 12:13:49.389000 124326 torch/distributed/elastic/multiprocessing/api.py:900] Sending process 124533 "
           "closing signal SIGTERM\n")
    result = explain_text(log)
    assert [m.id for m in result.matches][:1] == ["worker-terminated-by-launcher"]
    hangup = explain_text("W0616 00:37:22.830000 4015698 torch/distributed/elastic/agent/server/api.py:719] "
                          "Received Signals.SIGHUP death signal, shutting down workers\n")
    assert hangup.matches[0].id == "launcher-sighup-session-closed"


# An issue editor's wrapping, as pasted in https://github.com/AI-Hypercomputer/xpk/issues/492.
WRAPPED = """E0605 09:26:44.248647    1054 pjrt_stream_executor_client.cc:2839] Execution of replica 0
failed: INTERNAL: NCCL operation ncclGroupEnd() failed: unhandled system error (run with
NCCL_DEBUG=INFO for details). Last NCCL warning(error) log entry (may be unrelated)  'Error
while creating shared memory segment /dev/shm/nccl-TfciGV (size 31850880), error: No space
left on device (28)'."""


def test_a_message_wrapped_over_lines_is_read_whole_at_its_first_line():
    matches = explain_text(WRAPPED, index=None).matches
    assert matches[0].id == "nccl-shared-memory"
    assert matches[0].line == 3
    assert "Error while creating shared memory segment" in matches[0].evidence
    assert "nccl-system-error" not in [m.id for m in matches]  # the specific reading hides the generic one


def test_only_a_long_line_going_on_in_lower_case_is_joined():
    from gpurig.diagnose.catalogue import unwrap

    assert unwrap("short line\nwhile creating") == []
    assert unwrap("x" * 70 + "\nTraceback (most recent call last):") == []
    assert unwrap("| 0  NVIDIA H200   On  | 00000000:18:00.0 Off |" * 2 + "\n| N/A  30C    P0  |") == []
    assert unwrap("a\n" + "y" * 70 + " \nleft on device\nBye\n" + "z" * 60 + "\nend") == [
        (2, "y" * 70 + " left on device"), (5, "z" * 60 + " end")]


def test_a_jax_out_of_memory_is_not_read_as_tensorflow():
    """XLA words the OOM alike in TensorFlow and JAX; a JAX log gets JAX's fix, and a TensorFlow log keeps its own."""
    jax_log = "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 402653184 bytes."
    tf_log = ("2021-03-01 10:00:00.000000: W tensorflow/core/common_runtime/bfc_allocator.cc:456] ...\n"
              "tensorflow.python.framework.errors_impl.ResourceExhaustedError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 5 bytes")
    assert [m.id for m in explain_text(jax_log, index=None).matches] == ["jax-out-of-memory"]
    assert explain_text(tf_log, index=None).matches[0].id == "tf-resource-exhausted-oom"


def test_a_plugin_that_fails_to_load_is_not_the_harmless_no_plugin_notice():
    """NCCL goes on to say "No plugin found" after the plugin's dlerror: the dlerror is the finding."""
    log = ("[0] NCCL INFO NET/Plugin : dlerror=/opt/amazon/efa/lib/libfabric.so.1: version `FABRIC_1.7' not found "
           "(required by /opt/conda/lib/libnccl-net.so) No plugin found (libnccl-net.so), using internal implementation")
    result = explain_text(log, index=None)
    assert [m.id for m in result.matches] == ["nccl-net-plugin-load-failed"]
    plain = explain_text("[0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation", index=None)
    assert plain.matches == [] and [b.id for b in plain.benign] == ["nccl-info-no-plugin-benign"]


def test_an_unsupported_nvml_query_is_a_harmless_notice():
    log = "\n".join(f"E0220 07:59:0{i}.944339 1 metrics.cc:238] failed to get power usage for GPU 0, NVML_ERROR_NOT_SUPPORTED"
                    for i in range(3))
    result = explain_text(log, index=None)
    assert result.matches == [] and [b.id for b in result.benign] == ["nvml-query-unsupported-notice"]


def test_ranks_timing_out_while_one_builds_a_kernel_are_read_as_the_build():
    log = ("> compiling and loading fused kernels ...\n"
           "[rank1]:[E829 16:32:30.656674606 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: "
           "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600062 milliseconds before timing out.")
    ids = [m.id for m in explain_text(log, index=None).matches]
    assert ids[0] == "stale-extension-build-lock"
    assert "hang-after-nccl-init" not in ids and "nccl-watchdog-timeout" not in ids


def test_slurm_starting_every_rank_is_not_read_when_the_ranks_did_start():
    """Rank 0 alone, then nothing, is the sign that srun was missing; every rank announcing itself is not."""
    all_started = ("Multi-processing is handled by Slurm.\n"
                   + "".join(f"initializing ddp: GLOBAL_RANK: {r}, MEMBER: {r + 1}/2\n" for r in range(2))
                   + "Epoch 0:  10%|#         | 5/50 [00:01<00:10,  4.10it/s]\n")
    rank0_alone = "Multi-processing is handled by Slurm.\ninitializing ddp: GLOBAL_RANK: 0, MEMBER: 1/2\n"
    assert [m.id for m in explain_text(rank0_alone, index=None).matches][:1] == ["slurm-job-without-srun"]
    assert "slurm-job-without-srun" not in [m.id for m in explain_text(all_started, index=None).matches]


def test_nvml_blocked_is_read_as_the_containers_device_rules_only_in_a_container():
    in_container = "docker run --gpus all ubuntu nvidia-smi\nFailed to initialize NVML: GPU access blocked by the operating system"
    in_wsl = "$ /usr/lib/wsl/lib/nvidia-smi\nFailed to initialize NVML: GPU access blocked by the operating system"
    assert [m.id for m in explain_text(in_container, index=None).matches][:1] == ["toolkit-no-cgroups-devices-missing"]
    assert "toolkit-no-cgroups-devices-missing" not in [m.id for m in explain_text(in_wsl, index=None).matches]


def test_a_cpu_without_the_binarys_instructions_points_at_the_shells_line():
    # The shell's "Illegal instruction" line is the evidence, not the command above it.
    m = explain_text('$ python -c "import tensorflow"\nIllegal instruction (core dumped)\n').matches[0]
    assert m.id == "cpu-lacks-avx-for-prebuilt-binary" and m.evidence == "Illegal instruction (core dumped)"
