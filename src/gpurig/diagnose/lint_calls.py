"""Calls read the same way whatever their spelling, for `gpurig lint`: the scanner and the project's
modules put each call in one form before any rule looks at it."""

from __future__ import annotations

import ast
import re

from gpurig.diagnose.lint_nodes import _dotted, _kw, _name_of

# absl's flag definitions: DEFINE_string("master_port", "12355", "help"), DEFINE_integer(...), ...
_ABSL_DEFINE = re.compile(r"DEFINE_(?:string|integer|float|bool|boolean|enum|list|multi_string|multi_integer|multi_float)")


def normalize_call(call: ast.Call) -> None:
    """Put `call` in the form the rules read (in place)."""
    _positional_open(call)
    _absl_flag_as_option(call)


def _positional_open(call: ast.Call) -> None:
    """`open(file=path, mode="a")` read as `open(path, "a")`: the rules look at its first two arguments."""
    if isinstance(call.func, ast.Name) and call.func.id == "open" and len(call.args) < 2:
        for i, name in enumerate(("file", "mode")):
            kw = _kw(call, name)
            if kw is not None and len(call.args) == i:
                call.args.append(kw.value)
                call.keywords.remove(kw)


def _absl_flag_as_option(call: ast.Call) -> None:
    """absl's `flags.DEFINE_string("master_port", "12355", "help")` read as the command-line option it
    defines, `flags.add_argument("--master_port", default="12355")`: the rules read an option's
    default from add_argument, and its value from `FLAGS.master_port` as from `args.master_port`."""
    if not _ABSL_DEFINE.fullmatch(_name_of(_dotted(call.func))):
        return
    flag = call.args[0] if call.args else getattr(_kw(call, "name"), "value", None)
    default = call.args[1] if len(call.args) > 1 else getattr(_kw(call, "default"), "value", None)
    if not (isinstance(flag, ast.Constant) and isinstance(flag.value, str)):
        return
    call.func = ast.copy_location(ast.Attribute(value=ast.Name(id="flags", ctx=ast.Load()), attr="add_argument", ctx=ast.Load()),
                                  call.func)
    call.args = [ast.copy_location(ast.Constant(value="--" + flag.value), flag)]
    call.keywords = [] if default is None else [ast.copy_location(ast.keyword(arg="default", value=default), default)]
