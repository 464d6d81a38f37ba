"""The one check of a framework release the user names (`--torch-version`, `--tf-version`).

gpurig's tables know releases as X.Y (torch 2.11, TensorFlow 2.16) and every recipe pins the
release line (`torch==2.11.*`, the image of 2.11.0), so a release is accepted as X.Y, X.Y.Z or X.Y.*
when the tables know X.Y; anything else (a typo, `2.x`, a local build like `2.11.0+cu130`, an empty
value) is bad input naming the flag and the value, with the releases that are known.
"""

from __future__ import annotations

import re

from gpurig.errors import BadInput
from gpurig.knowledge import frameworks as kfw
from gpurig.knowledge import loaders as L

# X.Y, X.Y.Z or X.Y.*: the spellings of a release line pip and the tables agree on.
_RELEASE = re.compile(r"(\d+)\.(\d+)(?:\.(?:\d+|\*))?")


def check_release(value: str | None, flag: str, known: list[str] | tuple[str, ...],
                  unknown: str = "is not in gpurig's tables") -> str | None:
    """`value` as the tables spell its release ("2.11.0" -> "2.11"), None when not given.

    `known` are the releases the tables have for this use (e.g. only those with official images);
    `unknown` says why a well-formed release outside them is refused."""
    if value is None:
        return None
    ordered = sorted(dict.fromkeys(known), key=L.version_key)
    listed = ", ".join(ordered)
    m = _RELEASE.fullmatch(value.strip())
    if m is None:
        raise BadInput(f"{flag} {value!r} is not a release like 2.11 or 2.11.0 (gpurig knows {listed})")
    want = (int(m.group(1)), int(m.group(2)))
    for release in ordered:
        if L.major_minor(release) == want:
            return release
    raise BadInput(f"{flag} {value!r} {unknown} (gpurig knows {listed})")


def check_torch_version(value: str | None, first: str | None = None, what: str = "release") -> str | None:
    """`--torch-version`, against the torch releases in the tables (from `first` on, when given:
    official images start at 2.0, and `what` then names what is offered, e.g. "image")."""
    known = [r.torch for r in kfw.torch_releases()
             if first is None or L.version_key(r.torch) >= L.version_key(first)]
    unknown = "is not in gpurig's tables"
    if first is not None and value is not None and (m := _RELEASE.fullmatch(value.strip())):
        if (int(m.group(1)), int(m.group(2))) < L.major_minor(first):
            unknown = f"has no official {what}: they start at {first}"
    return check_release(value, "--torch-version", known, unknown)


def check_tf_version(value: str | None) -> str | None:
    """`--tf-version`, against the TensorFlow releases in the tables."""
    return check_release(value, "--tf-version", [b.tf_version for b in kfw.tf_builds()])
