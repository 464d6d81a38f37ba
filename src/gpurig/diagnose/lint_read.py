"""A script on disk, read as Python reads it, for `gpurig lint`: its bytes, decoded by its coding line
and compiled (a missing, unreadable, undecodable or invalid file is bad input, named with its line);
and the conditions a big syntax tree is built and walked in (a deep stack, the cycle collector off).
"""

from __future__ import annotations

import os
import re


def read_script(script: str) -> str:
    """The text of a script the user named, checked the way Python reads it: a missing, unreadable,
    undecodable or syntactically invalid file is bad input (exit 2), naming the file and the line."""
    return read_script_tree(script)[0]


def read_script_tree(script: str):
    """(text, syntax tree) of a script, read as `read_script` does."""
    import io
    import tokenize

    from gpurig.errors import BadInput

    label, data = _script_bytes(script)
    try:
        # From bytes, as the interpreter does: the encoding is UTF-8 unless the file declares another.
        tree = _deep(lambda: compile(data, script, "exec", flags=0x400, dont_inherit=True))  # 0x400: ast.PyCF_ONLY_AST
    except RecursionError:
        raise BadInput(f"{label}: nested too deeply for Python to compile (an expression or an elif chain thousands deep)") from None
    except SyntaxError as exc:
        raise BadInput(f"{label}: {_syntax_error_text(exc)}") from None
    except ValueError as exc:  # null bytes, on some Python versions
        raise BadInput(f"{label}: not valid Python ({exc})") from None
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding), tree


def _script_bytes(script: str) -> tuple[str, bytes]:
    """("SCRIPT <name>", the file's bytes); a missing or unreadable file is bad input (exit 2)."""
    from pathlib import Path

    from gpurig.errors import BadInput, check_user_file

    label = f"SCRIPT {script}"
    check_user_file(script, label, "script")
    try:
        return label, Path(script).read_bytes()
    except OSError as exc:
        raise BadInput(f"{label}: cannot read it ({exc.strerror or exc})") from None


def _size(script: str) -> int:
    try:
        return os.path.getsize(script)
    except OSError:
        return 0  # read_script_tree names the problem


def _read_text(script: str) -> str:
    """The text of a (big) script, decoded as Python decodes it, without compiling it whole."""
    import io
    import tokenize

    from gpurig.errors import BadInput

    label, data = _script_bytes(script)
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
    except (SyntaxError, LookupError) as exc:  # an unknown coding line
        raise BadInput(f"{label}: {_syntax_error_text(exc) if isinstance(exc, SyntaxError) else exc}") from None
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        name = "UTF-8" if encoding.replace("_", "-").lower() in ("utf-8", "utf8", "utf-8-sig") else encoding
        raise BadInput(f"{label}: not {name} text (line {line}: byte 0x{data[exc.start]:02x}); save it as UTF-8 "
                       "or declare its encoding in a coding line") from None
    return text[1:] if text.startswith("\ufeff") else text


def _syntax_error_text(exc: SyntaxError) -> str:
    """Python's own words for a script it cannot compile, with the line (and its code) they are about."""
    where = f"line {exc.lineno}: " if exc.lineno else ""
    msg = exc.msg or "invalid syntax"
    found = re.search(r"'([\w-]+)' codec can't decode byte (0x[0-9a-f]{2})", msg)
    if found:  # bytes the file's encoding (UTF-8 unless a coding line says otherwise) cannot decode
        codec, byte = found.groups()
        name = "UTF-8" if codec.replace("_", "-").lower() in ("utf-8", "utf8") else codec
        return f"not {name} text ({where}byte {byte}); save it as UTF-8 or declare its encoding in a coding line"
    text = (exc.text or "").strip()
    code = f": {text if len(text) <= 120 else text[:120] + ' …'}" if text else ""
    return f"not valid Python ({where}{msg}){code}"


class _no_gc:
    """Python's cycle collector off while a syntax tree is built and walked: a big file's tree is
    millions of objects without cycles, and each collection would scan them all again (a 1 MB
    script lints in 1.5 s instead of 2 s, a 14 MB one in a fraction of the time). Restored after."""

    def __enter__(self):
        import gc

        self.was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc) -> None:
        import gc

        if self.was:
            gc.enable()


def _deep(work):
    """Run `work` in a thread with a large stack and recursion limit: valid Python with a
    500-term expression or a long elif chain is deeper than the default limit of the tree walk."""
    import sys
    import threading

    result: dict = {}

    def run() -> None:
        old = sys.getrecursionlimit()
        try:
            sys.setrecursionlimit(max(old, 50_000))
            result["value"] = work()
        except BaseException as exc:  # re-raised in the caller's thread
            result["error"] = exc
        finally:
            sys.setrecursionlimit(old)

    size = threading.stack_size()
    try:
        try:
            threading.stack_size(512 * 1024 * 1024)
        except (ValueError, RuntimeError):  # a platform that refuses the size: the default stack
            pass
        t = threading.Thread(target=run, name="gpurig-lint")
        t.start()
    finally:
        threading.stack_size(size)
    t.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


def project_configs(folder) -> list[tuple[str, object, str]]:
    """(path from the script's folder, parsed data, text) of the JSON and YAML configs shipped beside a script: in its folder,
    or in a folder of it named config* (config/, configs/, configs_template/) and the folders just
    below that (config/acdc/); 50 files a folder, under 1 MB each. YAML is read where PyYAML is
    installed (safe_load); what cannot be read is left out."""
    import json
    from pathlib import Path

    if folder is None:
        return []
    out = []
    folders = [Path(folder)]
    try:
        tops = sorted(d for d in Path(folder).glob("config*") if d.is_dir())[:5]
        folders += [f for top in tops for f in (top, *sorted(d for d in top.iterdir() if d.is_dir())[:20])]
    except OSError:
        pass
    yaml = None
    for d in folders:
        try:
            files = sorted(f for f in d.iterdir() if f.suffix in (".json", ".yaml", ".yml"))[:50]
        except OSError:
            continue
        if yaml is None and any(f.suffix != ".json" for f in files):
            try:
                import yaml  # (imported only where there is YAML to read: 10 ms of every lint otherwise)
            except ImportError:  # (optional: without it, JSON only)
                yaml = False
        files = [f for f in files if f.suffix == ".json" or yaml]
        unreadable = (OSError, ValueError, yaml.YAMLError) if yaml else (OSError, ValueError)
        for f in files:
            try:
                if f.stat().st_size < 1_000_000:
                    text = f.read_text(encoding="utf-8")
                    data = json.loads(text) if f.suffix == ".json" else yaml.safe_load(text)
                    out.append((f.relative_to(folder).as_posix(), data, text))
            except unreadable:
                continue
    return out


_SH_VARIABLE = re.compile(r"""^\s*(?:export\s+)?([A-Za-z_]\w*)=("[^"\n]*"|'[^'\n]*'|[^\s#;]*)""", re.M)
_SH_OPTION = re.compile(r"""--([A-Za-z][\w-]*)(?:=|[ \t]+)("[^"\n]*"|'[^'\n]*'|[^\s\\;]+)""")


def shipped_options(folder) -> dict[str, set[str]]:
    """The values the shell scripts shipped with a script give its options (`--model_name_or_path
    ./checkpoints/deplot`, or `$model_name_or_path` set earlier in the file): option (as its
    attribute name, `model_name_or_path`) -> every value given. Read from the .sh files in the
    script's folder and the two above it (the project's root, as its imports are looked for), and a
    scripts/ folder of each (30 files, under 200 kB each); commented-out launch lines count, as the
    project's documentation of its launch."""
    from pathlib import Path

    from gpurig.diagnose.lint_modules import _folders_up

    if folder is None:
        return {}
    base = Path(folder)
    files: list = []
    for d in (root / sub for root in _folders_up(base) for sub in ("", "scripts")):
        try:
            files += sorted(f for f in d.glob("*.sh") if f.is_file() and f.stat().st_size < 200_000)
        except OSError:
            continue
    out: dict[str, set[str]] = {}
    for f in files[:30]:
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        variables = {name: value.strip("\"'") for name, value in _SH_VARIABLE.findall(text)}
        for option, value in _SH_OPTION.findall(text):
            value = value.strip("\"'")
            name = re.fullmatch(r"\$\{?(\w+)\}?", value)
            value = variables.get(name.group(1), value) if name else value
            out.setdefault(option.replace("-", "_"), set()).add(value)
    return out
