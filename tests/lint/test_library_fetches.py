"""Library calls that download as they run, by what they are: a perceptual loss or image metric
built on every rank (lpips, torchmetrics' FID), Whisper, sentence-transformers, nltk corpora. Seen
through the file's own imports, in the script and in the project's helpers; a file of this
machine, or a class of the project that happens to share the name, is no download."""

from __future__ import annotations

import textwrap

from gpurig.diagnose.lint import lint_file, lint_source

HEAD = """\
import torch.distributed as dist
"""


def downloads(source: str) -> list[int]:
    source = HEAD + textwrap.dedent(source) + "dist.init_process_group('nccl')\ndist.destroy_process_group()\n"
    return [f.line for f in lint_source(source, "<script>") if f.id == "download-on-every-rank"]


def test_library_fetches_in_the_script_under_their_imported_names():
    assert downloads("""
    import lpips
    from torchmetrics.image.fid import FrechetInceptionDistance as FID
    import whisper
    import nltk
    loss = lpips.LPIPS(net="vgg")
    fid = FID(feature=2048)
    asr = whisper.load_model("base")
    nltk.download("punkt")
    """) == [7, 8, 9, 10]


def test_a_local_file_or_a_class_of_the_project_is_no_fetch():
    assert downloads("""
    import whisper
    asr = whisper.load_model("./checkpoints/base.pt")
    class LPIPS:
        pass
    loss = LPIPS()
    """) == []
    # the same name from another library is not the fetch either
    assert downloads("""
    from mylosses import LPIPS
    loss = LPIPS()
    """) == []


def project(tmp_path, module: str, name: str, code: str, use: str):
    """A script in tmp_path that imports `name` from its own module `module` (holding `code`) and
    runs `use` between the start and the end of its process group."""
    (tmp_path / f"{module}.py").write_text(code)
    script = tmp_path / "train.py"
    script.write_text(HEAD + f"from {module} import {name}\ndist.init_process_group('nccl')\n{use}\n"
                      "dist.destroy_process_group()\n")
    return script


def test_a_helper_of_the_project_that_builds_a_metric(tmp_path):
    script = project(tmp_path, "metrics", "make_fid", "import torchmetrics\n\ndef make_fid():\n"
                     "    return torchmetrics.image.fid.FrechetInceptionDistance(feature=64)\n", "fid = make_fid()")
    [finding] = [f for f in lint_file(script) if f.id == "download-on-every-rank"]
    assert finding.line == 4 and finding.related == ["metrics.py:4"]


def test_a_function_of_the_project_named_like_a_library_fetch_is_judged_by_its_body(tmp_path):
    script = project(tmp_path, "data_utils", "load_dataset", "import json\n\ndef load_dataset(path, workers):\n"
                     "    return json.load(open(path))\n", "train = load_dataset(args.train_set, 4)")
    assert [f.id for f in lint_file(script)] == []


def test_a_dataset_read_from_an_argument_named_as_a_file():
    assert downloads("""
    from datasets import load_dataset
    train = load_dataset(data_args.train_manifest_path)
    valid = load_dataset(args.valid_file)
    hub = load_dataset(args.data_path)
    """) == [6]


def test_pretrained_given_a_checkpoint_file_is_judged_by_the_builder(tmp_path):
    # `pretrained=args.checkpoint` names a file of this machine, not the switch of a download; what
    # the project's builder fetches itself (a tokenizer) is still found, at the same call.
    (tmp_path / "models.py").write_text("from transformers import BertTokenizer\n\ndef ram(pretrained=''):\n"
                                        "    return BertTokenizer.from_pretrained('bert-base-uncased')\n")
    script = tmp_path / "train.py"
    script.write_text(HEAD + "import timm\nfrom models import ram\ndist.init_process_group('nccl')\n"
                      "model = ram(pretrained=args.checkpoint)\nbackbone = timm.create_model('vit_base', pretrained=args.ckpt_path)\n"
                      "other = timm.create_model('vit_base', pretrained=True)\ndist.destroy_process_group()\n")
    found = [(f.line, f.related) for f in lint_file(script) if f.id == "download-on-every-rank"]
    assert found == [(5, ["models.py:4"]), (7, [])]


def test_every_dataset_class_of_pyg_downloads_when_built_whatever_its_name():
    # PyTorch Geometric's datasets download their files from __init__ when missing: known by the
    # package they come from, under any spelling of it; its base classes and transforms are not.
    assert downloads("""
    import torch_geometric
    import torch_geometric.datasets as D
    from torch_geometric import datasets as pyg_data
    from torch_geometric.datasets import MD17 as Molecules
    from torch_geometric.data import InMemoryDataset
    from torch_geometric.transforms import NormalizeFeatures
    a = torch_geometric.datasets.MD17(root="data/md17", name="uracil")
    b = D.QM7b(root="data/qm7b")
    c = pyg_data.GNNBenchmarkDataset(root="data/gnn", name="MNIST")
    d = Molecules(root="data/md17", name="aspirin")
    e = NormalizeFeatures()
    """) == [9, 10, 11, 12]


def test_a_pyg_dataset_built_in_a_helper_of_the_project(tmp_path):
    script = project(tmp_path, "data", "build", "from torch_geometric.datasets import WordNet18RR\n\ndef build(root):\n"
                     "    return WordNet18RR(root)\n", "dataset = build('data/wn18rr')")
    [finding] = [f for f in lint_file(script) if f.id == "download-on-every-rank"]
    assert finding.line == 4 and finding.related == ["data.py:4"]


def test_the_early_hugging_face_cached_path_downloads_in_a_project_helper(tmp_path):
    # A dialogue fine-tuning script's shape: utils.get_dataset() fetches the dataset's URL with
    # pytorch_pretrained_bert's cached_path on every rank.
    (tmp_path / "utils.py").write_text(textwrap.dedent("""\
        import json
        from pytorch_pretrained_bert import cached_path
        URL = "https://example.org/personachat.json"
        def get_dataset(path=""):
            with open(cached_path(path or URL)) as f:
                return json.load(f)
        """))
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""\
        import torch.distributed as dist
        from utils import get_dataset
        dist.init_process_group("nccl", init_method="env://")
        data = get_dataset()
        dist.destroy_process_group()
        """))
    assert [(f.id, f.line) for f in lint_file(str(script), select={"download-on-every-rank"})] == [("download-on-every-rank", 4)]
    # a project's own function of that name is judged by its body
    (tmp_path / "utils.py").write_text((tmp_path / "utils.py").read_text().replace(
        "from pytorch_pretrained_bert import cached_path", "def cached_path(p):\n    return p"))
    assert lint_file(str(script), select={"download-on-every-rank"}) == []
