"""Typed, cached loaders for the knowledge files and the questions other layers ask of them.

The TOML files next to this module hold version matrices and link speeds, each row with its
source; this module turns them into frozen dataclasses and answers questions such as
"which driver does a CUDA 12.8 build need?" or "which torch wheel fits this host?":

    >>> min_driver_for_cuda("12.8")          # minor-version compatibility floor of CUDA 12.x
    '525.60.13'
    >>> max_cuda_for_driver("470.82.01")
    '11.4'
    >>> torch_wheel_for_host("470.82.01", "7.5").index_url
    'https://download.pytorch.org/whl/cu118'

Driver floors, decided from reference/compat.md ("minor-version compatibility"):
- `min_driver_for_cuda` is the lowest driver that runs a binary built with that CUDA, i.e. the
  minor-version compatibility floor of its major (any 12.x runs on >= 525.60.13). PyTorch and
  TensorFlow pip wheels rely on exactly this: they bundle their CUDA runtime and carry machine
  code (SASS) for the GPUs they support.
- `full_driver_for_cuda` is the driver of the toolkit's own release (12.8 -> 570.26). Below it,
  PTX JIT compilation does not work (a GPU that only a wheel's PTX covers cannot run it) and some
  newer features are missing; `driver_support` says which of the two levels a driver reaches.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, published as `tomli`
    import tomli as tomllib  # type: ignore[no-redef]

PYTORCH_INDEX = "https://download.pytorch.org/whl/"


class KnowledgeError(ValueError):
    """A knowledge file that does not have the expected shape (a packaging or editing mistake)."""


class UnknownVersion(ValueError):
    """A version the knowledge files say nothing about (too old, too new, or malformed)."""


# ---------------------------------------------------------------------------------------------
# versions


def version_key(version: str) -> tuple[int, ...]:
    """Numeric sort key of a dotted version: "570.124.06" -> (570, 124, 6), "2.11.0+cu130" -> (2, 11, 0).

    Raises UnknownVersion for text that does not start with a number.
    """
    text = str(version).strip().split("+", 1)[0]
    parts = []
    for piece in text.split("."):
        m = re.match(r"\d+", piece)
        if not m:
            break
        parts.append(int(m.group()))
        if m.end() != len(piece):  # "2.11.0a0", "12.8rc": keep the number, stop at the suffix
            break
    if not parts:
        raise UnknownVersion(f"{version!r} is not a version number")
    return tuple(parts)


def major_minor(version: str) -> tuple[int, int]:
    """(major, minor) of a version; a bare major counts as minor 0: "12" -> (12, 0)."""
    key = version_key(version)
    return key[0], key[1] if len(key) > 1 else 0


def driver_meets(driver: str, floor: str) -> bool:
    """True when driver version `driver` is at least `floor` ("570.26" >= "525.60.13")."""
    return version_key(driver) >= version_key(floor)


def _cc_tuple(cc: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", str(cc))
    if not m:
        raise UnknownVersion(f"compute capability {cc!r} is not of the form MAJOR.MINOR (e.g. 9.0)")
    return int(m.group(1)), int(m.group(2))


# ---------------------------------------------------------------------------------------------
# reading the files


def _read(name: str) -> dict[str, Any]:
    try:
        text = resources.files("gpurig.knowledge").joinpath(name).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise KnowledgeError(f"knowledge file {name} is missing from the package") from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise KnowledgeError(f"knowledge file {name}: {exc}") from exc


@functools.cache
def error_catalogue_data() -> dict[str, Any]:
    """The raw error catalogue: errors.toml, then each errors-<area>.toml in name order, their
    [[entry]] lists joined; `gpurig.diagnose.explain` turns it into typed entries."""
    names = ["errors.toml"] + sorted(
        p.name for p in resources.files("gpurig.knowledge").iterdir() if re.fullmatch(r"errors-[a-z0-9-]+\.toml", p.name))
    entries: list[Any] = []
    for name in names:
        entries.extend(_read(name).get("entry", []))
    return {"entry": entries}


def _rows(name: str, table: str) -> list[dict[str, Any]]:
    rows = _read(name).get(table)
    if not isinstance(rows, list) or not rows:
        raise KnowledgeError(f"knowledge file {name}: no [[{table}]] rows")
    for i, row in enumerate(rows):
        if not str(row.get("source", "")).strip():
            raise KnowledgeError(f"knowledge file {name}: [[{table}]] row {i + 1} has no source")
    return rows


def _get(row: dict[str, Any], key: str, name: str, table: str) -> Any:
    try:
        return row[key]
    except KeyError:
        raise KnowledgeError(f"knowledge file {name}: a [[{table}]] row lacks {key!r}: {row}") from None


# ---------------------------------------------------------------------------------------------
# CUDA and drivers (cuda.toml)


@dataclass(frozen=True)
class CudaUpdate:
    name: str  # "12.8 Update 1"
    min_driver: str


@dataclass(frozen=True)
class CudaRelease:
    """A CUDA toolkit minor release and the driver it shipped with."""

    cuda: str  # "12.8"
    min_driver: str  # the GA release's driver: full support, PTX JIT included
    updates: tuple[CudaUpdate, ...]
    source: str
    unverified: bool = False


@dataclass(frozen=True)
class MinorCompat:
    """Minor-version compatibility: any binary built with CUDA `major`.x runs on `min_driver`."""

    major: int
    min_driver: str
    source: str
    unverified: bool = False


@dataclass(frozen=True)
class DriverBranch:
    branch: str  # "R580"
    kind: str  # "long-term", "production"
    end_of_life: str  # "2028-08"
    source: str


@functools.cache
def cuda_releases() -> tuple[CudaRelease, ...]:
    out = []
    for row in _rows("cuda.toml", "release"):
        updates = tuple(CudaUpdate(u["name"], u["min_driver"]) for u in row.get("updates", []))
        out.append(CudaRelease(
            cuda=_get(row, "cuda", "cuda.toml", "release"),
            min_driver=_get(row, "min_driver", "cuda.toml", "release"),
            updates=updates, source=row["source"], unverified=bool(row.get("unverified", False)),
        ))
    return tuple(out)


@functools.cache
def minor_compat_floors() -> tuple[MinorCompat, ...]:
    return tuple(
        MinorCompat(major=int(_get(r, "major", "cuda.toml", "minor_compat")),
                    min_driver=_get(r, "min_driver", "cuda.toml", "minor_compat"),
                    source=r["source"], unverified=bool(r.get("unverified", False)))
        for r in _rows("cuda.toml", "minor_compat")
    )


@functools.cache
def driver_branches() -> tuple[DriverBranch, ...]:
    return tuple(DriverBranch(r["branch"], r["kind"], r["end_of_life"], r["source"])
                 for r in _rows("cuda.toml", "branch"))


def cuda_release(cuda: str) -> CudaRelease | None:
    """The row of CUDA release `cuda` (matched on major.minor: "12.8.1" -> 12.8), None when unknown."""
    want = major_minor(cuda)
    return next((r for r in cuda_releases() if major_minor(r.cuda) == want), None)


def _minor_compat(major: int) -> MinorCompat | None:
    return next((m for m in minor_compat_floors() if m.major == major), None)


def full_driver_for_cuda(cuda: str) -> str | None:
    """The driver of CUDA `cuda`'s own GA release (full support, PTX JIT included); None when unknown."""
    release = cuda_release(cuda)
    return release.min_driver if release else None


def min_driver_for_cuda(cuda: str) -> str:
    """The lowest driver that runs a binary built with CUDA `cuda` (minor-version compatibility included).

    "12.8" -> "525.60.13" (any 12.x), "11.8" -> "450.80.02", "10.2" -> "440.33" (10.x has no
    minor-version compatibility). The binary must carry machine code for the GPU; see
    `full_driver_for_cuda` for what PTX JIT needs. Raises UnknownVersion for a CUDA major the
    knowledge files do not cover.
    """
    major, _ = major_minor(cuda)
    compat = _minor_compat(major)
    release = cuda_release(cuda)
    if compat is not None:
        # CUDA 11.0's own driver (450.51.05) predates the 11.x compatibility floor (450.80.02):
        # a toolkit always runs on its own driver, so the floor is the lower of the two.
        if release is not None and not driver_meets(release.min_driver, compat.min_driver):
            return release.min_driver
        return compat.min_driver
    if release is None:
        raise UnknownVersion(f"CUDA {cuda} is not in gpurig's table (known: "
                             f"{cuda_releases()[0].cuda} to {cuda_releases()[-1].cuda})")
    return release.min_driver


def driver_support(cuda: str, driver: str) -> str:
    """How well driver `driver` runs a binary built with CUDA `cuda`.

    "full": the driver is at least the toolkit's own (PTX JIT works); "minor-version": it runs
    through minor-version compatibility (machine code only, no PTX JIT of that toolkit's PTX);
    "none": it does not run; "unknown": the CUDA version is not in the tables.
    """
    try:
        floor = min_driver_for_cuda(cuda)
    except UnknownVersion:
        return "unknown"
    if not driver_meets(driver, floor):
        return "none"
    full = full_driver_for_cuda(cuda)
    if full is None or driver_meets(driver, full):
        return "full" if full is not None else "minor-version"
    return "minor-version"


def max_cuda_for_driver(driver: str) -> str | None:
    """The newest CUDA toolkit the driver fully supports (what `nvidia-smi` prints as "CUDA Version").

    "470.82.01" -> "11.4"; None for a driver older than every row. A driver newer than the newest
    row answers the newest known CUDA, which may understate it: prefer the value NVML reports.
    """
    best = None
    for release in cuda_releases():
        if driver_meets(driver, release.min_driver):
            if best is None or version_key(release.cuda) > version_key(best):
                best = release.cuda
    return best


# ---------------------------------------------------------------------------------------------
# architectures (arch.toml)


@dataclass(frozen=True)
class Architecture:
    name: str  # "Hopper"
    compute_capabilities: tuple[str, ...]
    first_cuda: str
    last_cuda_major: int | None  # None: still supported by the newest CUDA
    last_driver_branch: str | None  # "R580", None when still supported
    source: str
    unverified: bool = False


@dataclass(frozen=True)
class Card:
    pattern: str  # matched as whole words in the GPU name
    compute_capability: str
    source: str
    unverified: bool = False


@functools.cache
def architectures() -> tuple[Architecture, ...]:
    out = []
    for r in _rows("arch.toml", "arch"):
        last = int(_get(r, "last_cuda_major", "arch.toml", "arch"))
        out.append(Architecture(
            name=_get(r, "name", "arch.toml", "arch"),
            compute_capabilities=tuple(_get(r, "compute_capabilities", "arch.toml", "arch")),
            first_cuda=_get(r, "first_cuda", "arch.toml", "arch"),
            last_cuda_major=last or None,
            last_driver_branch=r.get("last_driver_branch") or None,
            source=r["source"], unverified=bool(r.get("unverified", False)),
        ))
    return tuple(out)


@functools.cache
def cards() -> tuple[Card, ...]:
    return tuple(
        Card(pattern=_get(r, "pattern", "arch.toml", "card"),
             compute_capability=_get(r, "compute_capability", "arch.toml", "card"),
             source=r["source"], unverified=bool(r.get("unverified", False)))
        for r in _rows("arch.toml", "card")
    )


def arch_for_cc(cc: str) -> Architecture | None:
    """The architecture of compute capability `cc` ("9.0" -> Hopper).

    A capability not listed falls back to the family of the highest listed capability of the same
    major below it ("8.7" -> Ampere, "12.1" -> Blackwell); None when there is none.
    """
    want = _cc_tuple(cc)
    best: tuple[tuple[int, int], Architecture] | None = None
    for arch in architectures():
        for listed in arch.compute_capabilities:
            have = _cc_tuple(listed)
            if have == want:
                return arch
            if have[0] == want[0] and have[1] < want[1] and (best is None or have > best[0]):
                best = (have, arch)
    return best[1] if best else None


def min_driver_for_gpu(compute_capability: str) -> str | None:
    """The lowest driver that supports a GPU at all: the driver of its architecture's first CUDA.

    "12.0" (Blackwell, first in CUDA 12.8) -> "570.26"; None when the architecture is unknown.
    """
    arch = arch_for_cc(compute_capability)
    return full_driver_for_cuda(arch.first_cuda) if arch else None


def cc_for_card(name: str) -> str | None:
    """Compute capability of a card from its marketing name ("NVIDIA H200" -> "9.0"), None when unknown."""
    hits = []
    for card in cards():
        pattern = r"(?<![A-Za-z0-9])" + re.escape(card.pattern).replace(r"\ ", r"\s+") + r"(?![A-Za-z0-9])"
        if re.search(pattern, name, re.I):
            hits.append(card)
    if not hits:
        return None
    return max(hits, key=lambda c: len(c.pattern)).compute_capability


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


# ---------------------------------------------------------------------------------------------
# links (links.toml)


@dataclass(frozen=True)
class NvLinkGeneration:
    generation: int
    architecture: str
    compute_capabilities: tuple[str, ...]
    per_link_gbps: float  # nominal, per direction
    links_per_gpu: int
    source: str
    reported_gbps: float | None = None  # what `nvidia-smi nvlink -s` prints per link
    unverified: bool = False


@dataclass(frozen=True)
class PcieGeneration:
    generation: int
    gt_per_s: float
    encoding: str
    per_lane_gbps: float  # per direction, after encoding
    source: str
    unverified: bool = False


@functools.cache
def nvlink_generations() -> tuple[NvLinkGeneration, ...]:
    return tuple(
        NvLinkGeneration(generation=int(_get(r, "generation", "links.toml", "nvlink")),
                         architecture=_get(r, "architecture", "links.toml", "nvlink"),
                         compute_capabilities=tuple(_get(r, "compute_capabilities", "links.toml", "nvlink")),
                         per_link_gbps=float(_get(r, "per_link_gbps", "links.toml", "nvlink")),
                         links_per_gpu=int(_get(r, "links_per_gpu", "links.toml", "nvlink")),
                         source=r["source"],
                         reported_gbps=float(r["reported_gbps"]) if "reported_gbps" in r else None,
                         unverified=bool(r.get("unverified", False)))
        for r in _rows("links.toml", "nvlink")
    )


@functools.cache
def pcie_generations() -> tuple[PcieGeneration, ...]:
    return tuple(
        PcieGeneration(generation=int(_get(r, "generation", "links.toml", "pcie")),
                       gt_per_s=float(_get(r, "gt_per_s", "links.toml", "pcie")),
                       encoding=_get(r, "encoding", "links.toml", "pcie"),
                       per_lane_gbps=float(_get(r, "per_lane_gbps", "links.toml", "pcie")),
                       source=r["source"], unverified=bool(r.get("unverified", False)))
        for r in _rows("links.toml", "pcie")
    )


def nvlink_generation(compute_capability_or_generation: str | int) -> NvLinkGeneration | None:
    """The NVLink of a GPU ("9.0") or a generation (4, "4", "nvlink4", "NVLink 4"); None when there is none.

    A capability is matched exactly: GPUs without NVLink (Ada 8.9, the RTX 5090's 12.0) give None.
    """
    key = compute_capability_or_generation
    if isinstance(key, int):
        return next((g for g in nvlink_generations() if g.generation == key), None)
    text = str(key).strip().lower().replace(" ", "")
    m = re.fullmatch(r"(?:nvlink)?(\d+)", text)
    if m:
        return nvlink_generation(int(m.group(1)))
    want = _cc_tuple(text)
    for gen in nvlink_generations():
        if any(_cc_tuple(c) == want for c in gen.compute_capabilities):
            return gen
    return None


def nvlink_per_link_gbps(compute_capability_or_generation: str | int) -> float | None:
    """Nominal GB/s of one NVLink in one direction ("9.0" -> 25.0, 5 -> 50.0); None when unknown."""
    gen = nvlink_generation(compute_capability_or_generation)
    return gen.per_link_gbps if gen else None


def pcie_generation(gen: int) -> PcieGeneration | None:
    return next((p for p in pcie_generations() if p.generation == gen), None)


@dataclass(frozen=True)
class MemoryBandwidth:
    pattern: str
    gbps: float
    source: str


@functools.cache
def memory_bandwidths() -> tuple[MemoryBandwidth, ...]:
    return tuple(MemoryBandwidth(pattern=_get(r, "pattern", "links.toml", "memory"),
                                 gbps=float(_get(r, "gbps", "links.toml", "memory")), source=r["source"])
                 for r in _rows("links.toml", "memory"))


def memory_bandwidth_for(gpu_name: str | None) -> MemoryBandwidth | None:
    """The datasheet's peak memory bandwidth of the GPU NVML calls `gpu_name`; None when unknown.

        >>> memory_bandwidth_for("NVIDIA H200").gbps
        4800.0
        >>> memory_bandwidth_for("NVIDIA A100-SXM4-80GB").gbps
        2039.0
    """
    if not gpu_name:
        return None
    return next((m for m in memory_bandwidths() if re.search(m.pattern, gpu_name, re.IGNORECASE)), None)


def pcie_gbps(gen: int, width: int) -> float:
    """Bandwidth of a PCIe link in one direction, after encoding: pcie_gbps(4, 16) -> 31.5.

    Raises UnknownVersion for a generation not in the table and ValueError for a width below 1.
    """
    row = pcie_generation(int(gen))
    if row is None:
        raise UnknownVersion(f"PCIe generation {gen} is not in gpurig's table (1 to {pcie_generations()[-1].generation})")
    if int(width) < 1:
        raise ValueError(f"PCIe width must be at least 1 lane, got {width}")
    return row.per_lane_gbps * int(width)
