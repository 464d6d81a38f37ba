"""`gpurig doctor` through the real entry point: JSON contract, exit codes, saved snapshots."""

import json
from pathlib import Path

import pytest

RIGS = Path(__file__).resolve().parents[1] / "fixtures" / "rigs"


def test_help_teaches(run_cli):
    r = run_cli("doctor", "--help")
    assert r.returncode == 0
    for word in ("--json", "--save-facts", "--facts", "Exit status"):
        assert word in r.stdout


def test_json_is_one_document_with_facts_and_findings(run_cli):
    r = run_cli("doctor", "--json", "--fast")
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)  # nothing else on stdout
    assert set(doc) == {"facts", "findings"}
    assert doc["findings"], "the doctor always says something"
    for f in doc["findings"]:
        assert set(f) >= {"id", "severity", "title", "detail", "fix", "evidence"}
        assert f["severity"] in ("error", "warn", "info", "ok")
    # the exit code follows the findings
    assert r.returncode == (1 if any(f["severity"] == "error" for f in doc["findings"]) else 0)


def test_this_cpu_machine_gets_a_sensible_report(run_cli):
    r = run_cli("doctor")
    assert r.returncode in (0, 1), r.stderr
    out = r.stdout
    assert "gpurig doctor" in out
    if not json.loads(run_cli("doctor", "--json", "--fast").stdout)["facts"]["gpus"]:
        assert "No NVIDIA GPU" in out or "driver does not answer" in out
        assert "CPU" in out  # says it will run on the CPU


def test_save_then_judge_the_snapshot(run_cli, tmp_path):
    path = tmp_path / "rig.json"
    live = run_cli("doctor", "--json", "--fast", "--save-facts", str(path))
    assert path.exists()
    replay = run_cli("doctor", "--json", "--facts", str(path))
    assert replay.returncode == live.returncode
    live_ids = [f["id"] for f in json.loads(live.stdout)["findings"]]
    replay_ids = [f["id"] for f in json.loads(replay.stdout)["findings"]]
    assert live_ids == replay_ids


@pytest.mark.parametrize(
    "content, expect",
    [("{oops", "not valid JSON"), ('{"gpus": "two"}', "facts.gpus: expected a list"), ("", "not valid JSON")],
)
def test_bad_facts_file_exits_2_naming_it(run_cli, tmp_path, content, expect):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    r = run_cli("doctor", "--facts", str(bad))
    assert r.returncode == 2
    assert str(bad) in r.stderr and expect in r.stderr
    assert "Traceback" not in r.stderr
    assert r.stdout == ""


def test_missing_facts_file_exits_2(run_cli, tmp_path):
    r = run_cli("doctor", "--facts", str(tmp_path / "absent.json"))
    assert r.returncode == 2 and "no such file" in r.stderr


def test_unknown_flag_exits_2(run_cli):
    r = run_cli("doctor", "--no-such-flag")
    assert r.returncode == 2 and "--no-such-flag" in r.stderr


@pytest.mark.parametrize("rig", sorted(p.name for p in RIGS.glob("*.json")))
def test_every_recorded_rig_is_judged(run_cli, rig):
    r = run_cli("doctor", "--json", "--facts", str(RIGS / rig))
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    assert r.returncode == (1 if any(f["severity"] == "error" for f in doc["findings"]) else 0)


def test_save_facts_never_replaces_a_file_without_force(run_cli, tmp_path):
    path = tmp_path / "rig.json"
    path.write_text("my notes\n")
    r = run_cli("doctor", "--fast", "--save-facts", str(path))
    assert r.returncode == 2 and r.stdout == ""
    assert f"--save-facts {path}: the file exists; add --force to replace it" in r.stderr
    assert path.read_text() == "my notes\n"
    forced = run_cli("doctor", "--fast", "--json", "--save-facts", str(path), "--force")
    assert forced.returncode in (0, 1), forced.stderr
    assert json.loads(path.read_text())["schema_version"] == 1


def test_save_facts_is_checked_before_anything_is_read(run_cli, tmp_path):
    # The facts file is missing too, but the --save-facts mistake is the one reported: nothing is
    # probed or read before the output file is known to be writable.
    (tmp_path / "rig.json").write_text("{}\n")
    r = run_cli("doctor", "--facts", str(tmp_path / "absent.json"), "--save-facts", str(tmp_path / "rig.json"))
    assert r.returncode == 2 and "--save-facts" in r.stderr and "absent.json" not in r.stderr
    r = run_cli("doctor", "--fast", "--save-facts", str(tmp_path / "no" / "rig.json"))
    assert r.returncode == 2 and "the folder" in r.stderr and not (tmp_path / "no").exists()


def test_help_names_force(run_cli):
    r = run_cli("doctor", "--help")
    assert "Replace an existing --save-facts file." in r.stdout


@pytest.mark.parametrize("content", ["{}", '{"schema_version": 1}', '{"facts": {}, "findings": []}'])
@pytest.mark.parametrize("command", [["doctor"], ["env", "pip"]])
def test_a_facts_file_with_no_facts_exits_2(run_cli, tmp_path, content, command):
    path = tmp_path / "empty.json"
    path.write_text(content)
    r = run_cli(*command, "--facts", str(path))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert f"--facts {path}: holds no facts" in r.stderr
    assert r.stdout == "" and "not probed" not in r.stderr


@pytest.mark.parametrize("content", ["[]", "3"])
def test_a_facts_file_that_is_a_json_list_or_number_exits_2(run_cli, tmp_path, content):
    path = tmp_path / "rig.json"
    path.write_text(content)
    r = run_cli("doctor", "--facts", str(path))
    assert r.returncode == 2 and f"--facts {path}: not a gpurig facts snapshot" in r.stderr
