"""A big script is read one group of top-level statements at a time (its whole syntax tree is never
held): the findings must be exactly those of reading it whole, wherever the cuts fall."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gpurig.diagnose import lint as L
from gpurig.diagnose import lint_stream
from gpurig.errors import BadInput

ROOT = Path(__file__).resolve().parents[2]

# Every place a naive cut would break: decorators, strings whose lines start at column 0, open
# brackets, backslash continuations, else/elif/except/finally, class bodies, a rank guard whose
# early return spans the rest of the module, and a helper called only under a guard.
TRICKY = '''import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

BANNER = """
def not_a_function():
    pass
"""
PORT = \\
29500


@torch.no_grad()
def evaluate(model, loader):
    return [
model(x)
        for x in loader]


def save(model):
    torch.save(model.state_dict(), "ckpt.pt")


class Trainer:
    def __init__(self, rank):
        self.rank = rank

    def fit(self, model, data):
        sampler = DistributedSampler(data)
        loader = DataLoader(data, sampler=sampler, batch_size=32)
        for epoch in range(3):
            for x in loader:
                pass
        if self.rank == 0:
            save(model)


def main():
    dist.init_process_group("nccl")
    rank = int(os.environ["RANK"])
    try:
        model = DDP(torch.nn.Linear(2, 2).cuda())
    except RuntimeError:
        raise
    finally:
        pass
    if rank == 0:
        print("start")
    elif rank == 1:
        print("second")
    else:
        torch.save(model, "every.pt")
    Trainer(rank).fit(model, list(range(10)))
    save(model)  # the save helper, on every rank this time
    torch.hub.load("repo", "model")
    backbone = resnet50(weights=ResNet50_Weights.DEFAULT)  # fetched only by its weights= keyword


if __name__ == "__main__":
    main()
'''


def scripts() -> list[Path]:
    found = sorted((ROOT / "tests" / "fixtures" / "scripts").glob("*.py"))
    corpus = ROOT / ".lint-corpus"
    if corpus.is_dir():  # the third-party scripts, where fetched (not in CI)
        found += sorted(corpus.rglob("*.py"))
    return found


def findings(path: Path, streamed: bool, monkeypatch) -> list[tuple]:
    monkeypatch.setattr(L, "STREAM_BYTES", 0 if streamed else 1 << 40)
    monkeypatch.setattr(lint_stream, "_CHUNK_BYTES", 64)  # a cut at nearly every possible place
    return [(f.id, f.line, f.title) for f in L.lint_file(str(path), select=list(L.RULES))]


HELPERS = """import torchvision


def get_data(root):
    return torchvision.datasets.CIFAR10(root, download=True)
"""

RUNNER = """import torch


class Runner:
    def train(self, model):
        model = torch.nn.DataParallel(model)
        return model


class Wrapped:
    def __init__(self, model):
        self.model = torch.nn.DataParallel(model)
"""

USES_RUNNER = """from runners import Runner, Wrapped

runner = Runner()
runner.train(None)
Chosen = Wrapped
Chosen(None)
"""

USES_HELPERS = """
from helpers import *
import helpers as h

data = get_data("./data")
more = h.get_data("./more")
"""


# Every fetched corpus script with its helpers (where `.lint-corpus/` is present; never in CI) cut at
# nearly every place: 2.7 minutes for 484 scripts' files on a 2-core machine; 14.2 minutes alone for
# 2,432 files (660 scripts with their helpers), past 15 beside other tests; the whole corpus, about twice that.
@pytest.mark.timeout(3600)
def test_a_streamed_script_gets_exactly_the_findings_of_the_whole_tree(tmp_path, monkeypatch):
    tricky = tmp_path / "tricky.py"
    tricky.write_text(TRICKY)
    whole = findings(tricky, False, monkeypatch)
    assert {f[0] for f in whole} >= {"ddp-without-device", "sampler-without-set-epoch", "save-on-every-rank"}, whole
    assert len([f for f in whole if f[0] == "download-on-every-rank"]) == 2, whole  # torch.hub and weights=
    assert findings(tricky, True, monkeypatch) == whole
    # Helpers of the project's own modules, imported by name, by star and as a module.
    (tmp_path / "helpers.py").write_text(HELPERS)
    local = tmp_path / "local.py"
    local.write_text(TRICKY + USES_HELPERS)
    whole = findings(local, False, monkeypatch)
    assert "download-on-every-rank" in {f[0] for f in whole}, whole
    assert findings(local, True, monkeypatch) == whole
    # A method of an object built from the project's own class (`runner.train()`).
    (tmp_path / "runners.py").write_text(RUNNER)
    methods = tmp_path / "methods.py"
    methods.write_text(USES_RUNNER)
    whole = findings(methods, False, monkeypatch)
    assert {("data-parallel", 4), ("data-parallel", 6)} <= {f[:2] for f in whole}, whole
    assert findings(methods, True, monkeypatch) == whole
    for path in scripts():  # (a helper of the corpus in Python 2 is refused alike, streamed or whole)
        assert outcome(path, True, monkeypatch) == outcome(path, False, monkeypatch), path


def outcome(path: Path, streamed: bool, monkeypatch) -> list[tuple] | str:
    try:
        return findings(path, streamed, monkeypatch)
    except BadInput:
        return "not valid Python"


def test_a_big_script_that_does_not_compile_is_named_with_its_line(tmp_path, monkeypatch):
    monkeypatch.setattr(L, "STREAM_BYTES", 0)
    monkeypatch.setattr(lint_stream, "_CHUNK_BYTES", 64)
    bad = tmp_path / "bad.py"
    bad.write_text(TRICKY + "\ndef broken(:\n    pass\n")
    line = TRICKY.count("\n") + 2
    with pytest.raises(BadInput, match=rf"line {line}: invalid syntax"):
        L.lint_file(str(bad))
    undecodable = tmp_path / "latin.py"
    undecodable.write_bytes(TRICKY.encode() + b"\nx = '\xe9'\n")
    with pytest.raises(BadInput, match=rf"not UTF-8 text \(line {line}"):
        L.lint_file(str(undecodable))


def test_a_literal_of_many_lines_at_column_0_is_compiled_a_few_times(tmp_path, monkeypatch):
    # a vocabulary dict with its 3,000 entries at column 0: every line could start a statement, so a
    # cut inside it is retried; the group grows by doubling, not one line per compile (quadratic)
    source = TRICKY + "VOCAB = {\n" + "".join(f'"token_{i:06d}": {i},\n' for i in range(3000)) + "}\n" + TRICKY
    monkeypatch.setattr(lint_stream, "_CHUNK_BYTES", 64)
    compiles = []
    monkeypatch.setattr(lint_stream, "compile", lambda *a, **k: compiles.append(1) or compile(*a, **k), raising=False)
    trees = list(lint_stream._top_level_chunks(source, "vocab.py"))
    assert sum(len(t.body) for t in trees) == len(ast.parse(source).body)
    assert len(compiles) < len(trees) + 40, len(compiles)


def test_a_script_over_the_threshold_is_streamed(tmp_path, monkeypatch):
    calls = []
    real = L._stream_scan
    monkeypatch.setattr(L, "_stream_scan", lambda *a: calls.append(a) or real(*a))
    big = tmp_path / "big.py"
    big.write_text(TRICKY + "\n".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(L.STREAM_BYTES // 20)))
    assert big.stat().st_size > L.STREAM_BYTES
    assert {f.id for f in L.lint_file(str(big))} >= {"ddp-without-device"}
    assert calls, "the big script was not streamed"


@pytest.mark.parametrize("streamed", [False, True])
def test_what_a_lint_read_is_freed_when_it_ends(tmp_path, monkeypatch, streamed):
    """Nothing the linter built refers to itself in a cycle: a 14 MB script's millions of nodes are
    freed as the lint ends, not seconds later by a pass of the cycle collector (the user waits for it)."""
    import ast
    import gc

    (tmp_path / "helpers.py").write_text(HELPERS)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from .inner import *\n")
    (tmp_path / "pkg" / "inner.py").write_text(HELPERS)
    script = tmp_path / "local.py"
    script.write_text(TRICKY + USES_HELPERS + "from pkg import get_data as g2\ng2('./x')\n")
    monkeypatch.setattr(L, "STREAM_BYTES", 0 if streamed else 10**9)
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        assert L.lint_file(str(script))
        gc.collect()
        left = [o for o in gc.garbage if isinstance(o, (ast.AST, L._Scanner))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was:
            gc.enable()
    assert not left, f"{len(left)} objects of the lint were left to the cycle collector"


def test_a_streamed_script_keeps_output_calls_only_for_their_rule(tmp_path, monkeypatch):
    """Streamed, the default rules leave prints out of what is kept (a big file's memory) and find
    exactly what the whole tree does; choosing print-on-every-rank finds the prints again."""
    script = tmp_path / "talky.py"
    script.write_text(TRICKY + "\nprint('epoch done')\nlogger.info('saved')\n")
    monkeypatch.setattr(lint_stream, "_CHUNK_BYTES", 64)

    def run(streamed: bool, **rules) -> list[tuple]:
        monkeypatch.setattr(L, "STREAM_BYTES", 0 if streamed else 1 << 40)
        return [(f.id, f.line) for f in L.lint_file(str(script), **rules)]

    assert run(True) == run(False) and run(True)
    chosen = {"select": ["print-on-every-rank", "ddp-without-device"]}
    assert run(True, **chosen) == run(False, **chosen)
    assert "print-on-every-rank" in {f for f, _ in run(True, **chosen)}
    assert run(True, select=list(L.RULES), ignore=["print-on-every-rank"]) == run(False, select=list(L.RULES), ignore=["print-on-every-rank"])


def test_a_streamed_script_keeps_the_fetches_known_by_their_library(tmp_path, monkeypatch):
    # llama2.c's tinystories.py: `requests.get(url, stream=True)` in a download helper, and gdown's and
    # wget's download(): fetches by what they are, which a streamed scan must keep like the whole tree.
    script = tmp_path / "fetches.py"
    script.write_text(
        "import gdown\nimport requests\nimport torch.distributed as dist\nimport wget\n\n\n"
        "def download_file(url, fname):\n"
        "    resp = requests.get(url, stream=True)\n"
        "    with open(fname, 'wb') as f:\n"
        "        f.write(resp.content)\n\n\n"
        "def main():\n"
        "    download_file('https://example.org/data.tar.gz', 'data.tar.gz')\n"
        "    gdown.download(id='1abc', output='weights.pt')\n"
        "    wget.download('https://example.org/vocab.txt')\n"
        "    dist.init_process_group('nccl')\n"
        "    dist.destroy_process_group()\n\n\n"
        "main()\n")
    whole = findings(script, False, monkeypatch)
    assert [line for rule, line, _ in whole if rule == "download-on-every-rank"] == [8, 15, 16], whole
    assert findings(script, True, monkeypatch) == whole


def test_a_streamed_script_keeps_a_function_it_picks_by_name(tmp_path, monkeypatch):
    # OpenPCDet's `getattr(common_utils, 'init_dist_%s' % args.launcher)(args.tcp_port, ...)`: a call of
    # a function chosen by its name, which a streamed scan must keep like the whole tree.
    (tmp_path / "helpers.py").write_text(
        "import torch.distributed as dist\n\n\n"
        "def init_dist_pytorch(tcp_port, local_rank, backend='nccl'):\n"
        "    dist.init_process_group(backend=backend, init_method='tcp://127.0.0.1:%d' % tcp_port)\n")
    script = tmp_path / "train.py"
    script.write_text(
        "import argparse\nimport helpers\nimport torch.distributed as dist\n\n\n"
        "def main():\n"
        "    parser = argparse.ArgumentParser()\n"
        "    parser.add_argument('--launcher', default='pytorch')\n"
        "    parser.add_argument('--tcp_port', type=int, default=18888)\n"
        "    args = parser.parse_args()\n"
        "    getattr(helpers, 'init_dist_%s' % args.launcher)(args.tcp_port, 0)\n"
        "    dist.destroy_process_group()\n\n\n"
        "main()\n")
    whole = findings(script, False, monkeypatch)
    assert [(rule, line) for rule, line, _ in whole] == [("hard-coded-rendezvous", 11)], whole
    assert findings(script, True, monkeypatch) == whole



def test_a_streamed_script_keeps_its_classes_and_what_its_helpers_return(tmp_path, monkeypatch):
    # CompressAI: `net = CustomDataParallel(net)` of a class of the script built on nn.DataParallel;
    # SMoE: `logging = create_exp_dir(...)`, a writer the project's helper returns, then `logging(...)`.
    (tmp_path / "utils.py").write_text(
        "import functools\n\n\n"
        "def logging(s, log_path, log_=True):\n"
        "    with open(log_path, 'a+') as f_log:\n"
        "        f_log.write(s + '\\n')\n\n\n"
        "def create_exp_dir(dir_path):\n"
        "    return functools.partial(logging, log_path=dir_path + '/log.txt')\n")
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\nimport torch.distributed as dist\nfrom torch import nn\nfrom utils import create_exp_dir\n\n\n"
        "class CustomDataParallel(nn.DataParallel):\n"
        "    def __getattr__(self, key):\n"
        "        return super().__getattr__(key)\n\n\n"
        "def main():\n"
        "    net = nn.Linear(2, 2).cuda()\n"
        "    if torch.cuda.device_count() > 1:\n"
        "        net = CustomDataParallel(net)\n"
        "    dist.init_process_group('nccl')\n"
        "    logging = create_exp_dir('runs/exp')\n"
        "    logging('start')\n"
        "    dist.destroy_process_group()\n\n\n"
        "main()\n")
    whole = findings(script, False, monkeypatch)
    assert {(rule, line) for rule, line, _ in whole} >= {("data-parallel", 15), ("save-on-every-rank", 18)}, whole
    assert findings(script, True, monkeypatch) == whole


def _project(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def _streamed_as_whole(script: Path, monkeypatch, expected: tuple[str, int]) -> None:
    whole = findings(script, False, monkeypatch)
    assert expected in {f[:2] for f in whole}, whole
    assert findings(script, True, monkeypatch) == whole


def test_a_streamed_script_finds_its_project_above_a_package_it_imports(tmp_path, monkeypatch):
    # (examples/training/mlm/train.py runs `import examples.training` and takes its data module from
    # pkg/ at the root above examples/: the whole-tree reading looks there, and so must the streamed one)
    _project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/data.py": "from transformers import AutoTokenizer\n\n\nclass DataModule:\n"
                       "    def __init__(self, tokenizer):\n        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer)\n",
        "examples/__init__.py": "", "examples/training/__init__.py": "",
        "examples/training/mlm/train.py": "import os\n\nimport examples.training  # noqa: F401\nimport torch.distributed as dist\n"
                                          "from pkg.data import DataModule\n\nlocal_rank = int(os.environ['LOCAL_RANK'])\n"
                                          "dist.init_process_group('nccl')\ndata = DataModule(tokenizer='bert-base-uncased')\n"
                                          "dist.destroy_process_group()\n"})
    _streamed_as_whole(tmp_path / "examples" / "training" / "mlm" / "train.py", monkeypatch, ("download-on-every-rank", 9))


def test_a_streamed_script_knows_which_class_an_object_it_calls_a_method_of_was_built_from(tmp_path, monkeypatch):
    # (the Time-Series-Library family: `Exp = Exp_Long_Term_Forecast` ... `exp = Exp(args)` then
    # `exp.train(setting)`, where another class's train() loads nothing: the method is the loading
    # one only on an object of the class that loads, which the streamed reading must remember too)
    _project(tmp_path, {
        "exp/__init__.py": "",
        "exp/forecast.py": "import torch\n\n\nclass Exp_Forecast:\n    def train(self, setting):\n"
                           "        self.model.load_state_dict(torch.load(setting + '/checkpoint.pth'))\n",
        "exp/other.py": "class Exp_Other:\n    def train(self, setting):\n        return setting\n",
        "run.py": "import torch\nimport torch.distributed as dist\nfrom exp.forecast import Exp_Forecast\n"
                  "from exp.other import Exp_Other\n\nExp = Exp_Forecast\ndist.init_process_group('nccl')\n"
                  "torch.cuda.set_device(0)\nexp = Exp(None)\nexp.train('run')\ndist.destroy_process_group()\n"})
    _streamed_as_whole(tmp_path / "run.py", monkeypatch, ("torch-load-without-map-location", 10))
