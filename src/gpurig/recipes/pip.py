"""The pip line whose CUDA build fits this host's driver and GPUs, or what to change when none does.

Every version fact comes from `gpurig.knowledge.loaders` (the data files with their sources);
this module only asks the questions and words the answers. A PyTorch or `tensorflow[and-cuda]`
wheel brings its own CUDA runtime, so the host's driver and GPU architecture decide the fit.
"""

from __future__ import annotations

from gpurig.errors import BadInput
from gpurig.knowledge import frameworks as kfw
from gpurig.knowledge import loaders as L
from gpurig.recipes.base import HostSummary, Recipe
from gpurig.recipes.versions import check_torch_version

FRAMEWORKS = ("torch", "tf")


def _python_fits(python: str, lo: str, hi: str) -> bool:
    return L.major_minor(lo) <= L.major_minor(python) <= L.major_minor(hi)


def check_python(python: str | None, flag: str = "--python") -> str | None:
    if python is None:
        return None
    try:
        L.major_minor(python)
    except (L.UnknownVersion, ValueError):
        raise BadInput(f"{flag} must be a Python version like 3.11, got {python!r}") from None
    return python


def _torch_choice(host: HostSummary, python: str | None, torch_version: str | None):
    """The wheel that fits every GPU of the host, or None; plus a note when the GPUs disagree."""
    caps = host.compute_capabilities or [None]
    choices = [kfw.torch_wheel_for_host(host.driver_version, cc, python, torch_version) for cc in caps]
    if any(c is None for c in choices):
        return None, None
    # The oldest of the per-GPU answers is the one most likely to cover every GPU; check it does.
    pick = min(choices, key=lambda c: (L.version_key(c.torch_version), L.version_key(c.cuda)))
    arch = kfw.torch_arch_list(pick.torch_version, pick.variant)
    uncovered = [cc for cc in caps if cc and arch and kfw.arch_coverage(arch, cc) is None]
    if uncovered:
        return None, (f"the GPUs differ (compute capability {', '.join(host.compute_capabilities)}) and no single "
                      f"wheel covers them all; torch {pick.torch_version} {pick.variant} lacks {', '.join(uncovered)}: "
                      "run on one kind of GPU (CUDA_VISIBLE_DEVICES) or build PyTorch from source")
    return pick, None


def _torch_advice(host: HostSummary, python: str | None, torch_version: str | None) -> list[str]:
    """What to change when no torch wheel fits: the driver, the Python, or the torch release."""
    driver = host.driver_version
    advice: list[str] = []
    for cc in host.compute_capabilities:
        floor = L.min_driver_for_gpu(cc)
        if driver and floor and not L.driver_meets(driver, floor):
            advice.append(f"driver {driver} is older than the first driver that knows compute capability {cc} "
                          f"({floor}): upgrade the driver to {floor} or later")
        any_wheel = kfw.torch_wheel_for_host(None, cc, None, None)
        if any_wheel is None:
            advice.append(f"no PyTorch wheel in gpurig's tables is compiled for compute capability {cc}: build "
                          f"PyTorch from source with TORCH_CUDA_ARCH_LIST={cc}, or use a newer GPU")
            continue
        if torch_version:
            other = kfw.torch_wheel_for_host(driver, cc, python, None)
            if other:
                advice.append(f"torch {torch_version} has no build for this host; the newest that fits is "
                              f"torch {other.torch_version} {other.variant}: {other.pip_command}")
        if python:
            other = kfw.torch_wheel_for_host(driver, cc, None, torch_version)
            if other and not _python_fits(python, other.python_min, other.python_max):
                advice.append(f"torch {other.torch_version} {other.variant} fits the driver and GPU but needs Python "
                              f"{other.python_min} to {other.python_max} (this host has {python}): make a virtual "
                              f"environment with one of those")
        newest = kfw.torch_wheel_for_host(None, cc, python, torch_version)
        if newest and driver:
            # The lowest driver that runs the newest release on this GPU: try each driver floor the
            # release's variants have, lowest first, and let the loader judge.
            floors = set()
            for variant in kfw.torch_variants(newest.torch_version):
                cuda = kfw.variant_cuda(variant)
                floors.update(d for d in (L.min_driver_for_cuda(cuda), L.full_driver_for_cuda(cuda)) if d)
            floors = {f for f in floors if not (floor and not L.driver_meets(f, floor))}
            for need in sorted(floors, key=L.version_key):
                wheel = kfw.torch_wheel_for_host(need, cc, python, newest.torch_version)
                if wheel is None:
                    continue
                if not L.driver_meets(driver, need) and not (floor and L.driver_meets(floor, need)):
                    advice.append(f"upgrade the driver to {need} or later to run torch {wheel.torch_version} "
                                  f"{wheel.variant} (CUDA {wheel.cuda})")
                break
    return list(dict.fromkeys(advice))  # once each, in order


def _tf_choice(host: HostSummary, python: str | None):
    caps = host.compute_capabilities or [None]
    builds = [kfw.tf_for_host(host.driver_version, cc, python) for cc in caps]
    if any(b is None for b in builds):
        return None
    return min(builds, key=lambda b: L.version_key(b.tf_version))


def _tf_advice(host: HostSummary, python: str | None) -> list[str]:
    driver = host.driver_version
    advice: list[str] = []
    for cc in host.compute_capabilities or [None]:
        floor = L.min_driver_for_gpu(cc) if cc else None
        if driver and floor and not L.driver_meets(driver, floor):
            advice.append(f"driver {driver} is older than the first driver that knows compute capability {cc} "
                          f"({floor}): upgrade the driver to {floor} or later")
        newest = kfw.tf_for_host(None, cc, python)
        if newest is None:
            if python and kfw.tf_for_host(None, cc, None):
                other = kfw.tf_for_host(None, cc, None)
                advice.append(f"TensorFlow {other.tf_version} needs Python {other.python_min} to {other.python_max} "
                              f"(this host has {python}): make a virtual environment with one of those")
            else:
                advice.append(f"no TensorFlow release in gpurig's tables supports compute capability {cc} "
                              "through tensorflow[and-cuda]")
            continue
        if (driver and not L.driver_meets(driver, newest.min_driver)
                and not (floor and L.driver_meets(floor, newest.min_driver))):
            advice.append(f"upgrade the driver to {newest.min_driver} or later to run TensorFlow {newest.tf_version} "
                          f"(built with CUDA {newest.cuda})")
    return list(dict.fromkeys(advice))


def pip_recipe(host: HostSummary, framework: str = "torch", python: str | None = None,
               torch_version: str | None = None) -> Recipe:
    """The exact install command for `framework` on this host, with the reason; or what to change."""
    if framework not in FRAMEWORKS:
        raise BadInput(f"--framework must be one of {', '.join(FRAMEWORKS)}, got {framework!r}")
    python = check_python(python) or host.python
    if torch_version is not None:
        if framework != "torch":
            raise BadInput("--torch-version goes with --framework torch")
        torch_version = check_torch_version(torch_version)
    facts_used = host.to_dict() | {"python_used": python}
    py_note = f" for Python {L.major_minor(python)[0]}.{L.major_minor(python)[1]}" if python else ""
    name = "torch" if framework == "torch" else "TensorFlow"

    missing = host.driver_missing_advice()
    if missing:
        text = f"# {host.describe()}\n# No {name} GPU build can be chosen yet. What to change:\n#  - {missing}\n"
        return Recipe(kind="pip", text=text, reasons=[missing], facts_used=facts_used, fits=False)
    if not host.has_gpu:
        # No NVIDIA GPU: the CPU wheels are smaller and do not pull CUDA libraries the host cannot use.
        if framework == "torch":
            releases = [r for r in kfw.torch_releases()
                        if (torch_version is None or L.major_minor(r.torch) == L.major_minor(torch_version))
                        and (python is None or _python_fits(python, r.python_min, r.python_max))]
            if not releases:
                raise BadInput(f"no torch release in gpurig's tables supports Python {python}")
            rel = max(releases, key=lambda r: L.version_key(r.torch))
            line = f"pip install 'torch=={rel.torch}.*' --index-url {L.PYTORCH_INDEX}cpu"
            why = (f"torch {rel.torch}, CPU build{py_note}: this host has no NVIDIA GPU, so the CPU wheel "
                   "(no CUDA libraries to download) is the one to install")
        else:
            build = kfw.tf_for_host(None, None, python)
            if build is None:
                raise BadInput(f"no TensorFlow release in gpurig's tables supports Python {python}")
            line = f"pip install 'tensorflow=={build.tf_version}.*'"
            why = (f"TensorFlow {build.tf_version}{py_note} without the [and-cuda] extra: this host has no NVIDIA "
                   "GPU, so the CUDA libraries would be dead weight")
        text = f"# {why}.\n{line}\n"
        return Recipe(kind="pip", text=text, reasons=[why], facts_used=facts_used)

    reasons: list[str] = []
    if host.driver_version is None:
        reasons.append("the driver version is unknown (not loaded, or the facts do not say): the driver floor "
                       "was not checked; run `gpurig doctor` and fix the driver first")
    if framework == "torch":
        pick, conflict = _torch_choice(host, python, torch_version)
        if pick is not None:
            why = pick.reason + (f"; it has wheels for Python {pick.python_min} to {pick.python_max} "
                                 f"(this host: {python})" if python else "")
            reasons += [why, f"the {pick.variant} wheel bundles its own CUDA {pick.cuda} runtime and cuDNN: "
                             "only the host driver matters", *pick.notes]
            text = (f"# {host.describe()}\n# {why}.\n"
                    "# Add torchvision to the same line to get the build that matches this torch.\n"
                    f"{pick.pip_command}\n")
            return Recipe(kind="pip", text=text, reasons=reasons, facts_used=facts_used | {"variant": pick.variant})
        advice = [conflict] if conflict else _torch_advice(host, python, torch_version)
    else:
        build = _tf_choice(host, python)
        if build is not None:
            driver_part = (f"; driver {host.driver_version} meets its floor {build.min_driver}"
                           if host.driver_version else "")
            why = (f"TensorFlow {build.tf_version}, tested with CUDA {build.cuda} and cuDNN {build.cudnn}, which the "
                   f"[and-cuda] extra installs as pip packages{driver_part}"
                   + (f"; it supports Python {build.python_min} to {build.python_max} (this host: {python})"
                      if python else ""))
            reasons.append(why)
            text = f"# {host.describe()}\n# {why}.\n{build.pip_command}\n"
            return Recipe(kind="pip", text=text, reasons=reasons, facts_used=facts_used)
        advice = _tf_advice(host, python)
    if not advice:
        advice = [f"no {name} build in gpurig's tables fits this host; run `gpurig doctor` for details"]
    text = (f"# {host.describe()}\n# No {name} build{py_note} fits this host. What to change:\n"
            + "".join(f"#  - {a}\n" for a in advice))
    return Recipe(kind="pip", text=text, reasons=reasons + advice, facts_used=facts_used, fits=False)
