"""`gpurig doctor`: is this machine ready for multi-GPU training, and if not, what exactly to type."""

from __future__ import annotations

from pathlib import Path

import typer

from gpurig.diagnose.findings import has_error
from gpurig.errors import BadInput, check_output_file
from gpurig.report.output import console_for, emit_json
from gpurig.suite.doctor import doctor_data, doctor_document, gather

HELP = """Check that this machine (or container) is ready for multi-GPU training, and say how to fix what is not.

Reads the GPUs (NVML or nvidia-smi), links, driver, PyTorch/TensorFlow builds, container limits and
environment, without ever initialising CUDA, then prints findings worst first, each with its fix.
PyTorch and TensorFlow are imported in child processes once; their answers are kept (in
~/.cache/gpurig) until a package, the driver, the GPUs or the environment changes, so the next
doctor answers in about a second. --refresh probes them again.

Examples:
  gpurig doctor                        judge this machine
  gpurig doctor --json > doctor.json   facts and findings as JSON
  gpurig doctor --save-facts rig.json  keep the snapshot to share
  gpurig doctor --facts rig.json       judge a saved snapshot
  gpurig doctor --refresh              import the frameworks again (after fixing something)

Exit status: 0 no error finding, 1 at least one error finding, 2 bad usage or an unreadable facts file.
"""


def register(app: typer.Typer) -> None:
    @app.command("doctor", help=HELP)
    def doctor(
        json_out: bool = typer.Option(False, "--json", help="Print one JSON document {facts, findings} on stdout."),
        save_facts: Path | None = typer.Option(
            None, "--save-facts", metavar="FILE",
            help="Write the machine's facts snapshot to FILE (JSON); its folder must exist, and an existing "
                 "FILE is replaced only with --force.",
        ),
        facts_file: Path | None = typer.Option(
            None, "--facts", metavar="FILE", help="Judge a saved snapshot instead of this machine."
        ),
        fast: bool = typer.Option(
            False, "--fast", help="Never import PyTorch/TensorFlow: use their cached answers if any, else read "
                                  "their versions from their files (answers in well under a second)."
        ),
        refresh: bool = typer.Option(
            False, "--refresh", help="Probe PyTorch and TensorFlow again instead of using their cached answers "
                                     "(kept until a package, the driver, the GPUs or the environment changes)."
        ),
        force: bool = typer.Option(False, "--force", help="Replace an existing --save-facts file."),
    ) -> None:
        if save_facts is not None:
            # Before probing: a file that would not be replaced (or a missing folder) costs nothing.
            check_output_file(str(save_facts), "--save-facts", force)
        if facts_file is not None and refresh:
            raise BadInput("--refresh probes this machine; it cannot be used with --facts FILE")
        facts = gather(facts_file, frameworks=not fast, use_cache=True, refresh=refresh)
        if save_facts is not None:
            from gpurig.probe.snapshot import save_facts_file

            save_facts_file(facts, save_facts, force=force)
        facts, findings = doctor_data(facts)
        if json_out:
            emit_json(doctor_document(facts, findings))
        else:
            from gpurig.report.terminal import render_doctor

            console = console_for(False)
            render_doctor(console, facts, findings)
            if save_facts is not None:
                console.print(f"facts saved to {save_facts}")
        raise typer.Exit(1 if has_error(findings) else 0)
