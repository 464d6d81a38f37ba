"""Typed, cached loaders for the knowledge files and the questions other layers ask of them.

The TOML files next to this module hold version matrices and link speeds, each row with its
source; this module turns them into frozen dataclasses and answers questions such as
"which driver does a CUDA 12.8 build need?" (the framework builds are in `frameworks.py`, the
link and memory speeds in `link_speeds.py`):

    >>> min_driver_for_cuda("12.8")          # minor-version compatibility floor of CUDA 12.x
    '525.60.13'
    >>> max_cuda_for_driver("470.82.01")
    '11.4'

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
import hashlib
import json
import re
from dataclasses import dataclass
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


def _text(name: str) -> str:
    try:
        return resources.files("gpurig.knowledge").joinpath(name).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise KnowledgeError(f"knowledge file {name} is missing from the package") from exc


def _parse(name: str, text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise KnowledgeError(f"knowledge file {name}: {exc}") from exc


def _read(name: str) -> dict[str, Any]:
    return _parse(name, _text(name))


# The error catalogue as JSON, with the digest of the TOML files it was made from: reading it takes
# a few milliseconds where parsing the TOML takes about 50 (every `gpurig explain` reads the
# catalogue). `python -m gpurig.diagnose.threads calibrate` writes it; when the TOML files have
# changed since, the digest differs and the TOML is read as before.
CATALOGUE_SNAPSHOT = "errors.json"


def catalogue_files() -> list[tuple[str, str]]:
    """(name, text) of errors.toml, then each errors-<area>.toml in name order."""
    names = ["errors.toml"] + sorted(
        p.name for p in resources.files("gpurig.knowledge").iterdir() if re.fullmatch(r"errors-[a-z0-9-]+\.toml", p.name))
    return [(name, _text(name)) for name in names]


def catalogue_key(files: list[tuple[str, str]]) -> str:
    digest = hashlib.sha256()
    for name, text in files:
        digest.update(name.encode() + b"\0" + text.encode() + b"\0")
    return digest.hexdigest()


def parse_catalogue_files(files: list[tuple[str, str]]) -> dict[str, Any]:
    """The files' [[entry]] lists joined, in order."""
    return {"entry": [e for name, text in files for e in _parse(name, text).get("entry", [])]}


def catalogue_from(files: list[tuple[str, str]], snapshot: str | None) -> dict[str, Any]:
    """The catalogue from `snapshot` (the text of errors.json) when it was made from exactly these
    files, else parsed from them."""
    try:
        data = json.loads(snapshot) if snapshot else None
    except ValueError:
        data = None
    if isinstance(data, dict) and data.get("key") == catalogue_key(files) and isinstance(data.get("entry"), list):
        return {"entry": data["entry"]}
    return parse_catalogue_files(files)


def snapshot_text(files: list[tuple[str, str]]) -> str:
    """What errors.json holds for these files (always parsed from the TOML itself)."""
    return json.dumps({"key": catalogue_key(files), **parse_catalogue_files(files)}, ensure_ascii=False,
                      separators=(",", ":")) + "\n"


@functools.cache
def error_catalogue_data() -> dict[str, Any]:
    """The raw error catalogue: errors.toml, then each errors-<area>.toml in name order, their
    [[entry]] lists joined; `gpurig.diagnose.explain` turns it into typed entries."""
    try:
        snapshot = _text(CATALOGUE_SNAPSHOT)
    except KnowledgeError:
        snapshot = None
    return catalogue_from(catalogue_files(), snapshot)


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


