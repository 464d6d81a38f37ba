"""A finding that stands for several places of the project (a helper that downloads five datasets)
names each of them: in `related` of --json, in an `also:` line where the title has no room, and in
the corpus count (each judged download it names is found)."""

from __future__ import annotations

import hashlib
import json

from gpurig.diagnose import lint_corpus as lc
from gpurig.diagnose.lint import DEFAULT_RULES, lint_file

DATA = """\
from datasets import load_dataset

def get_data():
    a = load_dataset("org/alpha")
    b = load_dataset("org/beta")
    c = load_dataset("org/gamma")
    d = load_dataset("org/delta")
    e = load_dataset("org/epsilon")
    return a, b, c, d, e
"""
SCRIPT = """\
import torch.distributed as dist
from data import get_data

dist.init_process_group("nccl")
train = get_data()
dist.destroy_process_group()
"""


def project(tmp_path):
    proj = tmp_path / "p"
    proj.mkdir()
    (proj / "data.py").write_text(DATA)
    (proj / "train.py").write_text(SCRIPT)
    return proj / "train.py"


def test_every_download_of_a_helper_is_named(tmp_path, run_cli):
    script = project(tmp_path)
    [finding] = [f for f in lint_file(script) if f.id == "download-on-every-rank"]
    assert finding.line == 5 and finding.related == [f"data.py:{n}" for n in range(4, 9)]
    doc = json.loads(run_cli("lint", "--json", str(script)).stdout)
    assert doc["findings"][0]["related"] == finding.related
    text = run_cli("lint", str(script)).stdout
    assert "and 2 more" in text and "also: data.py:7, data.py:8" in text


def test_the_corpus_counts_each_judged_download_the_finding_names(tmp_path):
    script = project(tmp_path)
    entry = {"file": "p/train.py", "path": "train.py", "url": "https://example.org/p/train.py",
             "sha256": hashlib.sha256(script.read_bytes()).hexdigest(), "judged": "default",
             "mistakes": [{"rule": "download-on-every-rank", "line": n, "file": "p/data.py", "why": "w"} for n in range(4, 9)]}
    score = lc.measure(set(DEFAULT_RULES), manifest={"p": entry}, cache=tmp_path)
    assert (score.findings, score.true_findings, score.mistakes, score.found) == (1, 1, 5, 5)
