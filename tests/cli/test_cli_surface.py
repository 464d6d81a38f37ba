"""The command-line surface: every command is there, in the user's order, and each --help teaches."""

import re
import subprocess
import sys

import pytest

COMMANDS = ["check", "doctor", "verify", "bench", "train", "launch", "explain", "lint", "monitor", "env"]


def test_top_level_lists_every_command_in_order(run_cli):
    r = run_cli("--help")
    assert r.returncode == 0
    found = [c for c in re.findall(r"^│ (\w+)\s", r.stdout, re.M) if c in COMMANDS]
    assert found == COMMANDS


@pytest.mark.parametrize("command", COMMANDS + ["bench comm", "bench train", "env pip", "env dockerfile"])
def test_every_command_has_help(run_cli, command):
    r = run_cli(*command.split(), "--help")
    assert r.returncode == 0, r.stderr
    assert "Usage: gpurig " + command in " ".join(r.stdout.split())


def test_version_and_module_entry_point(run_cli):
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.startswith("gpurig ")


def test_console_script_is_installed():
    # the installed `gpurig` script and `python -m gpurig` are the same program
    exe = subprocess.run([sys.executable, "-c", "import shutil,sys,os; print(shutil.which('gpurig', path=os.path.dirname(sys.executable)) or '')"],
                         capture_output=True, text=True).stdout.strip()
    if not exe:
        pytest.skip("gpurig is not installed as a console script in this environment")
    r = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("gpurig ")


def test_a_command_starts_without_importing_the_others():
    """`gpurig lint x.py` imports lint alone (a tenth of a second at each start on a small VM);
    `gpurig --help`, a typo and `gpurig.cli.app` still see every command."""
    probe = ("import sys; from gpurig.cli import main\n"
             "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
             "print(sorted(m.split('.')[-1] for m in sys.modules if m.startswith('gpurig.commands.')))")
    run = lambda *args: subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=120)  # noqa: E731
    commands = {"check", "doctor", "verify", "burn", "bench_comm", "bench_train", "train", "launch", "explain",
                "lint", "monitor", "env"}

    def imported(*args: str) -> set[str]:
        return commands & set(eval(run(*args).stdout.strip().splitlines()[-1]))

    assert imported("lint", "--help") == {"lint"}
    assert imported("bench", "comm", "--help") == {"bench_comm", "bench_train"}
    assert imported("--help") == imported("lnit") == commands
    import typer

    from gpurig.cli import app

    assert set(typer.main.get_command(app).commands) >= {"check", "lint", "env", "bench"}


def test_unknown_command_exits_2(run_cli):
    r = run_cli("frobnicate")
    assert r.returncode == 2 and "frobnicate" in r.stderr


def test_help_prose_is_reflowed_for_any_terminal_width():
    from gpurig.cli import reflow

    text = "First line of a sentence\nthat goes on.\n\nExamples:\n  gpurig x   does x\n  gpurig y   does y\n"
    assert reflow(text) == "First line of a sentence that goes on.\n\nExamples:\n  gpurig x   does x\n  gpurig y   does y"


def test_reflow_joins_a_sentence_ending_in_a_colon_and_a_list_item_but_keeps_tables():
    from gpurig.cli import reflow

    text = ("Reads a log, or the last run\nof launch. Two tiers:\n\n"
            "  1. a catalogue of the errors (CUDA,\n     NCCL), each with a fix;\n  2. the index\n\n"
            "  ddp          K steps on N ranks;\n               uneven inputs finish\n\nExamples:\n  gpurig x")
    assert reflow(text) == ("Reads a log, or the last run of launch. Two tiers:\n\n"
                            "  1. a catalogue of the errors (CUDA, NCCL), each with a fix;\n  2. the index\n\n"
                            "  ddp          K steps on N ranks;\n               uneven inputs finish\n\nExamples:\n  gpurig x")


def test_help_at_80_columns_keeps_sentences_whole(run_cli):
    r = run_cli("check", "--help", env={"COLUMNS": "80"})
    assert r.returncode == 0
    # a sentence is wrapped by the terminal, not broken where the source file broke it
    assert "gloo processes on the CPU" in " ".join(r.stdout.split())
    assert not any(line.strip() in ("processes on the CPU, so the whole tool can be seen working anywhere.",)
                   for line in r.stdout.splitlines())


ALL_HELP = ["", "check", "doctor", "verify", "bench", "bench comm", "bench train", "train", "launch", "explain", "lint",
            "monitor", "env", "env pip", "env dockerfile", "env docker-run", "env slurm", "env k8s"]


def test_no_help_is_cut_at_80_or_100_columns():
    """Every --help at the usual terminal widths shows each option's name and help whole: nothing
    ends in an ellipsis, and each option is listed under its one canonical name (no `<str>` column)."""
    from typer.testing import CliRunner

    from gpurig.cli import app

    runner = CliRunner()
    for width in (80, 100):
        for command in ALL_HELP:
            r = runner.invoke(app, [*command.split(), "--help"], env={"COLUMNS": str(width)}, terminal_width=width)
            assert r.exit_code == 0, (command, r.output)
            cut = [line for line in r.output.splitlines() if "…" in line]
            assert cut == [], f"gpurig {command} --help at {width} columns: {cut}"
            assert "<str>" not in r.output, command
            listed = re.findall(r"^│ (-[-\w]+)", r.output, re.M)
            assert "--nproc_per_node" not in listed and "--nproc" not in listed, command


def test_an_alias_left_out_of_the_help_is_still_accepted(run_cli):
    r = run_cli("launch", "--dry-run", "--nproc_per_node", "2", "--device", "cpu", "train.py", env={"COLUMNS": "120"})
    assert "No such option" not in r.stderr, r.stderr


def test_the_help_adjustments_tolerate_a_typer_without_them(monkeypatch):
    """The GPU image carries an older typer whose options have no `display_type_rich`: gpurig must
    still start (this once broke every command there)."""
    import typer.core
    import typer.rich_utils

    import gpurig.cli as cli

    # (Not there at all: a class attribute of None reads the same to gpurig, whether the method is
    # the class's own or inherited, and whether or not a help page was drawn before.)
    monkeypatch.setattr(typer.core.TyperOption, "display_type_rich", None, raising=False)
    monkeypatch.setattr(typer.core.TyperArgument, "display_type_rich", None, raising=False)
    monkeypatch.setattr(typer.rich_utils, "_print_options_panel", lambda **kw: None)  # a fresh, unpatched panel
    cli._readable_options_panel()  # must not raise
    monkeypatch.delattr(typer.rich_utils, "_print_options_panel")
    cli._readable_options_panel()


def test_a_command_is_wrapped_without_the_torchrun_runner(tmp_path):
    """Every command stops cleanly on SIGTERM; what does it (launch.signals) is not the runner that
    starts torchrun, and `gpurig lint` does not import that runner or its launch plan."""
    script = tmp_path / "tiny.py"
    script.write_text("x = 1\n")
    probe = ("import sys; from gpurig.cli import main\n"
             "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in sys.modules if m.startswith('gpurig.launch')))")
    out = subprocess.run([sys.executable, "-c", probe, "lint", str(script)], capture_output=True, text=True, timeout=120)
    assert eval(out.stdout.strip().splitlines()[-1]) == ["gpurig.launch", "gpurig.launch.signals"], out.stdout


def test_no_help_text_is_eaten_as_markup():
    """The help is rich markup: `[rule-id]` in `# gpurig: ignore[rule-id]` would be read as a style
    tag and vanish. Every bracket a command's help means literally is escaped, so it is shown."""
    import importlib
    import pkgutil

    from rich.text import Text

    import gpurig.commands

    styles = re.compile(r"\[/?(?:bold|dim|italic|underline|green|yellow|red|cyan|blue|magenta|bold red|bold green)\]")
    for info in pkgutil.iter_modules(gpurig.commands.__path__):
        text = getattr(importlib.import_module(f"gpurig.commands.{info.name}"), "HELP", None)
        if not text:
            continue
        shown = Text.from_markup(text).plain
        meant = styles.sub("", text).replace("\\[", "[")
        assert shown == meant, f"gpurig.commands.{info.name}.HELP loses text to markup"


def test_lint_help_shows_how_to_quiet_one_rule(run_cli):
    out = run_cli("lint", "--help").stdout
    assert "ignore[rule-id]" in out and "ignore-file[rule-id]" in out
