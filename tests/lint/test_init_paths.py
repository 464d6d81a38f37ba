"""`gpurig lint` following a project whose modules are found through sys.path, the way older
research code does it (HRNet, Detectron-era repositories): `tools/train.py` does `import _init_paths`,
which puts `../lib` on sys.path, then imports `from dataset import make_dataloader`. The helper's
shuffling DistributedSampler is then found, and named in the finding."""

from __future__ import annotations

import textwrap

from gpurig.diagnose.lint import lint_file


def _write(project, rel: str, text: str) -> None:
    target = project / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(textwrap.dedent(text))


INIT_PATHS = """
    import os.path as osp
    import sys
    def add_path(path):
        if path not in sys.path:
            sys.path.insert(0, path)
    this_dir = osp.dirname(__file__)
    add_path(osp.join(this_dir, '..', 'lib'))
    """

SCRIPT = """\
import _init_paths
import torch.distributed as dist
from dataset import make_dataloader
dist.init_process_group("nccl")
loader = make_dataloader(is_train=True)
valid = make_dataloader(is_train=False)
for epoch in range(10):
    for batch in loader:
        pass
dist.destroy_process_group()
"""


def _project(tmp_path) -> None:
    _write(tmp_path, "tools/_init_paths.py", INIT_PATHS)
    _write(tmp_path, "lib/dataset/__init__.py", "from .build import make_dataloader\n")
    _write(tmp_path, "lib/dataset/build.py", """
        import torch
        def make_dataloader(is_train=True):
            sampler = torch.utils.data.distributed.DistributedSampler([1, 2, 3])
            return torch.utils.data.DataLoader([1, 2, 3], sampler=sampler)
        """)
    _write(tmp_path, "tools/train.py", SCRIPT)


def test_modules_found_on_the_folder_an_init_paths_module_adds(tmp_path):
    _project(tmp_path)
    found = [(f.id, f.line, f.related) for f in lint_file(str(tmp_path / "tools" / "train.py"))]
    samplers = [(line, related) for rule, line, related in found if rule == "sampler-without-set-epoch"]
    # one finding for the helper's one sampler, at its first call, naming where the sampler is built
    assert samplers == [(5, ["../lib/dataset/build.py:4"])]
    # without the sys.path module, the project's modules are not found and nothing is said of them
    (tmp_path / "tools" / "_init_paths.py").write_text("import sys\n")
    assert not [f for f in lint_file(str(tmp_path / "tools" / "train.py")) if f.id == "sampler-without-set-epoch"]


def test_a_streamed_script_finds_the_same_modules_on_those_folders(tmp_path, monkeypatch):
    import gpurig.diagnose.lint as L
    from gpurig.diagnose import lint_stream

    _project(tmp_path)
    whole = [(f.id, f.line) for f in lint_file(str(tmp_path / "tools" / "train.py"))]
    monkeypatch.setattr(L, "STREAM_BYTES", 0)
    monkeypatch.setattr(lint_stream, "_CHUNK_BYTES", 64)
    assert ("sampler-without-set-epoch", 5) in whole
    assert [(f.id, f.line) for f in L.lint_file(str(tmp_path / "tools" / "train.py"))] == whole


def test_a_folder_joined_to_a_root_worked_out_at_run_time_is_looked_for_above_the_script(tmp_path):
    # TorchSemiSeg: exp.voc/<experiment>/config.py cuts the repository's root out of its own path
    # and puts <root>/furnace on sys.path; train.py then imports `from engine.engine import Engine`,
    # whose __init__ starts the process group (that nothing destroys)
    _write(tmp_path, "exp/voc8/config.py", """
        import os.path as osp
        import sys
        abs_dir = osp.realpath(".")
        root_dir = abs_dir[:abs_dir.index("TorchSemiSeg") + len("TorchSemiSeg")]
        def add_path(path):
            if path not in sys.path:
                sys.path.insert(0, path)
        add_path(osp.join(root_dir, 'furnace'))
        """)
    _write(tmp_path, "furnace/engine/__init__.py", "")
    _write(tmp_path, "furnace/engine/engine.py", """
        import torch
        import torch.distributed as dist
        class Engine:
            def __init__(self, local_rank):
                torch.cuda.set_device(local_rank)
                dist.init_process_group(backend="nccl", init_method="env://")
            def __enter__(self):
                return self
            def __exit__(self, *exc):
                torch.cuda.empty_cache()
        """)
    _write(tmp_path, "exp/voc8/train.py", """\
        from config import root_dir
        from engine.engine import Engine
        with Engine(0) as engine:
            for epoch in range(3):
                pass
        """)
    found = [(f.id, f.line) for f in lint_file(str(tmp_path / "exp" / "voc8" / "train.py"))]
    assert found == [("no-destroy-process-group", 1)]
