"""Official base images whose CUDA runs on the host's driver.

A container's CUDA runtime talks to the host's driver, so the image's CUDA must not be newer than
the newest CUDA the driver runs (what `nvidia-smi` prints as "CUDA Version"); minor-version
compatibility is not relied on for images, since a container may JIT-compile PTX or carry tools
that need the full driver. The versions and architecture lists come from `gpurig.knowledge`;
this module only knows how the official images are named.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpurig.knowledge import frameworks as kfw
from gpurig.knowledge import loaders as L
from gpurig.recipes.base import HostSummary
from gpurig.recipes.versions import check_tf_version, check_torch_version

# pytorch/pytorch tags read "<torch X.Y.Z>-cuda<X.Y>-cudnn<N>-runtime" (hub.docker.com/r/pytorch/pytorch,
# e.g. 2.3.0-cuda11.8-cudnn8-runtime, 2.9.0-cuda13.0-cudnn9-runtime): cuDNN 9 from torch 2.4 on,
# cuDNN 8 from 2.0 to 2.3. Older releases are not offered.
PYTORCH_REPO = "pytorch/pytorch"
PYTORCH_FIRST_RELEASE = "2.0"
PYTORCH_FIRST_CUDNN9 = "2.4"
# tensorflow/tensorflow tags read "<X.Y.Z>-gpu" (CUDA and cuDNN inside) and "<X.Y.Z>" (CPU only).
TENSORFLOW_REPO = "tensorflow/tensorflow"
# On a host without a GPU, PyTorch's CPU wheel goes on the official Python image.
PYTHON_REPO = "python"


@dataclass
class BaseImage:
    """The `FROM` line's image and why it fits."""

    image: str
    framework: str  # "torch" or "tf"
    framework_version: str  # "2.11"
    cuda: str | None  # None for a CPU image
    reasons: list[str]
    pip_package: str  # the distribution name to keep pinned inside the image ("torch", "tensorflow")
    install: str | None = None  # a pip line to run on top of the image (CPU torch on python:*)
    fits: bool = True
    advice: list[str] = field(default_factory=list)


def host_max_cuda(host: HostSummary) -> str | None:
    """The newest CUDA the host's driver runs: as the driver reports it, else from the tables."""
    if host.driver_cuda:
        return host.driver_cuda
    if host.driver_version:
        return L.max_cuda_for_driver(host.driver_version)
    return None


def _driver_too_old_for_gpus(host: HostSummary) -> list[str]:
    """Advice when the driver predates a GPU's architecture: no image or wheel helps then."""
    advice = []
    for cc in host.compute_capabilities:
        floor = L.min_driver_for_gpu(cc)
        if host.driver_version and floor and not L.driver_meets(host.driver_version, floor):
            advice.append(f"driver {host.driver_version} is older than the first driver that knows compute "
                          f"capability {cc} ({floor}): upgrade the driver to {floor} or later")
    return advice


def _newer(a: str, b: str) -> bool:
    return L.version_key(a) > L.version_key(b)


def torch_image(host: HostSummary, torch_version: str | None = None, python: str | None = None) -> BaseImage:
    """The newest official PyTorch image whose CUDA the driver runs and whose wheel covers every GPU."""
    releases = sorted(kfw.torch_releases(), key=lambda r: L.version_key(r.torch), reverse=True)
    torch_version = check_torch_version(torch_version, first=PYTORCH_FIRST_RELEASE, what="PyTorch image")
    if torch_version is not None:
        releases = [r for r in releases if L.major_minor(r.torch) == L.major_minor(torch_version)]
    if not host.has_gpu:
        rel = releases[0]
        py = python or host.python
        if py and not (L.major_minor(rel.python_min) <= L.major_minor(py) <= L.major_minor(rel.python_max)):
            py = rel.python_max
        py_mm = "{}.{}".format(*L.major_minor(py or rel.python_max))
        return BaseImage(
            image=f"{PYTHON_REPO}:{py_mm}-slim",
            framework="torch", framework_version=rel.torch, cuda=None, pip_package="torch",
            install=f"python3 -m pip install 'torch=={rel.torch}.*' --index-url {L.PYTORCH_INDEX}cpu",
            reasons=[f"no NVIDIA GPU on the host: the official Python {py_mm} image with torch {rel.torch}'s CPU "
                     "wheel (PyTorch publishes GPU images only)"],
        )
    max_cuda = host_max_cuda(host)
    caps = host.compute_capabilities
    too_old = _driver_too_old_for_gpus(host)
    if too_old:
        return BaseImage(image="", framework="torch", framework_version="", cuda=None, pip_package="torch",
                         reasons=["the driver does not support the GPU"], fits=False, advice=too_old)
    for rel in releases:
        if L.version_key(rel.torch) < L.version_key(PYTORCH_FIRST_RELEASE):
            continue
        cudnn = 9 if L.version_key(rel.torch) >= L.version_key(PYTORCH_FIRST_CUDNN9) else 8
        for variant in sorted(rel.variants, key=lambda v: L.version_key(kfw.variant_cuda(v)), reverse=True):
            cuda = kfw.variant_cuda(variant)
            if max_cuda and _newer(cuda, max_cuda):
                continue
            arch = kfw.torch_arch_list(rel.torch, variant)
            if caps and not arch:
                continue  # its architecture list is not known: not offered for these GPUs
            coverage = {cc: kfw.arch_coverage(arch, cc) for cc in caps} if arch else {}
            if any(c is None for c in coverage.values()):
                continue
            reasons = [f"torch {rel.torch} with CUDA {cuda} and cuDNN {cudnn}, runtime flavour (no compiler: "
                       "a smaller image; use -devel to build CUDA extensions)"]
            if max_cuda:
                reasons.append(f"CUDA {cuda} <= {max_cuda}, the newest CUDA driver {host.driver_version} runs")
            else:
                reasons.append("the driver is unknown, so the image's CUDA was not checked against it "
                               "(run `gpurig doctor`)")
            if coverage:
                kinds = ", ".join(f"{cc} ({'machine code' if c == 'sass' else 'PTX, JIT-compiled'})"
                                  for cc, c in coverage.items())
                reasons.append(f"its {variant} build is compiled for the GPUs: compute capability {kinds}")
            return BaseImage(
                image=f"{PYTORCH_REPO}:{rel.torch}.0-cuda{cuda}-cudnn{cudnn}-runtime",
                framework="torch", framework_version=rel.torch, cuda=cuda, pip_package="torch",
                reasons=reasons,
            )
    # What driver would do: the lowest upgrade that gives any image, and the one for the newest release.
    options = []  # (driver needed, release, cuda)
    for rel in releases:
        if L.version_key(rel.torch) < L.version_key(PYTORCH_FIRST_RELEASE):
            continue
        for variant in rel.variants:
            arch = kfw.torch_arch_list(rel.torch, variant)
            need = L.full_driver_for_cuda(kfw.variant_cuda(variant))
            if arch and need and all(kfw.arch_coverage(arch, cc) for cc in caps):
                options.append((need, rel.torch, kfw.variant_cuda(variant)))
    advice = []
    if options:
        lowest = min(options, key=lambda o: (L.version_key(o[0]), [-x for x in L.version_key(o[1])]))
        newest = min((o for o in options if o[1] == options[0][1]), key=lambda o: L.version_key(o[0]))
        for need, rel_name, cuda in dict.fromkeys([lowest, newest]):
            advice.append(f"upgrade the driver to {need} or later: the torch {rel_name} image with CUDA {cuda} then fits")
        advice.append("or install PyTorch on the host with the line from `gpurig env pip` (a pip wheel may run on "
                      "this driver through minor-version compatibility)")
    if not advice:
        advice.append("no official PyTorch image in gpurig's tables is compiled for compute capability "
                      f"{', '.join(caps)}; see `gpurig env pip` for what to change")
    return BaseImage(image="", framework="torch", framework_version="", cuda=None, pip_package="torch",
                     reasons=[f"no official PyTorch image has a CUDA the driver runs (<= {max_cuda}) and code "
                              f"for compute capability {', '.join(caps)}"],
                     fits=False, advice=advice)


def tf_image(host: HostSummary, tf_version: str | None = None) -> BaseImage:
    """The newest official TensorFlow GPU image whose CUDA the driver runs and whose cuDNN supports the GPUs."""
    builds = sorted(kfw.tf_builds(), key=lambda b: L.version_key(b.tf_version), reverse=True)
    tf_version = check_tf_version(tf_version)
    if tf_version is not None:
        builds = [b for b in builds if L.major_minor(b.tf_version) == L.major_minor(tf_version)]
    if not host.has_gpu:
        b = builds[0]
        return BaseImage(image=f"{TENSORFLOW_REPO}:{b.tf_version}.0", framework="tf", framework_version=b.tf_version,
                         cuda=None, pip_package="tensorflow",
                         reasons=[f"no NVIDIA GPU on the host: the CPU image of TensorFlow {b.tf_version}"])
    max_cuda = host_max_cuda(host)
    too_old = _driver_too_old_for_gpus(host)
    if too_old:
        return BaseImage(image="", framework="tf", framework_version="", cuda=None, pip_package="tensorflow",
                         reasons=["the driver does not support the GPU"], fits=False, advice=too_old)
    for b in builds:
        if max_cuda and _newer(b.cuda, max_cuda):
            continue
        min_cc = kfw.cudnn_min_cc(b.cudnn)
        if min_cc and any(L.version_key(cc) < L.version_key(min_cc) for cc in host.compute_capabilities):
            continue
        reasons = [f"TensorFlow {b.tf_version}'s GPU image: CUDA {b.cuda} and cuDNN {b.cudnn} inside, "
                   "the pair it was tested with"]
        if max_cuda:
            reasons.append(f"CUDA {b.cuda} <= {max_cuda}, the newest CUDA driver {host.driver_version} runs")
        else:
            reasons.append("the driver is unknown, so the image's CUDA was not checked against it (run `gpurig doctor`)")
        return BaseImage(image=f"{TENSORFLOW_REPO}:{b.tf_version}.0-gpu", framework="tf",
                         framework_version=b.tf_version, cuda=b.cuda, pip_package="tensorflow", reasons=reasons)
    advice = []
    if builds:
        need = L.full_driver_for_cuda(builds[0].cuda)
        if need:
            advice.append(f"upgrade the driver to {need} or later: the TensorFlow {builds[0].tf_version} image "
                          f"(CUDA {builds[0].cuda}) then fits")
    return BaseImage(image="", framework="tf", framework_version="", cuda=None, pip_package="tensorflow",
                     reasons=[f"no official TensorFlow GPU image has a CUDA the driver runs (<= {max_cuda})"],
                     fits=False, advice=advice or ["see `gpurig env pip --framework tf` for what to change"])
