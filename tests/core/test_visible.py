"""CUDA_VISIBLE_DEVICES is read the way CUDA reads it: stop at the first entry it cannot resolve."""

from gpurig.probe.visible import parse_visible_devices, torch_cuda_build


def test_unset_shows_every_gpu():
    assert parse_visible_devices(None, 4).visible == [0, 1, 2, 3]


def test_empty_hides_every_gpu():
    vis = parse_visible_devices("", 4)
    assert vis.visible == [] and vis.problems == []


def test_indices_in_the_given_order():
    assert parse_visible_devices("2,0", 4).visible == [2, 0]


def test_missing_index_stops_the_list_there():
    vis = parse_visible_devices("0,7,1", 4)
    assert vis.visible == [0]
    assert "index 7 does not exist" in vis.problems[0]


def test_garbage_entry_is_named():
    vis = parse_visible_devices("0,gpu1", 2)
    assert vis.visible == [0]
    assert "'gpu1'" in vis.problems[0]


def test_uuid_prefix_resolves():
    uuids = ["GPU-f420b0f1-846b-65c9-22e6-c6fced576463", "GPU-a13d9211-b633-0a3b-c0c3-5783d3797875"]
    assert parse_visible_devices("GPU-a13d9211", 2, uuids).visible == [1]
    assert parse_visible_devices("GPU-ffff", 2, uuids).problems


def test_duplicate_index_is_a_problem():
    assert parse_visible_devices("1,1", 2).problems


def test_torch_cuda_build_is_read_without_import():
    import subprocess
    import sys

    build = torch_cuda_build()
    # torch is installed in the test environment; either a CUDA build ("13.0") or a CPU one (None)
    assert build is None or build[0].isdigit()
    # Reading the version file never imports torch (seconds, and CUDA initialisation, for a fact on disk).
    probe = "import sys; from gpurig.probe.visible import torch_cuda_build; torch_cuda_build(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr
