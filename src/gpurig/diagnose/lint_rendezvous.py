"""Rendezvous settings the script's project fixes, as `gpurig lint` reads them: a MASTER_PORT or
tcp:// address set in the project's modules, or in the configs it ships (JSON, YAML)."""

from __future__ import annotations

import ast
import re
from typing import Any

from gpurig.diagnose.lint_growth import _grown, _origin
from gpurig.diagnose.lint_modules import _at
from gpurig.diagnose.lint_nodes import (
    _call_params,
    _calls_function,
    _constant_defaults,
    _dotted,
    _init_method,
    _kw,
    _name_of,
    _passes,
    _rebound,
    _setting_name,
    _unwrapped,
    _worker_started,
)

_BUILDS_RENDEZVOUS = re.compile(r"tcp://|MASTER_PORT|MASTER_ADDR|init_method|master_port|dist_url")


def option_uses(text: str, dest: str, here: str) -> str:
    """Where the script builds its rendezvous from option `dest` (`f"tcp://127.0.0.1:{args.port}"`,
    `os.environ["MASTER_PORT"] = str(args.port)`), as a title's ending: " (used at train.py:538)"."""
    if not dest:
        return ""
    uses = re.compile(rf"\.{re.escape(dest)}\b")
    lines = [n for n, line in enumerate(text.splitlines(), 1)
             if uses.search(line) and _BUILDS_RENDEZVOUS.search(line) and "add_argument" not in line]
    # (handed to a set-up function first, `mp.spawn(run, args=(world, args.master_port))`: where that
    # function puts its port parameter into the environment, `os.environ["MASTER_PORT"] = master_port`)
    if "port" in dest and any(re.search(rf"\(.*\.{re.escape(dest)}\b", line) for line in text.splitlines()):
        parameters = {p for params in re.findall(r"^\s*def\s+\w+\s*\(([^)]*)\)", text, re.M) for p in re.findall(r"\w+", params)}
        lines = sorted({*lines, *(n for n, line in enumerate(text.splitlines(), 1)
                                  if (m := _PORT_FROM_PARAMETER.search(line)) and m.group(1) in parameters)})
    return f" (used at {', '.join(f'{here}:{n}' for n in lines[:3])})" if lines else ""


def _port_param(value: ast.AST, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, int, Any] | None:
    """(parameter, its position in a call, its default port or None) of the parameter of `fn` a
    MASTER_PORT value is made of (`port`, `str(port)`, f"{port}"); None where it is none, where its
    default is not a port number, or where the function sets it again (`port = os.environ.get("PORT", port)`)."""
    if isinstance(value, ast.Call) and _dotted(value.func) == "str" and len(value.args) == 1:
        value = value.args[0]
    elif isinstance(value, ast.JoinedStr) and len(value.values) == 1 and isinstance(value.values[0], ast.FormattedValue):
        value = value.values[0].value
    params = _call_params(fn)
    if not isinstance(value, ast.Name) or value.id not in params or value.id in _rebound(fn):
        return None
    default = _constant_defaults(fn).get(value.id)
    return (value.id, params.index(value.id), default) if default is None or _port_number(default) else None


def _port_number(value: Any) -> bool:
    """A port number as a literal holds it: 12355 or "12355"."""
    return isinstance(value, int) and not isinstance(value, bool) and 1000 <= value < 65536 \
        or isinstance(value, str) and re.fullmatch(r"\d{4,5}", value) is not None


def _given_port(call: ast.Call, param: str, index: int, default: Any) -> str | None:
    """The fixed port a call of a function that sets MASTER_PORT from `param` makes it use, as said:
    the literal the call gives (`init_dist(port=23300)`), or the fixed default it leaves; None otherwise."""
    port = _literal_port(call, param, index)
    if port is not None:
        return repr(port)
    return f"its default {default!r}" if default is not None and not _passes(call, param, index) else None


def _literal_port(call: ast.Call, param: str, index: int) -> Any:
    """The fixed port a call gives the parameter (`setup(port=23300)`, `setup(rank, 12355)`), or None."""
    given = _kw(call, param)
    value = given.value if given is not None else call.args[index] if len(call.args) > index \
        and not any(isinstance(a, ast.Starred) for a in call.args[:index + 1]) else None
    return value.value if isinstance(value, ast.Constant) and _port_number(value.value) else None


_PORT_FROM_PARAMETER = re.compile(r"""MASTER_PORT['"]\]\s*=\s*(?:str\(\s*)?(\w*port\w*)\s*\)?\s*(?:#.*)?$""", re.I)


def _fixed_port_functions(modules: list) -> dict[str, tuple[str, int, int, str, object]]:
    """Functions of the project's own modules that set MASTER_PORT from a parameter: name -> (parameter,
    its position, the line of the assignment, "file:line", its fixed default or None)."""
    out: dict[str, tuple[str, int, int, str, object]] = {}
    for module in modules:
        for fn in ast.walk(module):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for n in ast.walk(fn):
                if isinstance(n, ast.Assign) and any(
                        isinstance(t, ast.Subscript) and _dotted(t.value).endswith("environ") and isinstance(t.slice, ast.Constant)
                        and t.slice.value == "MASTER_PORT" for t in n.targets):
                    found = _port_param(n.value, fn)
                    if found is not None:
                        param, index, default = found
                        out[fn.name] = (param, index, n.lineno, _at(module, n.lineno), default)
    return out


def fixed_port_sites(function: str, param: str, index: int, default, calls: list) -> tuple[ast.Call | None, str] | None:
    """Where a function that sets MASTER_PORT from its parameter `param` gets a fixed port: (the call,
    the port as said) for a call that gives it a literal (`init_dist(port=23300)`, or in the `args`
    of an `mp.spawn` of it, after the process index), or (None, its default) where every call
    leaves the fixed default (or none is seen); None where the port can come from elsewhere."""
    sites = [c for c, f, _ in calls if _calls_function(f, function)]
    for c in sites:
        port = _literal_port(c, param, index)
        if port is not None:
            return c, f"{port!r}, given at line {c.lineno}"
    for c, f, _ in calls:  # mp.spawn(worker, args=(world_size, 12355)): the worker gets (index, *args);
        spawned, target = _kw(c, "args"), _kw(c, "target")  # Process(target=run, args=(rank, size, 29500)): args
        shift = 1 if _name_of(f) == "spawn" else 0
        named = _name_of(_dotted(c.args[0])) if shift and c.args else _name_of(_dotted(target.value)) if target else ""
        if _name_of(f) in ("spawn", "Process") and named == function and spawned is not None \
                and isinstance(spawned.value, ast.Tuple) and 0 <= index - shift < len(spawned.value.elts):
            given = spawned.value.elts[index - shift]
            if isinstance(given, ast.Constant) and _port_number(given.value):
                return c, f"{given.value!r}, given at line {c.lineno}"
    if default is not None and (not sites or any(not _passes(c, param, index) for c in sites)):
        return None, f"its default {default!r}"
    return None


_TCP_FIXED = re.compile(r"tcp://[^:/\s]+:\d{2,5}/?$")


def joined_text(value: ast.AST | None, known) -> str | None:
    """The text of `f"tcp://{master_addr}:{master_port}"` where `known(name)` gives each name's one
    constant value (a string or a number); None where any part is not such a constant."""
    if not isinstance(value, ast.JoinedStr):
        return None
    parts = []
    for v in value.values:
        if isinstance(v, ast.Constant):
            parts.append(str(v.value))
        elif isinstance(v, ast.FormattedValue) and v.format_spec is None and v.conversion == -1 and isinstance(v.value, ast.Name):
            c = known(v.value.id)
            if not isinstance(c, (str, int)) or isinstance(c, bool):
                return None
            parts.append(str(c))
        else:
            return None
    return "".join(parts)


def _bound_once(fn: ast.AST) -> dict[str, Any]:
    """The names a function binds once, to a constant string or number (`master_port = 8237`)."""
    counts: dict[str, int] = {}
    values: dict[str, Any] = {}
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            counts[n.id] = counts.get(n.id, 0) + 1
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) \
                and isinstance(n.value, ast.Constant) and isinstance(n.value.value, (str, int)):
            values[n.targets[0].id] = n.value.value
    return {k: v for k, v in values.items() if counts.get(k) == 1}


def _fixed_init_functions(modules: list, settings: dict[str, str] | None = None, ports: dict[str, str] | None = None) -> dict[str, str]:
    """Functions of the project's own modules that start the process group on a fixed tcp:// address
    (`init_method='tcp://localhost:10000'`, or a local name given one), or on a setting the project
    fixes (`settings`, see `_fixed_rendezvous_settings`: `init_method=h.dist_config['dist_url']` with
    "tcp://localhost:54321" in every shipped config): name -> where."""
    out: dict[str, str] = {}
    for module in modules:
        for fn in ast.walk(module):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            # (a local name given the address: `dist_init_method = 'tcp://localhost:10000'`, named where it is fixed)
            literals = {t.id: n.value for n in ast.walk(fn) if isinstance(n, ast.Assign)
                        and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                        for t in n.targets if isinstance(t, ast.Name)}
            once = None
            for n in ast.walk(fn):
                value = _init_method(n) if isinstance(n, ast.Call) and _name_of(_dotted(n.func)) == "init_process_group" else None
                literal = value if isinstance(value, ast.Constant) else literals.get(getattr(value, "id", None))
                if isinstance(value, ast.JoinedStr):  # (`f"tcp://{master_addr}:{master_port}"`, both set once to constants)
                    once = _bound_once(fn) if once is None else once
                    joined = joined_text(value, once.get)
                    if joined is not None and _TCP_FIXED.match(joined):
                        out[fn.name] = f"{joined!r} at {_at(module, n.lineno)}"
                if literal is not None and isinstance(literal.value, str) and _TCP_FIXED.match(literal.value):
                    out[fn.name] = f"{literal.value!r} at {_at(module, literal.lineno)}"
                elif value is not None and settings and _setting_name(value) in settings:
                    out[fn.name] = f"its {_setting_name(value)} setting at {_at(module, n.lineno)}, fixed to {settings[_setting_name(value)]}"
            # `os.environ['MASTER_PORT'] = '8964'`, unless only where the launcher left it unset
            unset = {id(x) for n in ast.walk(fn) if isinstance(n, ast.If) and "MASTER_PORT" in ast.dump(n.test)
                     for b in n.body + n.orelse for x in ast.walk(b)}
            for n in ast.walk(fn):
                if isinstance(n, ast.Assign) and id(n) not in unset and isinstance(n.value, ast.Constant) \
                        and re.fullmatch(r"\d{4,5}", str(n.value.value)) and any(
                        isinstance(t, ast.Subscript) and _dotted(t.value).endswith("environ") and isinstance(t.slice, ast.Constant)
                        and t.slice.value == "MASTER_PORT" for t in n.targets):
                    out.setdefault(fn.name, f"MASTER_PORT = {n.value.value!r} at {_at(module, n.lineno)}")
                # (`os.environ["MASTER_PORT"] = str(H.port)`, the project's parser fixing --port: `ports`)
                elif isinstance(n, ast.Assign) and id(n) not in unset and isinstance(_unwrapped(n.value), ast.Attribute) \
                        and _unwrapped(n.value).attr in (ports or {}) and any(
                        isinstance(t, ast.Subscript) and _dotted(t.value).endswith("environ") and isinstance(t.slice, ast.Constant)
                        and t.slice.value == "MASTER_PORT" for t in n.targets):
                    out.setdefault(fn.name, f"MASTER_PORT = its {_unwrapped(n.value).attr} setting at {_at(module, n.lineno)}, "
                                            f"fixed to {ports[_unwrapped(n.value).attr]}")
    # ... a call of a function that sets MASTER_PORT to its parameter, given a fixed port or leaving a fixed
    # default (`_init_process_group(rank, world_size)` with `master_port='10086'`) ...
    ports = _fixed_port_functions(modules)
    for module in modules:
        for fn in ast.walk(module):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name not in out:
                for n in ast.walk(fn):
                    short = _name_of(_dotted(n.func)) if isinstance(n, ast.Call) else ""
                    if short in ports:
                        param, index, _, where, default = ports[short]
                        said = _given_port(n, param, index, default)
                        if said is not None:
                            out[fn.name] = f"{short}() at {_at(module, n.lineno)}: MASTER_PORT = its {param} at {where}, {said}"
                            break
    # ... and the project's functions that call one or start workers that do (`train_abs()` ->
    # `mp.Process(target=run)` -> `distributed.multi_init()`).
    _grown(modules, out)
    return out
_RENDEZVOUS_KEY = re.compile(r"dist_?url|init_?method", re.IGNORECASE)


def _fixed_rendezvous_settings(modules: list, configs=()) -> dict[str, str]:
    """Settings of the project that fix the rendezvous address: a `dist_url` / `init_method` given a
    literal `tcp://host:port` in its own modules (a default, an assignment, a dict entry) or in the
    JSON configs shipped beside the script: key -> where. A script passing that setting as
    init_method starts every run on the same port."""
    out: dict[str, str] = {}
    for module in modules:
        for n in ast.walk(module):
            pairs = []
            if isinstance(n, ast.keyword) and n.arg:
                pairs.append((n.arg, n.value))
            elif isinstance(n, (ast.Assign, ast.AnnAssign)):
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                    leaf = _dotted(t).rpartition(".")[2]
                    if leaf and n.value is not None:
                        pairs.append((leaf, n.value))
            elif isinstance(n, ast.Dict):
                pairs += [(k.value, v) for k, v in zip(n.keys, n.values, strict=False)
                          if isinstance(k, ast.Constant) and isinstance(k.value, str)]
            elif isinstance(n, ast.Call) and _name_of(_dotted(n.func)) == "add_argument" and _kw(n, "default"):
                # `parser.add_argument('--dist_url', default='tcp://127.0.0.1:23456')` in the project's opts.py
                pairs += [(a.value.lstrip("-").replace("-", "_"), _kw(n, "default").value) for a in n.args
                          if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")]
            for key, value in pairs:
                if _RENDEZVOUS_KEY.fullmatch(key) and isinstance(value, ast.Constant) and isinstance(value.value, str) \
                        and _TCP_FIXED.match(value.value):
                    out.setdefault(key, f"{value.value!r} at {_at(module, value.lineno)}")  # (the line of the value)
    out.update({k: v for k, v in _json_rendezvous(configs).items() if k not in out})
    return out


def _passed_settings(calls: list, defined: set[str], modules: list) -> dict[int, str]:
    """id(call) -> the setting it passes as the rendezvous: `init_process_group(init_method=args.dist_url)`,
    or a project function given it (`launch_job(cfg, init_method=args.init_method, func=train)`)."""
    passed = {id(c): (_name_of(f), _setting_name(value)) for c, f, _ in calls if _name_of(f) not in defined
              for value in ([_init_method(c)] if _name_of(f) == "init_process_group" else
                            [k.value for k in c.keywords if k.arg in ("init_method", "dist_url")])
              if value is not None and _setting_name(value)}
    own = {n.name for m in modules for n in ast.walk(m) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))} \
        if any(short != "init_process_group" for short, _ in passed.values()) else set()
    return {k: setting for k, (short, setting) in passed.items() if short == "init_process_group" or short in own}


def _fixed_option_names(calls: list) -> set[str]:
    """The options a script's own argparse defaults to a fixed address or port (`--dist-url
    tcp://127.0.0.1:11111`, `--port 12355`), by attribute name (`dist_url`)."""
    return {a.value.lstrip("-").replace("-", "_") for c, f, _ in calls if _name_of(f) == "add_argument"
            and _kw(c, "default") is not None and isinstance(_kw(c, "default").value, ast.Constant)
            and re.match(r"tcp://[^:]+:\d+$|\d{4,5}$", str(_kw(c, "default").value.value))
            for a in c.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}


def _config_line(text: str, key: str, value) -> int | None:
    """The line of a config's text that sets `key` to `value` (the first line naming both)."""
    for i, line in enumerate(text.splitlines(), 1):
        if key in line and str(value) in line:
            return i
    return None


def _fixed_in_configs(configs, names, fixed) -> dict[str, str]:
    """Keys of the configs shipped with the script (`configs`: (path, parsed data, text) triples, see
    lint_read.project_configs) that `names(key, value)` picks, at any depth, and that every config
    naming them fixes (`fixed(value)`): key -> "value at file:line" for each config (three at most)."""
    found: dict[str, list[str]] = {}
    for name, data, text in configs:
        stack = [data]
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                for k, v in item.items():
                    if isinstance(k, str) and not isinstance(v, (dict, list)) and names(k, v):
                        line = _config_line(text, k, v) if fixed(v) else None
                        where = f"at {name}:{line}" if line else f"in {name}"
                        found.setdefault(k, []).append(f"{v!r} {where}" if fixed(v) else "")
                    stack.append(v)
            elif isinstance(item, list):
                stack.extend(item)
    return {k: "; ".join(v[:3]) + (f" and {len(v) - 3} more" if len(v) > 3 else "") for k, v in found.items() if all(v)}


def _json_rendezvous(configs) -> dict[str, str]:
    """`"dist_url": "tcp://localhost:54321"`: a rendezvous key, or any key holding a tcp:// address
    (`"distributed": {"url": "tcp://..."}`), fixed in every shipped config that names it."""
    return _fixed_in_configs(
        configs, lambda k, v: isinstance(v, str) and (_RENDEZVOUS_KEY.fullmatch(k) is not None or v.startswith("tcp://")),
        lambda v: _TCP_FIXED.match(v) is not None)


_PORT_KEY = re.compile(r"(?:master_?|dist_?)?port", re.IGNORECASE)


def _json_ports(configs) -> dict[str, str]:
    """`"port": "8001"` (a number or a string of one) fixed in every shipped config that names it. A
    script setting MASTER_PORT from that setting (`os.environ["MASTER_PORT"] = hps.train.port`)
    starts every run on the same port."""
    return _fixed_in_configs(configs, lambda k, v: _PORT_KEY.fullmatch(k) is not None,
                             lambda v: not isinstance(v, bool) and re.fullmatch(r"\d{4,5}", str(v)) is not None)


def script_options(calls: list) -> set[str]:
    """The options the script's own parser gives (`add_argument("--port", required=True)` -> "port")."""
    return option_names(c for c, _, _ in calls)


def option_names(nodes) -> set[str]:
    """The options the `add_argument` calls among `nodes` give, as attribute names ("--dist-url" -> "dist_url")."""
    return {a.value[2:].replace("-", "_") for c in nodes if isinstance(c, ast.Call) and _name_of(_dotted(c.func)) == "add_argument"
            for a in c.args if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--")}


def port_settings(modules: list, configs, value: ast.AST, own_options=frozenset()) -> dict[str, str]:
    """The port settings the project fixes, for a MASTER_PORT given `value`: setting -> the port, as
    said: in every shipped config (`_json_ports`), or, for an option read as an attribute
    (`args.master_port`), as the default of the option its own modules' parser gives
    (`parser.add_argument("--master_port", default='12355')` in utils.py), unless the script gives
    that option itself (`own_options`)."""
    out = _json_ports(configs())
    if isinstance(_unwrapped(value), ast.Attribute):
        for key, said in _parser_ports(modules, own_options).items():
            out.setdefault(key, said)
    return out


def tcp_port_setting(value: ast.AST, modules: list, calls: list, source: str, target: str) -> tuple[str, str] | None:
    """(title, fix) of the finding for `target = f"tcp://127.0.0.1:{args.port}"`, where the project's
    own parser defaults --port to a fixed port (AOT-GAN's utils/option.py); else None. Not where the
    script gives the option itself, or sets it again (`args.port = find_free_port()`)."""
    if not (isinstance(value, ast.JoinedStr) and value.values and isinstance(value.values[-1], ast.FormattedValue)):
        return None
    text = "".join(v.value for v in value.values if isinstance(v, ast.Constant))
    port = _unwrapped(value.values[-1].value)
    setting = _setting_name(port)
    if not (text.startswith("tcp://") and text.endswith(":")) or not isinstance(port, ast.Attribute) or setting is None \
            or _set_again(setting, source):
        return None
    ports = _parser_ports(modules, script_options(calls))
    if setting not in ports:
        return None
    return (f"{target} takes its port from the {setting} setting, fixed to {ports[setting]}: a second job fails with "
            "'Address already in use'", "Take the port from the environment (MASTER_PORT set by the launcher) or default "
            "the setting to a free one.")


def fixed_option_default(call: ast.Call, scan, names: set[str], modules: list, text: str, here: str) -> tuple[ast.AST, str] | None:
    """A rendezvous option of `parser.add_argument(...)` with a fixed default, as (the default, what
    a finding says): --dist-url/--master-port/--init-method, or a plain --port in a script that
    builds its own tcp:// address from it. Not an option nothing reads (`option_unread`), nor one
    the script sets again (`args.port = random.randint(...)`: its default is not what runs)."""
    if not any(isinstance(a, ast.Constant) and isinstance(a.value, str) and (
            re.search(_OPTION_CHECKED, a.value) or (re.fullmatch(r"--?(?:\w+[-_])?port", a.value) and _BUILDS_TCP.search(text)))
            for a in call.args):
        return None
    default = _kw(call, "default")  # ("tcp://127.0.0.1:23456", "29500", or the number 29500)
    dest = next((a.value.lstrip("-").replace("-", "_") for a in call.args if str(a.value).startswith("--")), "")
    if dest and (option_unread(dest, scan, names, modules, text) or _set_again(dest, text)):
        return None
    if default is not None and isinstance(default.value, ast.Constant) and not isinstance(default.value.value, bool) \
            and re.match(r"tcp://[^:]+:\d+$|\d{4,5}$|[\w.-]+:\d{4,5}$", str(default.value.value)):
        return default.value, (f"the rendezvous default {default.value.value!r} is fixed: two jobs on one machine collide "
                               f"('Address already in use'){option_uses(text, dest, here)}")
    return None


def option_unread(dest: str, scan, names: set[str], modules: list, text: str) -> bool:
    """Whether nothing reads the argparse option `dest`: no `args.<dest>` in the script or the project's
    modules, and its name in no string (`getattr(args, "<dest>")`, `opt["<dest>"]` after `opt =
    vars(args)`); with `vars(args)` or `args.__dict__`, the options are not splatted into a call either
    (`main(**vars(args))`). A local variable of the same name is not the option (`master_port =
    os.getenv("MASTER_PORT", "6600")`)."""
    if dest in scan.attributes or re.search(rf"""['"]{re.escape(dest)}['"]""", text):
        return False
    if any(isinstance(n, ast.Attribute) and n.attr == dest or isinstance(n, ast.Constant) and n.value == dest
           for m in modules for n in ast.walk(m)):
        return False
    return not (("vars" in names or "__dict__" in scan.referenced) and re.search(r"[(,]\s*\*\*\s*[\w(]", text))


def _set_again(setting: str, source: str) -> bool:
    """The script sets the option again (`args.port = find_free_port()`): its default is not what runs.
    Not a copy of the option itself (`args.dist_url = run_args.dist_url`)."""
    name = re.escape(setting)
    return re.search(rf"\.{name}\s*=(?!=)(?![^\n]*\b{name}\b)", source) is not None


def _port_option(call: ast.Call) -> tuple[str, object, str] | None:
    """(option name, fixed port, "--flag") of `add_argument("--port", default=12355)`; None otherwise."""
    default = _kw(call, "default").value if _name_of(_dotted(call.func)) == "add_argument" and _kw(call, "default") is not None else None
    port = default.value if isinstance(default, ast.Constant) and not isinstance(default.value, bool) else None
    flag = next((a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--")), None)
    return (flag[2:].replace("-", "_"), port, flag) if flag and re.fullmatch(r"\d{4,5}", str(port)) else None


def own_ports(calls: list, text: str, here: str = "") -> dict[str, str]:
    """The script's own options that default to a fixed port (`parser.add_argument("-p", "--port",
    default=12355)`): option -> the port, as said (at `here`:line, the script's name, where given: the
    finding then names the default's place too). Not those the option's own check reports already
    (`--master_port`, `--dist-port`, or a `--port` the script builds a tcp:// address from)."""
    out: dict[str, str] = {}
    for c, _, _ in [] if _BUILDS_TCP.search(text) else calls:
        found = _port_option(c)
        if found is not None and not re.search(_OPTION_CHECKED, found[2]):
            out[found[0]] = f"{found[1]!r} (the default of its {found[2]} option at {f'{here}:' if here else 'line '}{c.lineno})"
    return out


# The options whose fixed default the add_argument check of lint_checks reports itself.
_OPTION_CHECKED = r"dist[-_](?:url|port|addr)|master[-_](?:port|ip|addr)|init[-_]method"
# A tcp:// address the script puts together itself: 'tcp://' + ip + ':' + port, f"tcp://{ip}:{port}".
_BUILDS_TCP = re.compile(r"""['"]tcp://[\w.\-]*:?(?:['"{%]|$)""", re.M)


def _parser_ports(modules: list, own_options=frozenset()) -> dict[str, str]:
    """The options the project's own parsers give a fixed port as default (`--port`, default 29500 in
    hps.py), but those the script gives itself: option -> the port, as said."""
    out: dict[str, str] = {}
    for m in modules:
        for n in ast.walk(m):
            found = _port_option(n) if isinstance(n, ast.Call) else None
            if found is not None and found[0] not in own_options:
                out.setdefault(found[0], f"{found[1]!r} (the default of its {found[2]} option at {_at(m, n.lineno)})")
    return out


def _module_constants(modules: list) -> dict[str, tuple]:
    """The constants the project's modules set at their top level (`MASTER_PORT = "12345"` in
    config/setting.py): name -> (value, "file:line")."""
    return {t.id: (n.value.value, _at(m, n.lineno)) for m in modules for n in getattr(m, "body", [])
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) for t in n.targets if isinstance(t, ast.Name)}


def report_helpers(modules: list, configs, text: str, names: set[str], calls: list, defined: set[str], add,
                   settings: dict[str, set] | None = None, here: str = "") -> None:
    """The project's own functions called by the script that start the group on a fixed address (a
    literal, a setting every shipped config fixes, or one the script itself fixes: a config class's
    `init_method: str = 'tcp://127.0.0.1:23456'`, `settings`) or set MASTER_PORT to a fixed default:
    one finding each, at the first call. `configs()` reads the shipped configs (only where needed)."""
    port_helpers = _fixed_port_functions(modules) if "MASTER_PORT" not in text else {}
    init_helpers = {}
    if "init_process_group" not in names:
        fixed = _fixed_rendezvous_settings(modules, configs())
        for key, values in (settings or {}).items():
            if _RENDEZVOUS_KEY.fullmatch(key) and key not in fixed and values and all(
                    isinstance(v, str) and _TCP_FIXED.match(v) for v in values):
                value = sorted(values)[0]
                at = text.find(repr(value)[1:-1])  # (the line the script fixes it at, named in the finding)
                fixed[key] = f"{value!r} at {here}:{text.count(chr(10), 0, at) + 1}" if at >= 0 and here else f"{value!r} in the script"
        init_helpers = _fixed_init_functions(modules, fixed, _parser_ports(modules, script_options(calls)))
    elif "MASTER_PORT" not in text:
        # the script starts the group itself, from the environment a helper fixed first
        # (`DistributedEnviron()`, whose `__init__` sets `os.environ['MASTER_PORT'] = '39591'`)
        init_helpers = {k: v for k, v in _fixed_init_functions(modules).items() if "MASTER_PORT" in _origin(v)}
    for call, func, _ in calls:
        # (called, or started as the workers: `mp.spawn(train.init_processes, ...)`, `Process(target=run)`)
        worker = _worker_started(call) if init_helpers else None
        short = next((s for s in (_name_of(func), _name_of(_dotted(worker)) if worker is not None else "")
                      if s in init_helpers and s not in defined), None)
        if short is not None:
            port = "MASTER_PORT" in _origin(init_helpers[short])
            add("hard-coded-rendezvous", call, f"{short}() {'fixes the rendezvous port' if port else 'starts the process group on a fixed address'} "
                f"({init_helpers[short]}): two jobs on one machine collide", f"Let {short}() " + (
                    "leave MASTER_PORT to the launcher, or pick a free port." if port else "use env:// (MASTER_ADDR/MASTER_PORT from the launcher)."))
            break
    for call, func, _ in calls:
        short = _name_of(func)
        if short in port_helpers and short not in defined:
            param, index, line, _, default = port_helpers[short]
            said = _given_port(call, param, index, default)
            if said is not None:
                add("hard-coded-rendezvous", call, f"{short}() sets MASTER_PORT to a fixed port, {said} "
                    f"(its {param}, line {line} of its module): two jobs on one machine collide",
                    f"Pass a free port, or let {short}() take MASTER_PORT from the launcher.")
                break
    _report_tcp_port_params(modules, calls, defined, add, text)


def _tcp_port_param(value: ast.AST | None, params: list[str]) -> str | None:
    """The parameter a tcp:// address on a fixed host takes its port from: `'tcp://127.0.0.1:%d' % tcp_port`,
    f"tcp://localhost:{port}", `'tcp://127.0.0.1:{}'.format(port)`; None otherwise."""
    text, port = None, None
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mod) and isinstance(value.left, ast.Constant):
        text, port = value.left.value, value.right
    elif isinstance(value, ast.JoinedStr) and len(value.values) == 2 and isinstance(value.values[0], ast.Constant) \
            and isinstance(value.values[1], ast.FormattedValue):
        text, port = str(value.values[0].value) + "{}", value.values[1].value
    elif isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "format" \
            and isinstance(value.func.value, ast.Constant) and len(value.args) == 1:
        text, port = value.func.value.value, value.args[0]
    if isinstance(text, str) and re.fullmatch(r"tcp://[\w.\-]+:(?:%[ds]|\{\})", text) and isinstance(port, ast.Name) and port.id in params:
        return port.id
    return None


def _tcp_port_functions(modules: list) -> dict[str, tuple[str, int, str]]:
    """Functions of the project's own modules that start the group on a fixed host, on the port a
    parameter gives (OpenPCDet's `init_dist_pytorch(tcp_port, local_rank)`): name -> (parameter, its
    position, "file:line")."""
    out: dict[str, tuple[str, int, str]] = {}
    for module in modules:
        for fn in ast.walk(module):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                params, rebound = _call_params(fn), _rebound(fn)
                for n in ast.walk(fn):
                    if isinstance(n, ast.Call) and _name_of(_dotted(n.func)) == "init_process_group":
                        address = _init_method(n)
                        param = _tcp_port_param(address, params)
                        if param is not None and param not in rebound:  # (not `tcp_port = os.environ.get(...)`; the address's line)
                            out[fn.name] = (param, params.index(param), _at(module, address.lineno))
    return out


def _called_functions(call: ast.Call) -> tuple[str, str]:
    """(name, "") of a call of a named function, or ("", prefix) of `getattr(common_utils, 'init_dist_%s'
    % args.launcher)(...)`: any function of that prefix."""
    func = call.func
    if isinstance(func, ast.Call) and _dotted(func.func) == "getattr" and len(func.args) == 2:
        name = func.args[1]
        if isinstance(name, ast.BinOp) and isinstance(name.left, ast.Constant) and isinstance(name.left.value, str):
            return "", name.left.value.partition("%")[0]
        if isinstance(name, ast.JoinedStr) and name.values and isinstance(name.values[0], ast.Constant):
            return "", str(name.values[0].value)
        return "", ""
    return _name_of(_dotted(func)), ""


def _report_tcp_port_params(modules: list, calls: list, defined: set[str], add, text: str) -> None:
    """The script hands the project's function that starts the group on `tcp://127.0.0.1:<port>` the
    port of an option defaulted to a fixed one (`--tcp_port`, default 18888): one finding, at the call.
    Not where the script's own parser gives the option another default, or the script sets it again."""
    functions = _tcp_port_functions(modules)
    if not functions:
        return
    options = {found[0]: f"{found[1]!r} (the default of its {found[2]} option at line {c.lineno})"
               for c, _, _ in calls if (found := _port_option(c)) is not None}
    for key, said in _parser_ports(modules, script_options(calls)).items():
        options.setdefault(key, said)
    for call, _, _ in calls:
        name, prefix = _called_functions(call)
        chosen = [name] if name in functions and name not in defined else [
            f for f in functions if prefix and f.startswith(prefix) and f not in defined]
        for fn in chosen:
            param, index, at = functions[fn]
            given = _kw(call, param)
            value = given.value if given is not None else call.args[index] if len(call.args) > index else None
            setting = _setting_name(value) if isinstance(value, ast.Attribute) else None
            if setting in options and not _set_again(setting, text):
                add("hard-coded-rendezvous", call, f"{fn}() starts the process group on a fixed tcp:// address ({at}), on the "
                    f"port of the {setting} setting, fixed to {options[setting]}: two jobs on one machine collide",
                    f"Let {fn}() use env:// (MASTER_ADDR/MASTER_PORT from the launcher), or default the setting to a free port.")
                return
