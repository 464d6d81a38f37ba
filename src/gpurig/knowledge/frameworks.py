"""Which PyTorch, TensorFlow and cuDNN builds exist, for which CUDA, Python and GPUs
(`torch.toml`, `tensorflow.toml`, `cudnn.toml`), and which one fits a host.

    >>> torch_wheel_for_host("470.82.01", "7.5").index_url
    'https://download.pytorch.org/whl/cu118'
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from gpurig.knowledge.loaders import (
    PYTORCH_INDEX,
    UnknownVersion,
    _cc_tuple,
    _get,
    _rows,
    driver_meets,
    full_driver_for_cuda,
    major_minor,
    min_driver_for_cuda,
    min_driver_for_gpu,
    version_key,
)

# ---------------------------------------------------------------------------------------------
# PyTorch (torch.toml)


@dataclass(frozen=True)
class TorchRelease:
    torch: str  # "2.11"
    python_min: str
    python_max: str
    variants: tuple[str, ...]  # ("cu126", "cu128", "cu130")
    source: str
    unverified: bool = False
    # Variants published but whose architecture list gpurig does not know: never recommended (a
    # wheel is only named when it is known to carry code for the GPU).
    arch_unknown: tuple[str, ...] = ()


@dataclass(frozen=True)
class TorchBuild:
    variant: str
    torch_min: str
    torch_max: str
    arch: tuple[str, ...]  # torch.cuda.get_arch_list() spelling: "sm_90", "compute_120"
    source: str
    unverified: bool = False


@functools.cache
def torch_releases() -> tuple[TorchRelease, ...]:
    return tuple(
        TorchRelease(torch=_get(r, "torch", "torch.toml", "release"),
                     python_min=_get(r, "python_min", "torch.toml", "release"),
                     python_max=_get(r, "python_max", "torch.toml", "release"),
                     variants=tuple(_get(r, "variants", "torch.toml", "release")),
                     source=r["source"], unverified=bool(r.get("unverified", False)),
                     arch_unknown=tuple(r.get("arch_unknown", ())))
        for r in _rows("torch.toml", "release")
    )


@functools.cache
def torch_builds() -> tuple[TorchBuild, ...]:
    return tuple(
        TorchBuild(variant=_get(r, "variant", "torch.toml", "build"),
                   torch_min=_get(r, "torch_min", "torch.toml", "build"),
                   torch_max=_get(r, "torch_max", "torch.toml", "build"),
                   arch=tuple(_get(r, "arch", "torch.toml", "build")),
                   source=r["source"], unverified=bool(r.get("unverified", False)))
        for r in _rows("torch.toml", "build")
    )


def variant_cuda(variant: str) -> str:
    """CUDA version of a wheel variant: "cu128" -> "12.8", "cu102" -> "10.2"."""
    m = re.fullmatch(r"cu(\d+)(\d)", variant.strip().lower())
    if not m:
        raise UnknownVersion(f"{variant!r} is not a CUDA wheel variant like cu128")
    return f"{int(m.group(1))}.{m.group(2)}"


def variant_for_cuda(cuda: str) -> str:
    """Wheel variant name of a CUDA version: "12.8" -> "cu128", "13.0.1" -> "cu130"."""
    major, minor = major_minor(cuda)
    return f"cu{major}{minor}"


def torch_release(torch_version: str) -> TorchRelease | None:
    """The row of torch `torch_version` (matched on major.minor: "2.11.0+cu130" -> 2.11), None when unknown."""
    want = major_minor(torch_version)
    return next((r for r in torch_releases() if major_minor(r.torch) == want), None)


def torch_variants(torch_version: str) -> list[str]:
    """CUDA variants published for a torch release ("2.8" -> ["cu126", "cu128", "cu129"]); [] when unknown."""
    release = torch_release(torch_version)
    return list(release.variants) if release else []


def torch_arch_list(torch_version: str, variant: str) -> list[str]:
    """Architectures compiled into a torch wheel, as `torch.cuda.get_arch_list()` spells them; [] when unknown."""
    want = major_minor(torch_version)
    for build in torch_builds():
        if (build.variant == variant.strip().lower()
                and major_minor(build.torch_min) <= want <= major_minor(build.torch_max)):
            return list(build.arch)
    return []


def arch_coverage(arch_list: list[str] | tuple[str, ...], compute_capability: str) -> str | None:
    """How a compiled arch list covers a GPU: "sass" (machine code), "ptx" (JIT from PTX) or None.

    Machine code `sm_XY` runs on GPUs of the same major X and minor >= Y (sm_80 runs on 8.6);
    architecture-specific code (`sm_90a`) runs only on exactly that capability. PTX `compute_XY`
    can be JIT-compiled for any capability >= X.Y, given the full driver of the CUDA that built it.
    """
    major, minor = _cc_tuple(compute_capability)
    ptx = False
    for entry in arch_list:
        m = re.fullmatch(r"(sm|compute)_(\d+)(\d)([a-z]?)", entry.strip())
        if not m:
            continue
        kind, a_major, a_minor, suffix = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
        if kind == "sm":
            if suffix:
                if (a_major, a_minor) == (major, minor):
                    return "sass"
            elif a_major == major and a_minor <= minor:
                return "sass"
        elif not suffix and (a_major, a_minor) <= (major, minor):
            ptx = True
    return "ptx" if ptx else None


def _python_fits(python: str, lo: str, hi: str) -> bool:
    return major_minor(lo) <= major_minor(python) <= major_minor(hi)


@dataclass(frozen=True)
class WheelChoice:
    """A PyTorch wheel that fits a host, and why."""

    torch_version: str  # "2.11"
    variant: str  # "cu130"
    cuda: str  # "13.0"
    index_url: str  # "https://download.pytorch.org/whl/cu130"
    python_min: str
    python_max: str
    coverage: str | None  # "sass", "ptx" or None when the GPU is unknown
    reason: str
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def pip_command(self) -> str:
        return f"pip install 'torch=={self.torch_version}.*' --index-url {self.index_url}"


def torch_wheel_for_host(
    driver: str | None,
    compute_capability: str | None,
    python: str | None = None,
    torch_version: str | None = None,
) -> WheelChoice | None:
    """The newest torch release, and its highest CUDA variant, that runs on this host.

    A variant fits when the driver meets its CUDA's minor-version floor and its arch list covers
    the GPU with machine code, or with PTX when the driver is also the full driver of that CUDA
    (PTX JIT). `python` and `torch_version` ("2.8") narrow the search; None means "any". Unknown
    driver or GPU (None) are not judged, and the notes say so. None when nothing fits, including
    when the driver is older than the GPU's architecture (a Blackwell GPU needs 570 or later).

        >>> torch_wheel_for_host("580.95.05", "9.0").variant
        'cu130'
    """
    notes = []
    if driver is None:
        notes.append("the driver version is unknown, so the driver floor was not checked")
    if compute_capability is None:
        notes.append("the GPU's compute capability is unknown, so the arch list was not checked")
    if driver is not None and compute_capability is not None:
        gpu_floor = min_driver_for_gpu(compute_capability)
        if gpu_floor is not None and not driver_meets(driver, gpu_floor):
            return None  # the driver does not know this GPU: no wheel helps, the driver must change
    for release in sorted(torch_releases(), key=lambda r: version_key(r.torch), reverse=True):
        if torch_version is not None and major_minor(release.torch) != major_minor(torch_version):
            continue
        if python is not None and not _python_fits(python, release.python_min, release.python_max):
            continue
        for variant in sorted(release.variants, key=lambda v: version_key(variant_cuda(v)), reverse=True):
            if variant in release.arch_unknown:
                continue  # never named while its architecture list is not known
            cuda = variant_cuda(variant)
            try:
                floor = min_driver_for_cuda(cuda)
            except UnknownVersion:
                continue
            why = [f"torch {release.torch} {variant} with CUDA {cuda}"]
            if driver is not None:
                if not driver_meets(driver, floor):
                    continue
                why.append(f"driver {driver} meets its floor {floor}")
            coverage = None
            if compute_capability is not None:
                arch = torch_arch_list(release.torch, variant)
                coverage = arch_coverage(arch, compute_capability)
                if coverage is None:
                    continue
                if coverage == "ptx":
                    full = full_driver_for_cuda(cuda)
                    if driver is not None and (full is None or not driver_meets(driver, full)):
                        continue  # PTX JIT needs the full driver of the CUDA that made the PTX
                    why.append(f"compute capability {compute_capability} runs its PTX through JIT "
                               "compilation (slow first start)")
                else:
                    why.append(f"compute capability {compute_capability} runs its machine code")
            return WheelChoice(
                torch_version=release.torch, variant=variant, cuda=cuda,
                index_url=PYTORCH_INDEX + variant, python_min=release.python_min,
                python_max=release.python_max, coverage=coverage,
                reason="; ".join(why), notes=tuple(notes),
            )
    return None


# ---------------------------------------------------------------------------------------------
# TensorFlow (tensorflow.toml)


@dataclass(frozen=True)
class TfBuild:
    """A TensorFlow release's tested Linux GPU build."""

    tf_version: str  # "2.16"
    python_min: str
    python_max: str
    cuda: str
    cudnn: str
    and_cuda_extra: bool  # `pip install tensorflow[and-cuda]` brings CUDA and cuDNN
    source: str
    unverified: bool = False

    @property
    def min_driver(self) -> str:
        return min_driver_for_cuda(self.cuda)

    @property
    def pip_command(self) -> str:
        extra = "[and-cuda]" if self.and_cuda_extra else ""
        return f"pip install 'tensorflow{extra}=={self.tf_version}.*'"


@functools.cache
def tf_builds() -> tuple[TfBuild, ...]:
    return tuple(
        TfBuild(tf_version=_get(r, "tf", "tensorflow.toml", "release"),
                python_min=_get(r, "python_min", "tensorflow.toml", "release"),
                python_max=_get(r, "python_max", "tensorflow.toml", "release"),
                cuda=_get(r, "cuda", "tensorflow.toml", "release"),
                cudnn=_get(r, "cudnn", "tensorflow.toml", "release"),
                and_cuda_extra=bool(r.get("and_cuda_extra", False)),
                source=r["source"], unverified=bool(r.get("unverified", False)))
        for r in _rows("tensorflow.toml", "release")
    )


def tf_build(tf_version: str) -> TfBuild | None:
    """The tested build of TF `tf_version` (matched on major.minor: "2.16.1" -> 2.16), None when unknown."""
    want = major_minor(tf_version)
    return next((b for b in tf_builds() if major_minor(b.tf_version) == want), None)


def tf_for_host(
    driver: str | None,
    compute_capability: str | None = None,
    python: str | None = None,
) -> TfBuild | None:
    """The newest TensorFlow whose CUDA the driver runs, whose cuDNN supports the GPU and which supports `python`.

    Only releases installable with `tensorflow[and-cuda]` (2.14 and later) are considered, as the
    others need a CUDA toolkit installed by hand. None when nothing fits.
    """
    if driver is not None and compute_capability is not None:
        gpu_floor = min_driver_for_gpu(compute_capability)
        if gpu_floor is not None and not driver_meets(driver, gpu_floor):
            return None
    for build in sorted(tf_builds(), key=lambda b: version_key(b.tf_version), reverse=True):
        if not build.and_cuda_extra:
            continue
        if python is not None and not _python_fits(python, build.python_min, build.python_max):
            continue
        if driver is not None and not driver_meets(driver, build.min_driver):
            continue
        if compute_capability is not None:
            min_cc = cudnn_min_cc(build.cudnn)
            if min_cc is not None and _cc_tuple(compute_capability) < _cc_tuple(min_cc):
                continue
        return build
    return None


# ---------------------------------------------------------------------------------------------
# cuDNN (cudnn.toml)


@dataclass(frozen=True)
class CudnnRelease:
    cudnn_min: str
    cudnn_max: str
    cuda: tuple[str, ...]  # "11.8" a minor release, "12" every 12.x
    min_compute_capability: str
    source: str
    unverified: bool = False


@functools.cache
def cudnn_releases() -> tuple[CudnnRelease, ...]:
    return tuple(
        CudnnRelease(cudnn_min=_get(r, "cudnn_min", "cudnn.toml", "release"),
                     cudnn_max=_get(r, "cudnn_max", "cudnn.toml", "release"),
                     cuda=tuple(_get(r, "cuda", "cudnn.toml", "release")),
                     min_compute_capability=_get(r, "min_compute_capability", "cudnn.toml", "release"),
                     source=r["source"], unverified=bool(r.get("unverified", False)))
        for r in _rows("cudnn.toml", "release")
    )


def cudnn_release(cudnn: str) -> CudnnRelease | None:
    """The row covering cuDNN `cudnn` ("9.3.0" -> the 9.0-9.10 row), None when unknown."""
    want = major_minor(cudnn)
    return next((r for r in cudnn_releases()
                 if major_minor(r.cudnn_min) <= want <= major_minor(r.cudnn_max)), None)


def cudnn_supports_cuda(cudnn: str, cuda: str) -> bool | None:
    """Whether cuDNN `cudnn` supports CUDA `cuda`; None when the cuDNN version is unknown."""
    release = cudnn_release(cudnn)
    if release is None:
        return None
    major, minor = major_minor(cuda)
    for entry in release.cuda:
        if "." in entry:
            if major_minor(entry) == (major, minor):
                return True
        elif int(entry) == major:
            return True
    return False


def cudnn_min_cc(cudnn: str) -> str | None:
    """Lowest compute capability cuDNN `cudnn` supports; None when unknown."""
    release = cudnn_release(cudnn)
    return release.min_compute_capability if release else None


