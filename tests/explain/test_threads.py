"""The index of resolved public threads behind `gpurig explain`, and explain's rates on real logs.

The threads (src/gpurig/knowledge/threads/*.jsonl) are split once, by a hash of their URL, into a
development part and a test part never tuned on. The development part is answered leave-one-out
(each thread by an index of all the others); the test part by an index of the development part.
Both rates are printed at the end of the run; neither may fall below today's level. Healthy real
logs (tests/corpus/explain/healthy, each with its source) must get no explanation at all.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from gpurig.diagnose import loglines
from gpurig.diagnose import threads as th
from gpurig.diagnose.catalogue import load_catalogue
from gpurig.diagnose.explain import explain_text

HEALTHY = Path(__file__).resolve().parents[1] / "corpus" / "explain" / "healthy"
FRAMEWORKS = {"pytorch", "tensorflow", "keras", "accelerate", "deepspeed", "lightning", "transformers", "megatron",
              "nccl", "horovod", "jax", "docker", "kubernetes", "slurm", "driver", "other"}

# The targets on the held-out test part are 85% first, 92% within three, at most 3% confidently
# wrong; they are not met yet (docs/explain.md gives the figures). These floors are what the
# explainer reaches today, less a margin: a change that loses ground fails here.
# On 2026-12-02 the index grew from 1,188 to 1,519 threads; the threads added in new wordings and
# new classes are answered less often than the older ones (test part 73.9% -> 71.4% first, as 63
# new test threads joined it), so the floors were set again from the larger parts.
# On 2026-12-03 the thread confidences became one fitted curve instead of six bands (stable when a
# few answers change); answers scoring 0.08-0.15 are right about one time in five, so the floor of
# 0.25 now leaves them unsaid: on the test part 10.9% -> 13.1% "nothing", 70.5% -> 69.9% first
# (2 of 329 threads), confidently wrong unchanged at 3.3%.
# Later that day 89 threads of the long tail joined (34 classes new to the index, met first at 21%
# right): the test part went 70.5% -> 68.3% first as 15 of them joined it (its 329 older threads:
# 70.2%), so the floor of the first answer was set again from the larger part.
# On 2026-12-04, 89 new threads (b18) were answered by the shipped index before they joined it: 40%
# first right. 25 of them joined the test part, which went 68.7% -> 67.1% first and 73.7% -> 72.1%
# within three (its 358 older threads unchanged by the joining: 68.7% / 73.7%); the floors follow.
# Later that day 120 more (b19, b20: PyTorch forums and cluster set-ups, diffusion, speech, graph and
# RL stacks, container engines) were answered before they joined: 49 first right (41%). 23 joined
# the test part (9 right first), which went 67.1% -> 65.0% first and 72.1% -> 70.2% within three
# (its 383 older threads: 66.6%, two of them moved by the refitted curve and a new pattern); the
# floors follow.
# Later still that day, 69 more (b21: Windows and macOS, inference servers over several GPUs, PyTorch 1.x-era
# code, Lightning and Keras 3) were answered before they joined: 22 first right (32%). 10 joined the
# test part (3 right first once the others had joined the index), which went 65.0% -> 64.2% first and
# 70.2% -> 69.0% within three (its 406 older threads unchanged: 65.0%); the floors follow.
# Then 38 more (b22: hosted notebooks and clouds, torch.compile and mixed precision, GPU hardware
# faults, 3D, video and PaddlePaddle repositories; the search budget ran out at 8-14 per area) were
# answered before they joined: 6 first right (16%). The reader who mapped them put "invalid device
# ordinal" on Colab under gpu-count-request-exceeds-visible, whose definition is the same cause as
# invalid-device-ordinal's (a GPU index or count beyond what the process sees): the two are one class
# now (b22: 10 first right once folded; test part 64.2% -> 65.1% first, 3.1% -> 3.4% confidently
# wrong, the entry's record rising to 26 of 30 right). With b22's 8 test threads: 64.9% first.
# On 2026-12-05, 60 more (b23: MPI and other schedulers, data loading, checkpoints across ranks,
# numerics) were answered before they joined: 10 first right (17%; 18 of them name a release bug of
# a library, which no log can tell). 8 joined the test part (1 right first), which went 64.9% ->
# 63.9% first (its 424 older threads unchanged: 64.9%); the development part, 52 threads larger,
# 77.3% -> 75.8% first; the floors follow.
# Then 31 more (b24: RLHF stacks, diffusion training, speech toolkits, managed clouds and graph
# libraries; the search budget ran out) were answered before they joined, with the catalogue's new
# entries from b23's development threads: 10 first right (32%). 7 joined the test part (2 right
# first), which went 63.9% -> 63.3% first and 68.3% -> 67.7% within three (its 424 older threads:
# 64.9%, unchanged); the floors follow.
# Later that day 59 more (b27: DDP and DataParallel usage, memory and data loading, version
# mismatches) were answered before they joined: 38 first right (64%), and 51 more (b28: checkpoints
# across ranks, evaluation and metrics, Windows and notebooks, mixed precision): 19 (37%). 27 joined
# the test part (12 right first), which went 62.8% -> 62.2% first and 66.2% -> 65.7% within three
# (its 468 older threads: 62.8% -> 63.2%); the floors follow.
# On 2026-12-05, 44 more (b29: networks between nodes, Slurm and Kubernetes jobs, large-model
# frameworks, vision toolkits) were answered before they joined: 9 first right (20%; most of them a
# single pasted line of a kind the index had not met). 7 joined the test part (1 right first), which
# went 62.2% -> 61.6% first and 65.7% -> 64.9% within three (its 468 older threads unchanged at
# 63.2%); the development part, 37 threads larger, 74.2% -> 73.9% first; the floors follow.
# Then 21 more (b30: recent PyTorch's c10d wording, workstations, GPU containers): 9 first right (43%)
# before they joined; 5 joined the test part (4 right first): 61.6% -> 61.7% first.
# On 2026-12-05, 45 more (b31: LLM fine-tuning and RL stacks, Slurm/MPI/PMIx and Kubernetes gang
# scheduling, InfiniBand/RoCE, Ray-based inference): 5 first right (11%) before they joined, 25 of them
# causes the index had never met. 10 joined the test part (1 right first), which went 61.7% -> 60.7%
# first and 65.1% -> 64.2% within three (its 507 older threads unchanged: 61.7%); the floors follow.
# Then an entry's record stopped counting the development threads its source cites (it was written
# from them): 121 entries matched only such threads and are no longer sure. Sure answers on the test
# part 232 -> 202, right 91.8% -> 93.1%; confidently wrong 3.7% -> 2.7% (the target is at most 3%),
# first right 60.7% -> 60.9%; the development part unchanged at 73.4% first. The ceiling follows.
# Then 37 more (b32: TensorFlow/JAX workers, GPU server drivers, firmware and management daemons,
# run-time faults of data-parallel jobs): 4 first right (11%) before they joined, 12 of them causes
# new to the index. 7 joined the test part (1 right first): 60.9% -> 60.5% first, 64.2% -> 63.5%
# within three (its 507 older threads: 61.7% first, 64.7% within three); the development part, 30
# threads larger, 73.4% -> 73.0% (10 of the 30 of a cause no other development thread has).
# Then 11 more (b33: recent PyTorch, Accelerate, TRL and NCCL releases): none first right before they
# joined (6 name a release bug). 2 joined the test part (none right): 60.5% -> 60.3% first, 63.5% ->
# 63.1% within three (the watchdog's teardown line now hidden by the timeout it points back to); the
# development part 73.0% -> 72.7%. The floor within three keeps a margin of a point.
# Then 17 more (b34: multi-GPU inference servers, FSDP2, cloud and consumer machines, TensorFlow
# parameter servers, JAX multi-host): 2 first right before they joined, 12 with nothing said. 6 joined
# the test part (2 right first): 60.3% -> 60.0% first, 63.1% -> 62.8% within three (its 526 older
# threads unchanged); the development part 72.7% -> 72.6%. The first-right floor follows, to 0.59.
# Then 18 more (b35: Lightning and Hugging Face fine-tuning on several GPUs, GPU containers and NCCL
# library mismatches, torch.distributed RPC and pipeline errors): 4 first right before they joined,
# 9 with nothing said. 3 joined the test part (1 right first): 60.0% -> 59.8% first, 62.8% -> 63.0%
# within three (its 532 older threads: 60.0% first, unchanged); the development part 72.6% -> 72.4%.
# Then 43 more (b36: causes the index knew from only one to four threads): 14 first right before they
# joined, 17 with nothing said, 3 confidently wrong. Six catalogue patterns came from its development
# threads (MPI's 'no support for X in MPI process group', JAX's 'Unknown backend gpu' and its start-up
# probe notices, Hydra's unresolvable host, Keras' apply_gradients in cross-replica context, an MPI
# launcher on another MPI's libraries). 11 joined the test part (3 right first): 59.8% -> 58.8% first,
# 63.0% -> 62.5% within three; its 535 older threads went 59.8% -> 59.4% first (two answers moved by
# the larger index, not by the patterns). The development part 72.4% -> 72.1%. The first-right floor
# follows, to 0.58.
# Then 52 more (b37: torch.distributed RPC, pipelining and sharded optimizers, fine-tuning stacks under
# ZeRO-3 and tensor parallelism, GPU containers and Kubernetes device plugins, Horovod, TensorFlow
# and torchtitan): 9 first right before they joined, 25 with nothing said, none confidently wrong;
# 17 name a cause the index had never seen. Their development threads taught the catalogue FSDP under
# inference_mode, RPC without init_rpc and RPC timeouts, DTensor gradient clipping, ZeRO-3 with
# non-reentrant checkpointing, quantized models moved by a wrapper, Horovod's backward passes per
# step, nvidia-docker 1.x's plugin and volume, GPUs the device plugin took away, unequal TensorFlow
# workers and any newer torch.distributed name an import misses. 11 joined the test part (1 right
# first): 58.8% -> 57.8% first, 62.5% -> 61.4% within three; its 546 older threads unchanged (321
# first right). The development part 72.1% -> 72.1%. Both floors follow, to 0.57 and 0.61.
# Then 47 more (b38: Megatron/NeMo-scale training, multi-GPU inference servers, Slurm with enroot/pyxis
# and Apptainer, cloud GPU clusters, research repositories' multi-GPU runs): 11 first right before they
# joined, 29 with nothing said, 1 confidently wrong. Their development threads taught the catalogue
# a directory every rank creates, a logger made only on rank 0, Megatron-Core's legacy optimizer
# sharding, a Megatron config given to the Hugging Face parser, DeepSpeed names a project imports,
# TurboMind's power-of-two tensor parallelism, user namespaces the host forbids, a TCPXO GPU-NIC slot
# taken, enroot's runtime and data directories, pyxis' seccomp flag, srun without the PMI Open MPI
# needs, a bare ibv_create_cq ENOMEM and a launcher's non-numeric --master_port. 9 joined the test
# part (1 right first): 57.8% -> 57.2% first, 61.4% -> 60.8% within three; its 557 older threads went
# from 322 to 323 first right. The development part 72.1% -> 72.0% (1,616 of 2,245, just under 0.72). The
# within-three floor follows, to 0.60, and the development floor to 0.71.
# Then 30 more (b39: consumer and WSL multi-GPU set-ups, the data pipeline on several GPUs,
# checkpoints and resuming, torch.compile and CUDA graphs; the search budget ran out at 54-70 look-ups
# a searcher): none first right before they joined, 2 within three, 17 with nothing said, none
# confidently wrong; 17 name a cause the index had never seen. Their development threads taught the
# catalogue NCCL that cannot be captured in a CUDA graph, the NCCL watchdog during a graph capture,
# IOMMU page faults from the GPUs, a 256 MiB BAR1 under the P2P kernel modules, the inductor autotune
# cache raced by ranks, DALI's shard arguments, transformers' staging folder renamed twice and a
# plugin built for a newer NCCL. 6 joined the test part (none right first): 57.2% -> 56.6% first,
# 60.8% -> 60.5% within three; its 566 older threads went from 324 to 324 first right, 344 to 346
# within three. The development part 72.0% -> 71.6%. The first-right floor follows, to 0.56.
# Then 41 more (b40: RLHF and post-training stacks on Ray and vLLM, detection and speech toolkits,
# cloud GPU networking with EFA/libfabric and RoCE, memory and gradients under DDP): 10 first right
# before they joined, 17 with nothing said, 1 confidently wrong (a RoCE GID index differing inside
# containers, since folded into the NCCL IB error it was answered with). Their development threads
# taught the catalogue expandable segments shared over CUDA IPC on an old kernel, sleep mode freeing
# nothing under expandable segments, a colocated engine out of memory waking up, Ray workers that
# cannot register with the raylet, a container without the RDMA user-space driver, the EFA/libfabric
# pieces out of step and link-local interfaces in NCCL's socket list. 8 joined the test part (1 right
# first): 56.6% -> 56.2% first, 60.5% -> 59.8% within three; its 572 older threads went from 324 to 325
# first right, 346 to 346 within three. The development part 71.6% -> 71.4% (71.5% with the
# global rank as a GPU index on a multi-node run, from two development threads). The within-three
# floor follows, to 0.59.
# Then 43 more (b41: cluster schedulers and managed platforms, diffusion training and quantised
# models, domain toolkits, JAX/Colossal-AI/FairScale/apex): 10 first right before they joined, 18 with
# nothing said, 1 confidently wrong, 12 bugs of one library release. Their development threads taught
# the catalogue sshd without SYS_CHROOT, a launcher's failed environment export, a bind to another
# host's address, DDP over several GPUs of one process, SyncBatchNorm in fp16, apex's SyncBatchNorm on
# torch >= 1.6, JAX's heartbeat timeout, Orbax given pmap-replicated state and a JAX sharding of the
# wrong rank. 4 joined the test part (3 right first): 56.2% -> 56.5% first, 59.8% -> 60.1% within
# three; its 580 older threads went from 326 to 327 first right. The development part 70.5% (after
# they joined) -> 71.1%. The floors stay.
# Then 50 more (b42: GPU health and the newest drivers, distributed evaluation and metrics, FSDP2 /
# DTensor / float8, notebooks): 11 first right before they joined, 29 with nothing said, 19 of causes
# no earlier thread had. Their development threads taught the catalogue a driver branch that dropped
# the GPU, DCGM older than the driver's CUDA, fabric memory refused (IMEX channel or no MNNVL),
# metrics synced while empty on a rank, DDP over DTensor parameters (device_map='auto' under
# torchrun), garbage sizes from collectives out of step, NF4 missing an operation, float8 all-gather
# under FSDP1 or on an empty shard. 14 joined the test part (3 right first): 56.5% -> 55.7% first,
# 60.1% -> 59.0% within three; its 584 older threads stayed at 330 first right and went from 351 to
# 349 within three (the new entries pushed two right answers out of the first three). The
# development part 70.5% (after they joined) -> 70.9%. The floors follow the new threads, to 0.55
# and 0.58 (development 0.70).
# Then 54 more (b43: MosaicML and NeMo, trackers and profilers under DDP, kernel libraries on mixed
# or non-first GPUs, CuPy/RAPIDS/UCX): 6 first right before they joined, 32 with nothing said, 4
# confidently wrong (three an extension built for another GPU read as the wheel's missing arch), 23 of
# causes no earlier thread had. Their development threads taught the catalogue an extension built for
# another GPU, mixed GPU models under one model, a JIT cache another user owns, Triton kernels on the
# current GPU rather than the tensors', Triton's ptxas newer than the driver, Streaming's per-rank
# temporary folder, Megatron's unpadded buckets, TensorBoard writers on every rank, and four more
# wordings. 12 joined the test part (0 right first before, 2 after the learning): 55.7% -> 54.9%
# first, 59.0% -> 58.2% within three; its 598 older threads stayed at 333 first right and went from 355
# (after the batch joined) to 352 within three. The development part 69.9% (after they joined) ->
# 70.3%. The first-right floor follows the new threads, to 0.54.
# Then 3 more (b44: RLlib, datasets' worker pools in every rank, an elastic rendezvous closed by a
# killed agent; none right before they joined): test 54.8% first, 58.1% within three; development 70.2%.
# Then 45 more (b45: reinforcement learning and MPI-launched PyTorch, datasets under torchrun, elastic
# training, numerics across ranks; 5 of 40 development and 0 of 5 held-out ones right before they
# joined): development 69.2% after they joined, 69.8% after the catalogue learned from them (Hugging
# Face datasets caches built by several processes, Orbax restored on other devices, exist_ok=True
# directories on shared filesystems, forced NCCL protocols, five wordings and late nodes in the
# closed-rendezvous entry); test 54.4% first,
# 58.1% within three (its 611 older threads from 335 / 355 to 335 / 358). The development floor
# follows the new threads, to 0.69.
# Then 40 more (b46: scientific models, retrieval and recommenders, video and 3D repositories, the
# older frameworks; 6 of 30 development and 1 of 10 held-out ones right before they joined):
# development 69.3% after they joined, 69.7% after the catalogue learned from them; test 53.7% first
# (336 of 626), 57.3% within three, its 616 older threads unchanged at 335 / 358. The test part's
# first-right and within-three floors follow the new threads, to 0.53 and 0.57.
# Then 93 more in two batches. b47 (46: NVIDIA inference engines and their launchers, TensorFlow's
# cluster strategies, mixture-of-experts and pipeline libraries, managed clouds; 5 of 32 development and
# 2 of 14 held-out ones right before they joined) taught the catalogue a CPU without the binary's
# instructions (SIGILL), too few pipeline micro-batches, NCCL calls without a communicator and NCCL
# connecting to link-local addresses: its development threads from 5 to 10 right first. b48 (47:
# vision-language repositories, Chinese LLM fine-tuning repositories, torch.compile and CUDA graphs
# under distribution, speech toolkits; 12 of 43 development and 0 of 4 held-out ones right before they
# joined) taught it uncapturable work in a CUDA graph capture, torch.compile's dead worker pool, models
# without _no_split_modules, gradients accumulated on another stream and mmengine's "none" launcher:
# 18 of its 43 right first. After both: development 68.8% first; test 52.6% first (339 of 644), 56.1%
# within three, 2.6% confidently wrong; its 626 older threads from 336 / 359 to 337 / 359, the 18 new
# ones 2 right. The floors follow the new threads, to 0.52 and 0.56 (test) and 0.68 (development).
# Then 43 more in four small batches (b49-b52: thin or well-searched corners; 10 of 32 development and 1
# of 11 held-out ones right before they joined), mostly release bugs of the libraries; the catalogue
# learned torch.distributed.nn not imported, Lightning spawning ranks a launcher already started, vLLM
# without Ray, and subpackages of new distributed APIs. Development 68.5% first; test 51.9% first (340
# of 655), 55.4% within three; its 644 older threads unchanged at 339 / 361, the 11 new ones 1 right.
# The floors follow the new threads, to 0.51 and 0.55 (test).
# Then 12 from the most searched corners (b53-b56; 1 of 10 development and 1 of 2 held-out ones right
# before they joined); the catalogue learned TensorFlow's failed allocation of a few kilobytes (memory
# reserved before). Development 68.3% first; test 51.9% first (341 of 657), 55.4% within three; its
# 655 older threads unchanged. The floors hold.
FLOOR_TEST_FIRST = 0.51
FLOOR_TEST_TOP3 = 0.55
CEILING_TEST_CONFIDENTLY_WRONG = 0.035
FLOOR_DEV_FIRST = 0.68
MIN_THREADS, MIN_TEST = 600, 120


@pytest.fixture(scope="module")
def rates():
    return th.measure_splits()


def test_every_shipped_thread_is_complete_and_sourced():
    problems: list[str] = []
    cases = th.parse_cases(th.read_case_lines(), problems)
    assert problems == []  # no bad line, no URL twice
    catalogue = {e.id for e in load_catalogue()}
    classes = th.load_classes()
    for c in cases:
        assert re.fullmatch(r"https://\S+", c.url), c.id
        assert c.framework in FRAMEWORKS, (c.id, c.framework)
        assert c.established_by in th.ESTABLISHED_BY, (c.id, c.established_by)
        assert c.cls in catalogue or c.cls in classes, f"{c.id}: class {c.cls} is defined nowhere"
        assert len(c.log) <= 3000 and len(c.log.splitlines()) <= 40, c.id
        assert c.found_by.split(":")[0] in ("issues", "pages", "docs", "code"), (c.id, c.found_by)
    for name, spec in classes.items():
        target = spec.get("same_as")
        assert "definition" in spec or target, name
        assert target is None or target in catalogue or target in classes, f"{name}: same_as {target} is defined nowhere"


def test_enough_threads_in_both_parts():
    cases = th.load_cases()
    assert len(cases) >= MIN_THREADS
    assert sum(c.split == "test" for c in cases) >= MIN_TEST


def test_the_split_is_fixed_by_the_url_alone():
    assert th.split_of("https://github.com/pytorch/pytorch/issues/1") == th.split_of("HTTPS://github.com/pytorch/pytorch/issues/1/")
    splits = [th.split_of(f"https://example.org/t/{i}") for i in range(2000)]
    assert 0.17 < splits.count("test") / len(splits) < 0.23
    # A known value, so that a change of the hash (which would reshuffle the parts) fails here.
    assert [th.split_of(f"https://example.org/t/{i}") for i in range(10)] == [
        "dev", "dev", "dev", "dev", "dev", "dev", "dev", "dev", "dev", "dev"]
    assert [th.split_of(f"https://github.com/pytorch/pytorch/issues/{i}") for i in (5, 6, 7)] == ["test", "dev", "test"]


def test_normalising_masks_what_differs_between_users():
    a = loglines.normalise_line("[rank3]: RuntimeError: NCCL error in: /opt/pytorch/torch/csrc/ProcessGroupNCCL.cpp:1970, "
                          "unhandled system error, NCCL version 2.18.1 at 10.0.0.12:29500 ptr 0x7f3a2c")
    b = loglines.normalise_line("RuntimeError: NCCL error in: C:\\build\\torch\\csrc\\ProcessGroupNCCL.cpp:825, "
                          "unhandled system error, NCCL version 2.7.8 at 192.168.1.2:1234 ptr 0xdeadbeef")
    assert a == b
    assert "rank3" not in a and "0x" not in a and "processgroupnccl.cpp" in a


def test_distinctive_lines_skip_chatter_frames_and_the_launchers_table():
    log = (HEALTHY / "nccl-info-01.log").read_text() + (
        'Traceback (most recent call last):\n  File "/x/train.py", line 3, in <module>\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        "  exitcode  : -9 (pid: 1234)\n")
    lines = loglines.distinctive_lines(log)
    assert lines[0].startswith("torch.outofmemoryerror: cuda out of memory")
    assert lines[-1] == "launcher exitcode_m9" and len(lines) == 2


def test_mpi_and_horovod_reports_that_a_rank_died_count_only_by_their_signal():
    """mpirun's, Horovod's and torch.multiprocessing.spawn's reports that a rank ended are the same
    in every failed run, like torchrun's table: only the signal is kept, as the exit code torchrun
    would report, so the real error line decides which threads are close."""
    log = ("[1,0]<stderr>:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
           "[1,1]<stderr>:RuntimeError: Horovod has been shut down. This was caused by an exception on one of the "
           "ranks or an attempt to allreduce, allgather or broadcast a tensor after one of the ranks finished execution.\n"
           "Primary job  terminated normally, but 1 process returned\n"
           "mpirun noticed that process rank 0 with PID 21183 on node host01 exited on signal 9 (Killed).\n"
           "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGSEGV\n")
    lines = loglines.distinctive_lines(log)
    assert lines == ["torch.outofmemoryerror: cuda out of memory. tried to allocate 0 gib",
                     "launcher exitcode_m9", "launcher exitcode_m11"]


def test_a_failure_told_in_words_no_error_pattern_knows_is_read_by_its_last_lines():
    """"No kernel image is available ..." says no "error": a failed log is then read by its last
    lines (not its frames), a resolved thread's log always; a log of progress alone stays unread."""
    log = ('Traceback (most recent call last):\n  File "/x/train.py", line 3, in <module>\n'
           "Killed\nNo kernel image is available for execution on the device\n")
    assert loglines.distinctive_lines("No kernel image is available for execution on the device\n") == []
    assert loglines.distinctive_lines(log) == ["traceback (most recent call last):", "killed",
                                              "no kernel image is available for execution on the device"]
    assert loglines.distinctive_lines("CUDA_ERROR_NO_BINARY_FOR_GPU", fallback=True) == ["cuda_error_no_binary_for_gpu"]
    assert loglines.distinctive_lines("epoch 1 loss 0.5\nepoch 2 loss 0.4\n") == []


def test_a_dotted_name_is_also_a_word_by_its_last_part():
    """An exception named with its module matches the same exception named without it."""
    words = loglines.line_tokens(["torch.distributed.elastic.multiprocessing.api.signalexception: process got signal"])
    assert "signalexception" in words and "torch.distributed.elastic.multiprocessing.api.signalexception" in words
    assert set(loglines.line_tokens(["raise signalexception(sigval)"])) & set(words) == {"signalexception"}


def test_a_log_of_many_megabytes_keeps_its_first_and_last_errors():
    noise = "".join(f"[rank{r}]: UserWarning: step {i} is slow\n" for i in range(3000) for r in range(2))
    log = "RuntimeError: first failure here\n" + noise + "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    lines = loglines.distinctive_lines(log, limit=20)
    assert len(lines) <= 20
    assert lines[0].startswith("runtimeerror: first failure") and "illegal memory access" in lines[-1]


def test_index_answers_with_the_closest_resolved_case_and_its_url():
    cases = [c for c in th.load_cases() if c.split == "dev"]
    target = next(c for c in cases if c.cls == "ddp-unused-parameters" and "Expected to have finished reduction" in c.log)
    hits = th.ThreadIndex(cases).search(target.log, exclude=target.id)
    assert hits and hits[0].case.cls == "ddp-unused-parameters" and hits[0].case.id != target.id
    assert hits[0].case.url.startswith("https://") and 0 < hits[0].confidence <= 1
    assert th.ThreadIndex(cases).search("epoch 1 loss 0.5\nepoch 2 loss 0.4\n") == []


def test_a_known_message_in_a_wording_the_patterns_miss_is_read_by_its_resemblance_to_the_examples():
    """The catalogue's real examples are cases of the index: a retyped message ("encontered") that no
    pattern matches is still closest to its entry's examples, and the answer is that entry, said as
    a resemblance (kind "similar"), with the entry's cause and fix."""
    from gpurig.diagnose.catalogue import match_catalogue

    typo = "RuntimeError: CUDA error: an illegal memory access was encontered"
    assert [m for m in match_catalogue(typo) if m.id == "cuda-illegal-memory-access"] == []
    first = explain_text(typo, index=th.ThreadIndex([])).matches[0]
    assert (first.kind, first.id, first.cls) == ("similar", "cuda-illegal-memory-access", "cuda-illegal-memory-access")
    assert first.title.startswith("Like a known error:") and "CUDA_LAUNCH_BLOCKING" in first.fix
    assert first.evidence == typo and th.FLOOR <= first.confidence < th.SURE
    # Harmless notices are not among them: a notice is never an answer by resemblance.
    benign = {e.id for e in load_catalogue() if e.role == "benign"}
    assert th.example_cases() and not any(c.entry in benign for c in th.example_cases())
    assert th.ThreadIndex([], examples=False).cases == []


def test_many_threads_of_one_common_line_do_not_outvote_the_closest_case():
    """Four threads pasting only the common NCCL line score more together than the one thread with
    the user's very line; a class's further voters count for less, so the closest case's class wins."""
    def case(i: int, cls: str, log: str) -> th.Case:
        c = th.Case(id=f"t{i}", url=f"https://example.org/{i}", title="x", framework="other", cls=cls, log=log,
                    cause="c", fix="f", established_by="maintainer", found_by="search")
        c.tokens = c.compute_tokens()
        return c

    cases = [case(0, "near", "RuntimeError: NCCL error: unhandled system error, shm_open failed")]
    cases += [case(i, "copies", "RuntimeError: NCCL error: unhandled system error") for i in range(1, 5)]
    cases += [case(i, f"other{i}", f"ValueError: something else {w}")
              for i, w in zip(range(5, 12), "alpha beta gamma delta epsilon zeta eta".split(), strict=True)]
    hits = th.ThreadIndex(cases, examples=False).search("RuntimeError: NCCL error: unhandled system error, shm_open failed: No such file")
    assert [h.case.cls for h in hits] == ["near", "copies"] and hits[0].case.id == "t0"


def test_calibration_is_current_monotone_and_never_sure():
    shipped = th.load_calibration()
    dev = [c for c in th.load_cases() if c.split == "dev"]
    assert shipped == th.fit_calibration(th.leave_one_out(dev)), \
        "run `python -m gpurig.diagnose.threads calibrate` after changing the threads"
    grid = [i / 200 for i in range(-20, 221)]
    values = [th.calibrated(s) for s in grid]
    assert values == sorted(values) and all(0 <= v <= 1 for v in values)
    # The best-scored development answers were right about three times in four: no thread is sure.
    assert max(values) == shipped.cap < th.SURE
    assert th.calibrated(-1.0) == th.calibrated(shipped.low) and th.calibrated(10.0) == th.calibrated(shipped.high)


def _logistic_pairs(n: int, seed: int, a: float = 1.5, b: float = 1.7) -> list[tuple[float, bool]]:
    """(score, right) pairs drawn like the development answers: right with a logistic chance in log(score)."""
    import math
    import random

    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        score = round(rnd.uniform(0.02, 0.9), 4)
        p = 1 / (1 + math.exp(-(a * math.log(score + th.EPS) + b)))
        out.append((score, rnd.random() < p))
    return out


def test_calibration_is_the_logistic_curve_of_greatest_likelihood():
    pairs = _logistic_pairs(300, seed=1)
    fit = th.fit_calibration(pairs)
    assert fit.a > 0 and fit.low == min(s for s, _ in pairs) and fit.high == max(s for s, _ in pairs)
    # The greatest likelihood: the gradient of the log-likelihood is zero there, and moving away lowers it.
    import math

    def loglik(a: float, b: float) -> float:
        zs = [(a * math.log(s + th.EPS) + b, ok) for s, ok in pairs]
        return sum(-math.log1p(math.exp(-z)) if ok else -math.log1p(math.exp(z)) for z, ok in zs)

    best = loglik(fit.a, fit.b)
    for da, db in ((1e-2, 0), (-1e-2, 0), (0, 1e-2), (0, -1e-2)):
        assert loglik(fit.a + da, fit.b + db) < best
    assert abs(fit.a - 1.5) < 0.6 and abs(fit.b - 1.7) < 0.8  # near the curve the pairs were drawn from


def test_calibration_moves_little_when_a_few_answers_change():
    """Equal-count bins moved their edges whenever a few answers changed, and about fifty thread
    answers went from offered to nothing across the floor; one curve through every answer moves
    its floor by a little."""
    pairs = _logistic_pairs(266, seed=2)
    base = th.fit_calibration(pairs)
    for seed in range(5):
        import random

        fewer = list(pairs)
        random.Random(seed).shuffle(fewer)
        fit = th.fit_calibration(fewer[8:])  # eight answers fewer, as when the catalogue learns a wording
        assert max(abs(fit(s / 100) - base(s / 100)) for s in range(2, 90)) < 0.03
        assert th.score_for(th.FLOOR, fit) == pytest.approx(th.score_for(th.FLOOR, base), abs=0.015)


def test_a_thread_is_sure_only_where_the_best_scored_answers_were_right_that_often():
    # The curve climbs past SURE at the top, but the best-scored sixth was right 3 times in 4.
    lower = [(s / 100, s >= 30) for s in range(1, 51)] * 2
    fit = th.fit_calibration(lower + [(0.9, True)] * 15 + [(0.9, False)] * 5)  # the top sixth: 20 answers
    assert fit.cap == pytest.approx((15 + 1) / (20 + 2), abs=1e-3) and fit._replace(cap=1.0)(0.9) >= th.SURE
    assert max(fit(s / 100) for s in range(101)) < th.SURE
    # Right every time at the top: the data say sure.
    sure = th.fit_calibration(lower + [(0.9, True)] * 40)
    assert sure(0.9) >= th.SURE


def test_calibration_without_signal_is_the_share_right():
    fit = th.fit_calibration([(0.1, True), (0.9, False), (0.5, True), (0.5, False)])  # right less often higher up
    flat = fit._replace(cap=1.0)
    assert fit.a == 0 and flat(0.1) == flat(0.9) == pytest.approx(0.5)  # the share right, add-one smoothed
    assert th.fit_calibration([]) is None and th.calibrated(0.3, ()) == 0.3


def test_development_and_test_rates(rates, record_property):
    dev, test = rates["dev"], rates["test"]
    record_property("explain_rates", json.dumps({"dev": dev.to_dict(), "test": test.to_dict()}))
    assert dev.cases >= MIN_THREADS - MIN_TEST and test.cases >= MIN_TEST
    assert dev.rate(dev.first_right) >= FLOOR_DEV_FIRST, dev.to_dict()
    assert test.rate(test.first_right) >= FLOOR_TEST_FIRST, test.to_dict()
    assert test.rate(test.top3_right) >= FLOOR_TEST_TOP3, test.to_dict()
    assert test.rate(test.confidently_wrong) <= CEILING_TEST_CONFIDENTLY_WRONG, test.to_dict()


def _healthy_logs():
    sources = tomllib.loads((HEALTHY / "SOURCES.toml").read_text())["file"]
    return sorted((name, spec) for name, spec in sources.items())


def test_every_healthy_log_has_a_source():
    names = {p.name for p in HEALTHY.glob("*.log")}
    sourced = {name for name, _ in _healthy_logs()}
    assert names == sourced and len(names) >= 30
    for _, spec in _healthy_logs():
        assert spec["url"].startswith("https://") and spec["found_by"]


@pytest.mark.parametrize("name", [n for n, _ in _healthy_logs()])
def test_healthy_real_log_gets_no_explanation(name):
    result = explain_text((HEALTHY / name).read_text())
    assert result.matches == [], [(m.id, m.confidence, m.evidence) for m in result.matches]
    assert result.next_steps  # said plainly: nothing matched, and what to do next


def test_a_long_log_is_read_through_its_focus_with_true_line_numbers():
    progress = "".join(f"[rank{i % 8}]: step {i} loss 0.{i % 97:02d} lr 3e-4 tokens/s 123456\n" for i in range(40000))
    failure = "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.19 GiB\n"
    log = progress + failure + progress
    assert len(log) > 2_000_000
    result = explain_text(log)
    assert result.matches[0].id == "cuda-out-of-memory"
    assert result.matches[0].line == 40001  # a line of the whole log, not of the part read
    assert any("long log" in n for n in result.notes)
    from gpurig.diagnose.explain import focus

    part = focus(log)
    assert failure in part and len(part) < 600_000


def test_catalogue_confidence_is_calibrated_on_the_development_threads(tmp_path):
    """An entry that named the wrong cause on the development threads says so in its confidence;
    the shipped record is the one today's catalogue and threads give (rerun `calibrate` after a change)."""
    from gpurig.diagnose import catalogue as explain

    record = th.load_entry_record()
    catalogue = {e.id: e for e in load_catalogue()}
    assert record and set(record) <= set(catalogue)
    fresh = th.write_entry_record(tmp_path / "catalogue.toml", th.load_cases())
    assert fresh == record, "threads/catalogue.toml is stale: run `python -m gpurig.diagnose.threads calibrate`"
    entry = next(e for e in catalogue.values() if e.role == "primary")
    th.load_entry_record.cache_clear()
    try:
        original = th.load_entry_record
        th_record = {entry.id: (12, 3)}
        th.load_entry_record = lambda: th_record  # type: ignore[assignment]
        low = explain.entry_confidence(entry)
        assert low == pytest.approx((3 + explain.PRIOR_ANSWERS * entry.confidence) / (12 + explain.PRIOR_ANSWERS), abs=1e-3)
        assert low < entry.confidence
        th_record[entry.id] = (0, 0)
        assert explain.entry_confidence(entry) == min(entry.confidence, explain.UNPROVEN)  # never answered: never sure
        secondary = next(e for e in catalogue.values() if e.role == "secondary")
        th_record[secondary.id] = (10, 0)
        assert explain.entry_confidence(secondary) == secondary.confidence  # consequences are not calibrated
    finally:
        th.load_entry_record = original  # type: ignore[assignment]


def test_the_shipped_tokens_fit_the_threads_and_the_code():
    """tokens.json spares every `explain` the tokenising of all threads (the index loads in under
    0.3 s); after any change to the threads or to the tokenising code, `calibrate` writes it again."""
    key = th.tokens_key()
    assert th._shipped_tokens(key) is not None, "tokens.json is stale: run `python -m gpurig.diagnose.threads calibrate`"
    assert th.threads_dir().joinpath(th.TOKENS_FILE).read_bytes().isascii()  # (ASCII JSON parses twice as fast)


def test_the_shipped_index_is_read_from_tokens_json_alone_and_answers_as_the_threads_do(monkeypatch):
    """`default_index` builds from tokens.json without parsing a thread or reading the catalogue (what
    keeps it under 0.3 s); its answers are those of the index built from the threads themselves."""
    cases = th.load_cases()
    full = th.ThreadIndex(cases)
    th.default_index.cache_clear()
    try:
        monkeypatch.setattr(th, "load_cases", lambda: pytest.fail("parsed the threads"))
        monkeypatch.setattr(th, "example_cases", lambda: pytest.fail("read the catalogue's examples"))
        light = th.default_index()
    finally:
        monkeypatch.undo()
        th.default_index.cache_clear()
    assert [(c.id, c.cls, c.entry, c.split) for c in light.cases] == [(c.id, c.cls, c.entry, c.split) for c in full.cases]
    shown = lambda hits: [(h.case.id, h.score, h.case.cls, h.case.title, h.case.cause, h.case.fix, h.case.url, h.case.entry)  # noqa: E731
                          for h in hits]
    for case in cases[::97]:
        assert shown(light.search(case.log)) == shown(full.search(case.log)), case.id
    # A tokens.json without the fields (or stale) falls back to the threads themselves
    assert th._light_cases({"tokens": {}}) is None and th._light_cases(None) is None


def test_the_classes_come_from_the_shipped_copy_only_while_it_fits_the_toml(monkeypatch):
    """tokens.json also carries classes.toml as read (parsing the TOML at every index load costs
    0.02 s); its key covers classes.toml, so an edited file is read itself until `calibrate` runs."""
    toml = th.parse_classes(th.threads_dir().joinpath(th.CLASSES_FILE).read_text(encoding="utf-8"))
    assert th._shipped(th.tokens_key())["classes"] == toml
    key = th.tokens_key()
    monkeypatch.setattr(th, "CLASSES_FILE", "calibration.toml")  # (another classes.toml: another key)
    assert th.tokens_key() != key
    monkeypatch.undo()
    th.load_classes.cache_clear()
    try:
        monkeypatch.setattr(th, "_shipped", lambda key: {"key": key, "classes": {"stale-class": {"definition": "x"}}})
        assert th.load_classes() == {"stale-class": {"definition": "x"}}  # (a current copy is what is read)
        th.load_classes.cache_clear()
        monkeypatch.setattr(th, "_shipped", lambda key: None)  # a stale or missing copy: the TOML itself
        assert th.load_classes() == toml
    finally:
        th.load_classes.cache_clear()


def test_a_log_of_known_harmless_notices_needs_a_sure_thread_to_be_called_a_failure():
    """A pasted TensorRT probe warning (a development thread: the user asked what it means) shares
    its wording with threads about missing CUDA libraries; the catalogue knows the line is a
    harmless notice, so a thread that is not sure does not turn it into a failure."""
    cases = [c for c in th.load_cases() if c.split == "dev"]
    target = next(c for c in cases if c.id == "tensorflow-075")
    result = explain_text(target.log, index=th.ThreadIndex(cases), exclude=target.id)
    assert not result.matches
    assert [th.canonical(m.cls or m.id) for m in result.benign][:1] == ["tf-benign-library-warning"]


def test_a_thread_of_the_cause_the_catalogue_named_under_another_id_supports_it_instead_of_repeating_it():
    """`multi-gpu-hang-reported` is folded into `hang-after-nccl-init` (classes.toml, same_as): a
    resolved thread of that class is the catalogue answer's support, not a second answer."""
    result = explain_text("Single machine multi-gpus ddp training stuck after NCCL init\n")
    assert result.matches[0].id == "multi-gpu-hang-reported"
    assert [th.canonical(m.cls or m.id) for m in result.matches].count("hang-after-nccl-init") == 1
    assert any(u.startswith("https://") for u in result.matches[0].see_also)


def test_the_maintainers_commands_run_as_a_module():
    """`python -m gpurig.diagnose.threads stats|show` (the commands docs/explain.md tells a maintainer
    to run) work, and `show` never prints a thread of the test part."""
    import subprocess
    import sys

    stats = subprocess.run([sys.executable, "-m", "gpurig.diagnose.threads", "stats"], capture_output=True, text=True,
                           timeout=120)
    assert stats.returncode == 0 and re.match(r"\d+ threads: dev \d+, test \d+", stats.stdout), stats.stderr
    shown = subprocess.run([sys.executable, "-m", "gpurig.diagnose.threads", "show", "--class", "nccl-shared-memory"],
                           capture_output=True, text=True, timeout=120)
    rows = [json.loads(line) for line in shown.stdout.splitlines()]
    assert shown.returncode == 0 and rows and all(th.split_of(r["url"]) == "dev" for r in rows)


def test_a_refused_bind_is_not_a_port_in_use_and_does_not_borrow_its_threads():
    """errno 13 comes with torch's generic "failed to listen" line, which a port in use prints too:
    the refused bind is answered alone, and a thread of a port held by another job is never shown as
    its "same cause"."""
    log = ("[W socket.cpp:426] [c10d] The server socket has failed to bind to 0.0.0.0:80 (errno: 13 - Permission denied).\n"
           "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address.\n")
    one_line = ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
                "address. The server socket has failed to bind to [::]:520 (errno: 13 - Permission denied).\n")
    in_use = {c.url for c in th.load_cases() if th.canonical(c.cls) == "rendezvous-port-in-use"}
    for text in (log, one_line):
        result = explain_text(text)
        assert result.matches[0].id == "rendezvous-port-privileged"
        assert in_use and not in_use & set(result.matches[0].see_also)
    # the generic line alone, or with errno 98, is still a port in use
    for held in ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address.\n",
                 log.replace("13 - Permission denied", "98 - Address already in use")):
        assert explain_text(held).matches[0].id == "rendezvous-port-in-use"


def test_an_entry_is_not_proven_by_the_threads_it_was_written_from(tmp_path):
    """A thread the entry cites as its source matched it because the entry was written from it: the
    record counts only the other development threads, so such a match cannot make the entry sure."""
    from gpurig.diagnose.catalogue import match_catalogue

    assert th.source_urls("https://github.com/a/b/issues/12; https://x.org/p/, NVIDIA/nccl docs") == {
        "https://github.com/a/b/issues/12", "https://x.org/p"}
    assert "https://github.com/a/b/issues/1" not in th.source_urls("https://github.com/a/b/issues/12")
    entry = next(e for e in load_catalogue() if e.id == "ray-version-mismatch-across-processes")
    written_from = next(iter(th.source_urls(entry.source)))
    log = entry.examples[0]
    assert [m.id for m in match_catalogue(log)][:1] == [entry.id]
    as_thread = dict(id="t-1", title="Ray refuses the worker", framework="other", cls=entry.id, log=log, cause="c",
                     fix="f", established_by="maintainer", found_by="test")
    cited = th.Case(url=written_from, **as_thread)
    other = th.Case(url="https://github.com/someone/else/issues/7", **{**as_thread, "id": "t-2"})
    for case in (cited, other):
        case.tokens = case.compute_tokens()
    assert entry.id not in th.write_entry_record(tmp_path / "a.toml", [cited])
    assert th.write_entry_record(tmp_path / "b.toml", [cited, other])[entry.id] == (1, 1)


def test_the_shipped_catalogue_snapshot_is_the_catalogue():
    """errors.json spares every `explain` parsing the catalogue's TOML; it must hold exactly what
    the TOML files hold, and `calibrate` writes it again after any change to them."""
    import json

    from gpurig.knowledge import loaders

    files = loaders.catalogue_files()
    shipped = json.loads(loaders._text(loaders.CATALOGUE_SNAPSHOT))
    assert shipped["key"] == loaders.catalogue_key(files), "errors.json is stale: run `python -m gpurig.diagnose.threads calibrate`"
    assert shipped["entry"] == loaders.parse_catalogue_files(files)["entry"]
    assert loaders.error_catalogue_data()["entry"] == shipped["entry"]


def test_a_stale_or_broken_catalogue_snapshot_is_not_used():
    """An entry added to the TOML after the snapshot was written is still known, and a snapshot
    that is not JSON (a bad copy) costs only the time of parsing the TOML."""
    import json

    from gpurig.knowledge import loaders

    files = loaders.catalogue_files()
    old = loaders.snapshot_text(files)
    added = '\n[[entry]]\nid = "added-later"\ntitle = "t"\ncause = "c"\nfix = "f"\nrole = "primary"\npatterns = ["x"]\n'
    edited = files[:-1] + [(files[-1][0], files[-1][1] + added)]
    assert loaders.catalogue_from(edited, old)["entry"][-1]["id"] == "added-later"
    assert loaders.catalogue_from(files, old)["entry"] == loaders.parse_catalogue_files(files)["entry"]
    for broken in ("", "{not json", json.dumps({"key": loaders.catalogue_key(files)}), old[: len(old) // 2]):
        assert loaders.catalogue_from(files, broken)["entry"] == loaders.parse_catalogue_files(files)["entry"]
