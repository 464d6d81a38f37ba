"""The `gpurig` command line: each subcommand's module in `gpurig.commands` (named in `ORDER`) is
registered by `_register`, only the one a command line runs (all of them for `gpurig --help`).

Each module defines `register(app)` (the `bench_*` ones `register(bench_app)`, shown under
`gpurig bench`); the options, the work and the output live in the module.
"""

from __future__ import annotations

import functools
import re
import sys

import typer
from typer.core import TyperGroup

from gpurig import __version__
from gpurig.errors import BadInput, ProblemFound

HELP = """Make the GPUs of one machine train together, correctly and fast.

Start with [bold]gpurig check[/bold]: it runs every step below and writes a report.
On a machine without a GPU every command still runs, on the CPU with two gloo processes.
"""

# The order a user meets the commands in: the main job first, then each step of it, then the rest.
ORDER = ("check", "doctor", "verify", "burn", "bench", "train", "launch", "explain", "lint", "monitor", "env")


def _flags_take_no_value() -> None:
    """typer 0.2x's help prints a type for every option, so a flag reads `--json <bool>` as if it
    took a value; show no type for flags (a no-op where typer does not have that column)."""
    from typer.core import TyperOption

    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None or getattr(shown, "_gpurig", False):
        return

    def display_type_rich(self, ctx):  # noqa: ANN001, ANN202 - typer's signature
        return None if getattr(self, "is_flag", False) else shown(self, ctx)

    display_type_rich._gpurig = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich


_flags_take_no_value()


def _readable_options_panel() -> None:
    """Keep typer's options table readable at 80 columns: each option under its one canonical
    name (the aliases users also type, `--nproc_per_node`, `--nproc`, stay accepted and are named in
    the docs), and a value shown as its metavar only where one is given (FILE, SECONDS, ...), not as
    `<str>` on every line. Without this, names and help are cut with an ellipsis at 80 columns."""
    try:
        import typer.rich_utils as rich_utils
        from typer.core import TyperOption
    except ImportError:  # a typer without the rich help: nothing to adjust
        return
    panel = getattr(rich_utils, "_print_options_panel", None)
    if panel is None or getattr(panel, "_gpurig", False):
        return

    def shown_opts(opts: list[str]) -> list[str]:
        longs = [o for o in opts if o.startswith("--")]
        shorts = [o for o in opts if not o.startswith("--")]
        return longs[:1] + shorts

    def print_options_panel(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - typer's signature
        params = kwargs.get("params") or []
        saved = [(p, p.opts, p.secondary_opts) for p in params if isinstance(p, TyperOption)]
        try:
            for p, opts, secondary in saved:
                p.opts = shown_opts(opts)
                p.secondary_opts = shown_opts(secondary)
            return panel(*args, **kwargs)
        finally:
            for p, opts, secondary in saved:
                p.opts, p.secondary_opts = opts, secondary

    print_options_panel._gpurig = True  # type: ignore[attr-defined]
    rich_utils._print_options_panel = print_options_panel

    shown = getattr(TyperOption, "display_type_rich", None)  # typer >= 0.2x; older ones print no type column
    if shown is not None:
        def display_type_rich(self, ctx):  # noqa: ANN001, ANN202 - typer's signature
            if getattr(self, "is_flag", False):
                return None
            if self.metavar:
                return self.metavar
            value = shown(self, ctx)
            return None if value in ("<str>", "str", "TEXT", "<text>") else value

        display_type_rich._gpurig = True  # type: ignore[attr-defined]
        TyperOption.display_type_rich = display_type_rich

    from typer.core import TyperArgument

    shown_arg = getattr(TyperArgument, "display_type_rich", None)
    if shown_arg is not None:
        def argument_type_rich(self, ctx):  # noqa: ANN001, ANN202 - typer's signature
            value = shown_arg(self, ctx)
            return None if value in ("<str>", "<list[str]>", "<str>...", "str") else value

        TyperArgument.display_type_rich = argument_type_rich


def _when_help_is_shown() -> None:
    """Adjust typer's help tables the first time a help page is drawn, not at every start: the
    rich help machinery costs a fifth of the start-up of a command that prints no help."""
    from typer.core import TyperCommand

    for klass in (TyperCommand, TyperGroup):
        drawn = klass.format_help
        if getattr(drawn, "_gpurig", False):
            continue

        def format_help(self, ctx, formatter, _drawn=drawn):  # noqa: ANN001, ANN202 - click's signature
            try:
                _readable_options_panel()
            except Exception:  # help cosmetics must never stop the tool: another typer keeps its own table
                pass
            return _drawn(self, ctx, formatter)

        format_help._gpurig = True  # type: ignore[attr-defined]
        klass.format_help = format_help


_when_help_is_shown()


class _JourneyOrder(TyperGroup):
    def list_commands(self, ctx):  # noqa: ANN001 - click's signature
        names = super().list_commands(ctx)
        rank = {n: i for i, n in enumerate(ORDER)}
        return sorted(names, key=lambda n: (rank.get(n, len(ORDER)), n))


_app = typer.Typer(
    cls=_JourneyOrder,
    help=HELP,
    no_args_is_help=True,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
    add_completion=True,  # gpurig --install-completion (bash, zsh, fish, PowerShell)
)
bench_app = typer.Typer(
    help="Measure the links between GPUs and how training scales, against what the hardware allows.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpurig {__version__}")
        raise typer.Exit()


@_app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    pass


def reflow(text: str | None) -> str | None:
    """Join the hard-wrapped lines of each prose paragraph of a help text, so the terminal wraps it
    once at its own width. Indented lines (examples, tables, list items) stay lines of their own,
    but a line indented deeper than a numbered or bulleted item before it continues that item and
    is joined to it (a table's or an example's aligned second column is not); a line ending in ':'
    is a heading of its own only where no sentence is running into it."""
    if not text:
        return text
    out: list[str] = []
    for para in text.strip("\n").split("\n\n"):
        lines = para.split("\n")
        prose: list[str] = []
        kept: list[str] = []
        for line in lines:
            indent = _indent(line)
            if indent and kept and not prose and 0 < _indent(kept[-1]) < indent and _LIST_ITEM.match(kept[-1]):
                kept[-1] = kept[-1].rstrip() + " " + line.strip()  # the rest of a numbered or bulleted item
            elif line.rstrip().endswith(":") and prose and not indent:
                kept.append(" ".join([*prose, line.strip()]))  # a sentence ending in a colon
                prose = []
            elif indent or line.rstrip().endswith(":"):
                if prose:
                    kept.append(" ".join(prose))
                    prose = []
                kept.append(line)
            else:
                prose.append(line.strip())
        if prose:
            kept.append(" ".join(prose))
        out.append("\n".join(kept))
    return "\n\n".join(out)


_LIST_ITEM = re.compile(r"\s+(?:\d+\.|[-*•])\s")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _stops_quietly(callback):
    """Ctrl-C, or SIGTERM (turned into `launch.signals.Stop` while the command runs), that reaches
    the top of a command ends it with one line and 130 (143 for SIGTERM), not a traceback or
    click's "Aborted!". Workers are already stopped by then: the runner stops them before it passes
    the interrupt on."""

    @functools.wraps(callback)
    def wrapper(*args, **kwargs):
        from gpurig.launch.signals import sigterm_stops

        try:
            with sigterm_stops():  # `kill` or a scheduler: the same clean stop as Ctrl-C, workers included
                return callback(*args, **kwargs)
        except KeyboardInterrupt as exc:
            signame = getattr(exc, "signame", "SIGINT")
            words = "Ctrl-C (SIGINT)" if signame == "SIGINT" else signame
            print(f"gpurig: stopped by {words}; nothing is left running", file=sys.stderr)
            raise typer.Exit(143 if signame == "SIGTERM" else 130) from None

    return wrapper


def _reflow_all(typer_app: typer.Typer) -> None:
    for info in typer_app.registered_commands:
        if getattr(info.callback, "_gpurig", False):
            continue  # reflowed and wrapped when it was registered
        info.help = reflow(info.help or (info.callback.__doc__ if info.callback else None))
        if info.callback is not None:
            info.callback = _stops_quietly(info.callback)
            info.callback._gpurig = True
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _reflow_all(group.typer_instance)


_registered: set[str] = set()


def _register(names) -> None:
    """Register the named commands (`bench` is its group) once each, then reflow their help."""
    import importlib

    for name in names:
        if name in _registered:
            continue
        _registered.add(name)
        if name == "bench":
            for sub in ("bench_comm", "bench_train"):
                importlib.import_module(f"gpurig.commands.{sub}").register(bench_app)
            _app.add_typer(bench_app, name="bench")
        else:
            importlib.import_module(f"gpurig.commands.{name}").register(_app)
    _reflow_all(_app)


def _register_all() -> None:
    """Every command, named here: what `gpurig --help` lists is what this function registers."""
    _register(ORDER)


def __getattr__(name: str):
    """`gpurig.cli.app`: the whole command line, every command registered (tests, embedding)."""
    if name == "app":
        _register_all()
        return _app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _command_named(argv: list[str]) -> str | None:
    """The one command a command line runs (`gpurig lint x.py`), or None (`gpurig --help`)."""
    return argv[0] if argv and argv[0] in ORDER else None


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script and of `python -m gpurig`."""
    # Only the command asked for is imported: `gpurig lint` does not pay for torch-free imports of
    # every other command (a tenth of a second at each start). `gpurig --help` registers them all.
    named = _command_named(sys.argv[1:] if argv is None else argv)
    _register([named] if named else ORDER)
    try:
        _app(args=argv, prog_name="gpurig", standalone_mode=True)
    except BadInput as exc:
        print(f"gpurig: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except ProblemFound as exc:
        print(f"gpurig: {exc}", file=sys.stderr)
        sys.exit(1)
    except OSError as exc:
        # A path the user named cannot be read or written (permissions, a full disk, a file where a
        # folder should be): say which and why, not a traceback.
        where = f" {exc.filename}" if getattr(exc, "filename", None) else ""
        print(f"gpurig: error: cannot use{where}: {exc.strerror or exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
