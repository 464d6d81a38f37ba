"""Facts snapshots: saved atomically, loaded back identical, and every bad file named with its fault."""

import json

import pytest

from gpurig.errors import BadInput
from gpurig.probe.facts import GpuFacts, GpuPairFacts, NvLinkFacts, RigFacts
from gpurig.probe.snapshot import load_facts_file, save_facts_file


def _rig() -> RigFacts:
    f = RigFacts()
    f.driver.driver_version = "580.159.04"
    f.gpus = [
        GpuFacts(index=i, name="NVIDIA H200", compute_capability="9.0",
                 nvlinks=[NvLinkFacts(link=k, active=True, speed_gbps=26.562) for k in range(18)])
        for i in range(2)
    ]
    f.pairs = [GpuPairFacts(gpu_a=0, gpu_b=1, link="NV18", nvlink_count=18, p2p_read=True)]
    f.env = {"NCCL_NVLS_ENABLE": "0"}
    return f


def test_round_trip(tmp_path):
    path = save_facts_file(_rig(), tmp_path / "rig.json")
    back = load_facts_file(path)
    assert back == _rig()
    assert back.pair(1, 0).link == "NV18"


def test_doctor_json_document_is_accepted(tmp_path):
    p = tmp_path / "doctor.json"
    p.write_text(json.dumps({"facts": _rig().to_dict(), "findings": []}))
    assert load_facts_file(p).gpus[0].name == "NVIDIA H200"


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "not valid JSON (line 1"),
        ("[1, 2]", "expected a JSON object"),
        ('{"gpus": [{"index": "zero"}]}', "facts.gpus[0].index: expected an integer"),
        ('{"gpus": [{"name": "x"}]}', "facts.gpus[0]"),
        ('{"driver": {"driver_version": 580}}', "facts.driver.driver_version: expected a string"),
        ('{"surprise": 1}', "unknown key(s) surprise"),
        ('{"schema_version": 99}', "schema_version 99"),
    ],
)
def test_bad_files_are_named(tmp_path, content, message):
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(BadInput) as exc:
        load_facts_file(p)
    assert str(p) in str(exc.value) and message in str(exc.value)


def test_missing_file(tmp_path):
    with pytest.raises(BadInput, match="no such file"):
        load_facts_file(tmp_path / "nope.json")


def test_failed_save_keeps_the_previous_file(tmp_path, monkeypatch):
    path = save_facts_file(_rig(), tmp_path / "rig.json")
    before = path.read_text()

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("gpurig.probe.snapshot.os.replace", boom)
    with pytest.raises(BadInput, match="No space left on device"):
        save_facts_file(RigFacts(), path)
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["rig.json"]  # no temporary file left behind


def test_save_into_missing_folder(tmp_path):
    with pytest.raises(BadInput, match="does not exist"):
        save_facts_file(_rig(), tmp_path / "no" / "rig.json")


def test_save_under_a_file(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(BadInput, match="is a file, not a folder"):
        save_facts_file(_rig(), tmp_path / "afile" / "rig.json")
