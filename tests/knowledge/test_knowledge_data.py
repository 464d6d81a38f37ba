"""The knowledge files themselves: sorted, sourced, consistent with each other and with the source."""

from __future__ import annotations

from importlib import resources

import pytest

from gpurig.knowledge import frameworks as kfw
from gpurig.knowledge import link_speeds as kls
from gpurig.knowledge import loaders as k

FILES = ["cuda.toml", "arch.toml", "torch.toml", "tensorflow.toml", "cudnn.toml", "links.toml"]


def raw(name):
    return k.tomllib.loads(resources.files("gpurig.knowledge").joinpath(name).read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", FILES)
def test_every_row_has_a_source_and_only_known_flags(name):
    data = raw(name)
    rows = [(table, row) for table, value in data.items() if isinstance(value, list) for row in value]
    assert rows, f"{name} has no rows"
    for table, row in rows:
        assert str(row.get("source", "")).strip(), f"{name} [[{table}]] {row} has no source"
        assert row.get("unverified", False) in (True, False), f"{name} [[{table}]] unverified must be a boolean"


def test_cuda_releases_sorted_and_driver_floors_monotonic():
    releases = k.cuda_releases()
    versions = [k.version_key(r.cuda) for r in releases]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    floors = [k.version_key(r.min_driver) for r in releases]
    assert floors == sorted(floors), "a newer CUDA never needs an older driver"
    for r in releases:
        update_floors = [k.version_key(u.min_driver) for u in r.updates]
        assert update_floors == sorted(update_floors)
        assert all(f >= k.version_key(r.min_driver) for f in update_floors), r.cuda


def test_cuda_rows_match_the_release_notes_table():
    # A sample of rows read against the CUDA release notes table, including both ends.
    expected = {"10.2": "440.33", "11.0": "450.51.05", "11.4": "470.42.01", "11.8": "520.61.05",
                "12.0": "525.60.13", "12.2": "535.54.03", "12.8": "570.26", "13.0": "580.65.06",
                "13.2": "595.45.04"}
    for cuda, driver in expected.items():
        assert k.cuda_release(cuda).min_driver == driver


def test_no_cuda_gap_that_the_source_does_not_have():
    # Every minor release from 11.0 to the newest row is present, except 12.7, which never existed.
    have = {k.major_minor(r.cuda) for r in k.cuda_releases()}
    newest = max(have)
    for major, last_minor in ((11, 8), (12, 9), (13, newest[1])):
        for minor in range(0, last_minor + 1):
            if (major, minor) == (12, 7):
                assert (12, 7) not in have
                continue
            assert (major, minor) in have, f"CUDA {major}.{minor} missing"


def test_minor_compat_floor_per_major_never_exceeds_a_toolkits_own_driver():
    majors = {m.major for m in k.minor_compat_floors()}
    assert majors == {11, 12, 13}  # 10.x has none
    for release in k.cuda_releases():
        floor = k.min_driver_for_cuda(release.cuda)
        assert k.driver_meets(release.min_driver, floor), release.cuda
    # 11.0's own driver predates the 11.x compatibility floor; every later 11.x uses the floor.
    assert k.min_driver_for_cuda("11.0") == "450.51.05"
    assert k.min_driver_for_cuda("11.1") == "450.80.02"
    floors = [k.version_key(m.min_driver) for m in sorted(k.minor_compat_floors(), key=lambda m: m.major)]
    assert floors == sorted(floors)


def test_architectures_are_ordered_and_capabilities_unique():
    ccs = [cc for a in k.architectures() for cc in a.compute_capabilities]
    assert len(ccs) == len(set(ccs))
    keys = [tuple(map(int, cc.split("."))) for cc in ccs]
    assert keys == sorted(keys)
    firsts = [k.version_key(a.first_cuda) for a in k.architectures()]
    assert firsts == sorted(firsts)
    for a in k.architectures():
        if a.last_cuda_major is not None:
            assert a.last_cuda_major >= k.major_minor(a.first_cuda)[0]


def test_cards_map_to_known_architectures():
    for card in k.cards():
        assert k.arch_for_cc(card.compute_capability) is not None, card
    patterns = [c.pattern.lower() for c in k.cards()]
    assert len(patterns) == len(set(patterns))


def test_torch_releases_sorted_with_valid_python_ranges():
    versions = [k.version_key(r.torch) for r in kfw.torch_releases()]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    for r in kfw.torch_releases():
        assert k.major_minor(r.python_min) <= k.major_minor(r.python_max), r.torch
        cudas = [k.version_key(kfw.variant_cuda(v)) for v in r.variants]
        assert cudas == sorted(cudas), f"torch {r.torch} variants not in CUDA order"


def test_every_torch_variant_has_a_known_cuda_and_an_arch_list():
    for r in kfw.torch_releases():
        for variant in r.variants:
            cuda = kfw.variant_cuda(variant)
            assert k.cuda_release(cuda) is not None, f"torch {r.torch} {variant}: CUDA {cuda} not in cuda.toml"
            arch = kfw.torch_arch_list(r.torch, variant)
            if variant in r.arch_unknown:
                assert not arch, f"torch {r.torch} {variant}: listed as arch_unknown but has an arch list"
                continue
            assert arch, f"torch {r.torch} {variant} has no arch list (list it in arch_unknown if it is not known)"
            for entry in arch:
                assert entry.startswith(("sm_", "compute_")), entry


def test_torch_builds_do_not_overlap_and_compile_only_architectures_their_cuda_knows():
    builds = kfw.torch_builds()
    for i, a in enumerate(builds):
        assert k.major_minor(a.torch_min) <= k.major_minor(a.torch_max)
        for b in builds[i + 1:]:
            if a.variant == b.variant:
                overlap = (k.major_minor(a.torch_min) <= k.major_minor(b.torch_max)
                           and k.major_minor(b.torch_min) <= k.major_minor(a.torch_max))
                assert not overlap, f"{a.variant}: two arch lists for one release"
        cuda = k.version_key(kfw.variant_cuda(a.variant))
        for entry in a.arch:
            number = entry.split("_")[1]
            cc = f"{number[:-1]}.{number[-1]}"
            arch = k.arch_for_cc(cc)
            assert arch is not None, f"{a.variant} {entry}: unknown architecture"
            assert k.version_key(arch.first_cuda) <= cuda, f"{a.variant} compiles {entry} before CUDA had it"
            if arch.last_cuda_major is not None:
                assert cuda[0] <= arch.last_cuda_major, f"{a.variant} compiles {entry} after CUDA dropped it"


def test_tensorflow_rows_sorted_and_consistent_with_cuda_and_cudnn():
    builds = kfw.tf_builds()
    versions = [k.version_key(b.tf_version) for b in builds]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    for b in builds:
        assert k.cuda_release(b.cuda) is not None, f"TF {b.tf_version}: CUDA {b.cuda} not in cuda.toml"
        assert k.major_minor(b.python_min) <= k.major_minor(b.python_max)
        # TF pairs cuDNN with a CUDA of the same major; 2.16/2.17 pair cuDNN 8.9 with CUDA 12.3,
        # one minor past cuDNN 8.9's listed 12.2 (it runs through minor-version compatibility), so
        # the check is on the major.
        row = kfw.cudnn_release(b.cudnn)
        if row is None:  # cuDNN 8.3-8.8 are not in the reference's support matrix
            assert k.major_minor("8.3") <= k.major_minor(b.cudnn) <= k.major_minor("8.8"), b.cudnn
            continue
        majors = {int(c.split(".")[0]) for c in row.cuda}
        assert k.major_minor(b.cuda)[0] in majors, f"TF {b.tf_version}: cuDNN {b.cudnn} vs CUDA {b.cuda}"
    # `tensorflow[and-cuda]` exists from 2.14 on.
    assert [b.and_cuda_extra for b in builds] == [k.version_key(b.tf_version) >= (2, 14) for b in builds]


def test_cudnn_rows_sorted_and_non_overlapping():
    rows = kfw.cudnn_releases()
    for a, b in zip(rows, rows[1:], strict=False):
        assert k.major_minor(a.cudnn_max) < k.major_minor(b.cudnn_min)
    for r in rows:
        assert k.major_minor(r.cudnn_min) <= k.major_minor(r.cudnn_max)


def test_link_tables():
    gens = [g.generation for g in kls.nvlink_generations()]
    assert gens == sorted(gens)
    per_link = [g.per_link_gbps for g in kls.nvlink_generations() if g.architecture != "Ampere" or "8.0" in g.compute_capabilities]
    assert per_link == sorted(per_link)
    pcie = kls.pcie_generations()
    assert [p.generation for p in pcie] == list(range(1, len(pcie) + 1))
    for a, b in zip(pcie, pcie[1:], strict=False):
        assert b.per_lane_gbps == pytest.approx(2 * a.per_lane_gbps, rel=0.05)  # each generation doubles
        assert b.gt_per_s > a.gt_per_s
    for p in pcie:
        assert p.per_lane_gbps < p.gt_per_s / 8 + 1e-9  # encoding never adds bandwidth


def test_no_release_gaps_in_torch_and_tensorflow():
    torch = [k.major_minor(r.torch) for r in kfw.torch_releases()]
    assert torch[:2] == [(1, 12), (1, 13)]
    assert torch[2:] == [(2, m) for m in range(0, len(torch) - 2)]
    tf = [k.major_minor(b.tf_version) for b in kfw.tf_builds()]
    assert tf == [(2, m) for m in range(tf[0][1], tf[0][1] + len(tf))]


def test_every_published_variant_is_covered_by_exactly_one_arch_list():
    for r in kfw.torch_releases():
        for variant in r.variants:
            rows = [b for b in kfw.torch_builds() if b.variant == variant
                    and k.major_minor(b.torch_min) <= k.major_minor(r.torch) <= k.major_minor(b.torch_max)]
            assert len(rows) == (0 if variant in r.arch_unknown else 1), (r.torch, variant, rows)
    # and no arch list claims a release that does not publish the variant
    for b in kfw.torch_builds():
        for r in kfw.torch_releases():
            if k.major_minor(b.torch_min) <= k.major_minor(r.torch) <= k.major_minor(b.torch_max):
                assert b.variant in r.variants, (b.variant, r.torch)


@pytest.mark.parametrize("dist, table", [("torch", "torch"), ("tensorflow", "tensorflow"),
                                         ("tensorflow-cpu", "tensorflow")])
def test_the_tables_know_the_frameworks_installed_here(dist, table):
    """The README's install must never leave the doctor saying its tables are older than the install:
    a framework release newer than knowledge/*.toml fails here (add its row, with a source)."""
    from importlib import metadata

    try:
        installed = metadata.version(dist)
    except metadata.PackageNotFoundError:
        pytest.skip(f"{dist} is not installed here")
    if table == "torch":
        newest = max((r.torch for r in kfw.torch_releases()), key=k.version_key)
    else:
        newest = max((b.tf_version for b in kfw.tf_builds()), key=k.version_key)
    assert k.major_minor(installed) <= k.major_minor(newest), (
        f"{dist} {installed} is newer than the newest row of knowledge/{table}.toml ({newest})")
