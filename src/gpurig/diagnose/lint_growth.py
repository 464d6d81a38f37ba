"""How `gpurig lint` follows what a project helper does through the project's own code: a function
that calls one that downloads (saves, loads...) does it too, and so does building a class whose
`__init__` does; each finding names every place of the chain ("through a() at x.py:3: ...").
The lines of a helper that do not run on every rank (`_guarded_lines`) are left out of it.
"""

from __future__ import annotations

import ast
import os
import re

from gpurig.diagnose.lint_guards import _mentions_rank, _single_process_branch, runs_on_main_only
from gpurig.diagnose.lint_modules import _at, _names_inside
from gpurig.diagnose.lint_nodes import _constant_defaults, _dotted, _name_of, _worker_started
from gpurig.diagnose.lint_paths import objects_built


def _guarded_lines(fn: ast.AST, with_else: bool = False, left_on: frozenset[str] = frozenset(),
                   left_off: frozenset[str] = frozenset()) -> set[int]:
    """Lines of `fn` under a rank check (`if rank == 0:` bodies; with_else, their else branches too),
    on a branch only a run of one process takes (`else:` of `if dist.is_initialized():`), on the
    branch a switch defaulting to True that no caller passes (`left_on`) turns off (`def
    __init__(self, use_fid_inception=True)`: `else: inception_v3(pretrained=True)` never runs), on
    the branch a switch every caller leaves False (`left_off`) turns on (`if pretrained:`), or after
    an unconditional `raise` (as the scanner reads the script itself)."""
    if runs_on_main_only(fn):  # `@rank_zero_only def save(...)`: all of it
        return {n.lineno for n in ast.walk(fn) if hasattr(n, "lineno")}
    lines: set[int] = set()
    # flags set from a rank check in the function (`self.calculate_fid = calculate_fid and is_main_process`)
    flags = {_dotted(t) for n in ast.walk(fn) if isinstance(n, ast.Assign) and _mentions_rank(n.value) for t in n.targets}
    on = {k for k, v in _constant_defaults(fn).items() if v is True and k in left_on} if left_on else set()
    for stmt in ast.walk(fn):
        if not isinstance(stmt, ast.If):
            continue
        one_body, one_else = _single_process_branch(stmt.test)
        rank = _mentions_rank(stmt.test) or (isinstance(stmt.test, (ast.Name, ast.Attribute)) and _dotted(stmt.test) in flags)
        switch = stmt.test.operand if isinstance(stmt.test, ast.UnaryOp) and isinstance(stmt.test.op, ast.Not) else stmt.test
        if isinstance(switch, ast.Name) and switch.id in on:  # (the default's branch runs; the other does not)
            one_body, one_else = (True, False) if switch is not stmt.test else (False, True)
        elif isinstance(switch, ast.Name) and switch.id in left_off:
            one_body, one_else = (True, False) if switch is stmt.test else (False, True)
        for branch, counts in ((stmt.body, rank or one_body), (stmt.orelse, (rank and with_else) or one_else)):
            if counts:
                lines |= {n.lineno for b in branch for n in ast.walk(b) if hasattr(n, "lineno")}
    # After an unconditional `raise` nothing in its block runs (a path retired with `raise NotImplementedError`).
    for node in ast.walk(fn):
        for block in (getattr(node, f, None) for f in ("body", "orelse", "finalbody")):
            cut = next((i for i, s in enumerate(block) if isinstance(s, ast.Raise)), None) if isinstance(block, list) else None
            if cut is not None:
                lines |= {n.lineno for s in block[cut + 1:] for n in ast.walk(s) if hasattr(n, "lineno")}
    return lines


def _inits(modules: list) -> dict[int, str]:
    """id of each class's `__init__` -> the class's name: building the class runs it."""
    return {id(fn): cls.name for module in modules for cls in ast.walk(module) if isinstance(cls, ast.ClassDef)
            for fn in cls.body if isinstance(fn, ast.FunctionDef) and fn.name == "__init__"}


def _module_name(module: ast.AST) -> str:
    """A project module's dotted name from where it was found: "../src/utils.py" -> "src.utils"."""
    parts = [p for p in getattr(module, "gpurig_where", "").replace(os.sep, "/").split("/") if p not in ("", ".", "..")]
    if parts and parts[-1].endswith(".py"):
        parts[-1] = parts[-1][:-3]
    return ".".join(parts[:-1] if parts and parts[-1] == "__init__" else parts)


# The chain `_grown` writes before what a helper does: "through a() at x.py:3: through b() at y.py:9: "
_CHAIN = re.compile(r"(?:through [\w.]+\(\)(?: at \S+?:\d+)?: )*")


def _origin(where: str) -> str:
    """What a project helper does in the end: "through a() at x.py:3: X at y.py:9" -> "X at y.py:9"."""
    return where[_CHAIN.match(where).end():]


def _listed(where: str) -> str:
    """A helper's fetches as a finding names them: "through f() at x.py:2: a at x.py:3, b at x.py:9 and 4 more"."""
    through = where[:_CHAIN.match(where).end()]
    sites = where[len(through):].split("; ")
    return through + ", ".join(sites[:3]) + (f" and {len(sites) - 3} more" if len(sites) > 3 else "")


def _started_workers(call: ast.Call) -> list[ast.AST]:
    """The function a call starts as worker processes, as a list (empty when none)."""
    worker = _worker_started(call)
    return [worker] if worker is not None else []


def _worker_starters(modules: list) -> set[str]:
    """The project's functions that start worker processes (a `launch(main, num_gpus)` of its own):
    through mp.spawn / start_processes, by running Python again per GPU (`subprocess.Popen(["python3",
    *sys.argv], env=...)`, ByteTrack's launch_by_subprocess), or by calling another such function of
    the project (its `launch` -> `launch_by_subprocess`)."""
    functions = [fn for m in modules for fn in ast.walk(m) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))]

    def reruns_python(fn) -> bool:  # a child process of the Python interpreter, given this script's arguments
        return any(isinstance(n, ast.Call) and _dotted(n.func) in ("subprocess.Popen", "Popen", "subprocess.run") for n in ast.walk(fn)) \
            and any(isinstance(n, ast.Constant) and isinstance(n.value, str) and re.match(r"python[\d.]*$", n.value)
                    or _dotted(n) == "sys.executable" for n in ast.walk(fn))

    starters = {fn.name for fn in functions
                if any(_started_workers(n) or _name_of(_dotted(n.func)) in ("spawn", "start_processes")
                       for n in ast.walk(fn) if isinstance(n, ast.Call)) or reruns_python(fn)}
    calling = [(fn.name, {n.func.id for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)})
               for fn in functions]  # (each function's calls by plain name, read once)
    while more := {name for name, called in calling if name not in starters and called & starters}:
        starters |= more
    return starters


def _through(callee: str, what: str, where: str) -> str:
    return f"through {callee}() at {where}: {what}"


def _unless_started(fn: ast.AST) -> set[int]:
    """Lines of the bodies of `if not dist.is_initialized():` (`is_dist_avail_and_initialized()`) in `fn`."""
    out: set[int] = set()
    for stmt in ast.walk(fn):
        test = stmt.test if isinstance(stmt, ast.If) else None
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Call) and not test.operand.args:
            name = _dotted(test.operand.func).rpartition(".")[2]
            if name == "is_initialized" or name.startswith("is_dist") and name.endswith("initialized"):
                out.update(n.lineno for b in stmt.body for n in ast.walk(b) if hasattr(n, "lineno"))
    return out


def _grown(modules: list, out: dict[str, str], skip=lambda fn: False, through=_through, in_process: bool = False) -> dict[str, str]:
    """`out` (function name -> what it does; a class's `__init__` under its class name) grown through
    the project's own code: a function that calls one of them (by name, as `self.`/`cls.` method, or on
    an object of the project's class it builds: `trainer.train()`) does it too (find_model ->
    download_model -> download_url), and so does building a class whose `__init__` calls one, or whose
    base does when it has no `__init__` or calls `super().__init__` (`WATrainer(Trainer)` ->
    `Trainer.__init__` -> `create_model()`). Calls under a rank check are not followed; `skip` leaves functions out (a helper that lets rank 0 go first). A function found
    so is said as `through(callee, what the callee does, where it calls it)`: by default
    "through callee() at file.py:N: ...", so that a finding names every place of the chain.
    `in_process`: what a call does in the caller's own process, as the start of a process group:
    not through the workers a function starts, and through the body of `if not dist.is_initialized():`
    (where the group starts, not a branch of one process)."""
    functions = [(fn, module) for module in modules for fn in ast.walk(module) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))]
    classes = [(cls, module) for module in modules for cls in ast.walk(module) if isinstance(cls, ast.ClassDef)]
    init_of = _inits(modules)
    # The names a module imports (`import distributed`, `from models import model_builder`): a call
    # through one of them (`distributed.multi_init()`) is a call of the project's function.
    # (only names of the project's modules: `torch.save()` is no call of the project's `save()`)
    own = {_module_name(m).rpartition(".")[2] for m in modules}
    imported = {id(m): {a.asname or a.name for n in ast.walk(m) if isinstance(n, (ast.Import, ast.ImportFrom))
                        for a in n.names if "." not in a.name and a.name in own} for m in modules}
    # Each function's calls of the project's names, read once: (name called, where) in order, unguarded only.
    called: dict[int, list[tuple[str, int]]] = {}
    # A method called on `self` or on a built object is that class's (or its project bases', or a
    # subclass's override of what a base calls on self): where the project defines it, what is said of
    # its name counts only where it names a place inside it (of two classes' `init_weight()`, the one
    # loading pretrained weights is not the other's). (class, method) -> [(module, first line, last line)]
    defined: dict[str, dict[str, list]] = {}
    for cls, module in classes:
        for f in cls.body:
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defined.setdefault(cls.name, {}).setdefault(f.name, []).append((module, f.lineno, f.end_lineno or f.lineno))
    spans = {(c, m): list(where) for c, ms in defined.items() for m, where in ms.items()}
    for cls, _ in classes:
        for b in (_name_of(_dotted(x)) for x in cls.bases):
            for m, where in defined.get(b, {}).items():
                if m not in defined.get(cls.name, {}):
                    spans.setdefault((cls.name, m), []).extend(where)
            for m, where in defined.get(cls.name, {}).items():
                spans.setdefault((b, m), []).extend(where)
    of_class = {id(f): cls.name for cls, _ in classes for f in cls.body}
    # A module's table of its classes or functions by name (`{"GeneralizedRCNN": GeneralizedRCNN, ...}`).
    tables = {s.targets[0].id: tuple(_name_of(_dotted(v)) for v in s.value.values) for m in modules for s in m.body
              if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.Dict)
              and s.value.values and all(isinstance(v, (ast.Name, ast.Attribute)) for v in s.value.values)}
    for fn, module in functions:
        guarded, built = _guarded_lines(fn), objects_built(fn, {cls.name for cls, _ in classes})
        if in_process:
            guarded -= _unless_started(fn)
        calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and n.lineno not in guarded]  # (walked once, read three ways)
        owner = lambda n, me=of_class.get(id(fn)), built=built: me if _dotted(n.func.value) in ("self", "cls") else built.get(_dotted(n.func.value))  # noqa: E731
        called[id(fn)] = [(_name_of(_dotted(n.func)), n.lineno, spans.get((owner(n), n.func.attr)) if isinstance(n.func, ast.Attribute) else None)
                          for n in calls if isinstance(n.func, (ast.Name, ast.Attribute))
                          and (isinstance(n.func, ast.Name) or _dotted(n.func.value) in ("self", "cls", *imported[id(module)])
                               or (built.get(_dotted(n.func.value)), n.func.attr) in spans)]
        # and what it builds through a table of the project's classes or functions: `meta_arch =
        # _ARCHITECTURES[cfg.name]; meta_arch(cfg)` or `_FACTORY[name](cfg)` calls each of them
        if tables:
            aliases = {a.targets[0].id: tables[_dotted(a.value.value)] for a in ast.walk(fn) if isinstance(a, ast.Assign) and len(a.targets) == 1
                       and isinstance(a.targets[0], ast.Name) and isinstance(a.value, ast.Subscript) and _dotted(a.value.value) in tables}
            called[id(fn)] += [(v, n.lineno, None) for n in calls
                               for v in (tables.get(_dotted(n.func.value), ()) if isinstance(n.func, ast.Subscript)
                                         else aliases.get(n.func.id, ()) if isinstance(n.func, ast.Name) else ())]
        # and the workers it starts (`mp.spawn(run, ...)`, `Process(target=run)`, `mp.spawn(_fit._pipeline)`): they run them
        called[id(fn)] += [(_name_of(_dotted(w)), n.lineno, None) for n in calls if not in_process
                           for w in _started_workers(n) if isinstance(w, ast.Name) or _dotted(w).partition(".")[0] in imported[id(module)]]
    # (each helper a function calls that does it, in order: a loss building a backbone that fetches
    # its weights and fetching its own; said once the growth is done, from what each callee does)
    own, via = dict(out), {}

    def said(name: str, found: dict) -> str:  # what it does itself, then through each helper (each said in 400 characters)
        cut = lambda x: x if len(x) <= 400 else x[:400].rpartition("; ")[0] or x[:400]  # noqa: E731
        return "; ".join(([own[name]] if name in own else []) + [through(c, cut(out[c]), at) for c, at in list(found.items())[:3]])

    grown = True
    while grown:
        grown = False
        for fn, module in functions:
            name = init_of.get(id(fn), fn.name)
            if name == "__init__" or skip(fn):
                continue
            found = via.setdefault(name, {})  # (functions of one name, in several classes or modules: one entry)
            for c, line, where in called[id(fn)]:
                if c in out and c != name and c not in found and (where is None or any(_names_inside(out[c], *w) for w in where)):
                    found[c] = _at(module, line)
                    out[name] = said(name, found)
                    grown = True
        for cls, module in classes:
            base = next((b for b in (_name_of(_dotted(x)) for x in cls.bases) if b in out and b != cls.name), None)
            init = next((fn for fn in cls.body if isinstance(fn, ast.FunctionDef) and fn.name == "__init__"), None)
            if cls.name not in out and base is not None and (init is None or any(
                    isinstance(n, ast.Call) and _name_of(_dotted(n.func)) == "__init__" for n in ast.walk(init))):
                out[cls.name] = through(base, out[base], _at(module, cls.lineno))
                grown = True
    for _ in range(2):
        for name, found in via.items():
            if found:
                out[name] = said(name, found)
    out.pop("__init__", None)
    return out


def switches_left_on(fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str, calls: list[ast.Call]) -> frozenset[str]:
    """The parameters of `fn` (called as `name`: a class's name for its `__init__`) that default to
    True and that no call of the project or the script gives: by keyword anywhere, or by position in
    a call of that name. A switch a caller passes may be False there."""
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    params = params[1:] if params[:1] in (["self"], ["cls"]) else params
    given = {k.arg for c in calls for k in c.keywords}
    mine = [c for c in calls if _name_of(_dotted(c.func)) == name]
    if None in given and mine or any(isinstance(a, ast.Starred) for c in mine for a in c.args):
        return frozenset()  # (`f(*args, **kwargs)`: anything may be given)
    reach = max((len(c.args) for c in mine), default=0)
    return frozenset(k for k, v in _constant_defaults(fn).items()
                     if v is True and k not in given and not (k in params and params.index(k) < reach))


def _off(value) -> bool:
    """A constant that turns a switch off: False, None or 0 (`def test(self, setting, test=0)`)."""
    return value is None or value is False or type(value) is int and value == 0


class SwitchesLeftOff:
    """`SwitchesLeftOff(modules, calls)(fn, name)`: the parameters of `fn` (called as `name`: a
    class's name for its `__init__`) that every call of it leaves False or None: not given where they
    default to False or None, given False or None, or given the caller's own parameter left off the
    same way (`resnet18()` -> `_resnet(arch, block, layers, pretrained, progress, **kwargs)`: its `if
    pretrained:` never runs). One the project never calls nor names (dead code, such as
    `resnet152()` beside the `resnet18()` it uses) leaves them all off, but for what a call by lookup
    gives by keyword (`models.__dict__[arch](pretrained=True)`); one named without a call
    (`mp.spawn(worker)`, a callback) has none. (A class, not closures that call each other: those
    would hold the syntax trees in a reference cycle after the lint.)"""

    def __init__(self, modules: list, calls: list[ast.Call]) -> None:
        self.init_of = _inits(modules)
        self.enclosing: dict[int, ast.AST] = {}  # id(call) -> the innermost function of the project it is in
        for module in modules:
            for f in ast.walk(module):
                if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self.enclosing.update((id(n), f) for n in ast.walk(f) if isinstance(n, ast.Call))
        self.by_name: dict[str, list[ast.Call]] = {}
        for c in calls:
            self.by_name.setdefault(_name_of(_dotted(c.func)), []).append(c)
        self.looked_up = [c for c in calls if not isinstance(c.func, (ast.Name, ast.Attribute))]
        self.looked_up_ids = {id(c) for c in self.looked_up}
        callees = {id(c.func) for c in calls}
        self.named = {n.id if isinstance(n, ast.Name) else n.attr for m in modules for n in ast.walk(m)
                      if isinstance(n, (ast.Name, ast.Attribute)) and id(n) not in callees}
        self.memo: dict[int, frozenset[str]] = {}

    def _caller_off(self, call: ast.Call) -> frozenset[str]:
        caller = self.enclosing.get(id(call))
        return frozenset() if caller is None else self(caller, self.init_of.get(id(caller), caller.name))

    def _left_off_by(self, call: ast.Call, p: str, index: int | None, default_off: bool) -> bool:
        """Whether `call` leaves parameter `p` (at position `index`) False or None."""
        given = next((k.value for k in call.keywords if k.arg == p), None)
        if given is None and index is not None and id(call) in self.looked_up_ids:
            return default_off  # (a call by lookup: only what it gives by keyword is read)
        if given is None and index is not None and index < len(call.args):
            given = call.args[index]
        if given is None:
            caller = self.enclosing.get(id(call))
            mine = {a.arg for a in caller.args.posonlyargs + caller.args.args + caller.args.kwonlyargs} if caller else set()
            # `*args` may hold it; `**kwargs` too, unless they are the caller's own and it names `p` itself
            if any(isinstance(a, ast.Starred) for a in call.args[: (index or 0) + 1]) or any(
                    k.arg is None and not (caller and caller.args.kwarg and isinstance(k.value, ast.Name)
                                           and k.value.id == caller.args.kwarg.arg and p in mine) for k in call.keywords):
                return False
            return default_off
        if isinstance(given, ast.Starred):
            return False
        if isinstance(given, ast.Constant):
            return _off(given.value)
        return isinstance(given, ast.Name) and given.id in self._caller_off(call)

    def __call__(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> frozenset[str]:
        if id(fn) in self.memo:
            return self.memo[id(fn)]
        self.memo[id(fn)] = frozenset()  # (while it is worked out: a cycle of calls knows nothing)
        mine = self.by_name.get(name) or ([] if name in self.named else self.looked_up)
        if not mine and name in self.named:
            return self.memo[id(fn)]
        positional = [a.arg for a in fn.args.posonlyargs + fn.args.args]
        positional = positional[1:] if positional[:1] in (["self"], ["cls"]) else positional
        defaults = _constant_defaults(fn)
        left = frozenset(p for p in positional + [a.arg for a in fn.args.kwonlyargs] if all(
            self._left_off_by(c, p, positional.index(p) if p in positional else None,
                              p in defaults and _off(defaults[p])) for c in mine))
        self.memo[id(fn)] = left
        return left


def switched_off(call: ast.Call, name: str, where: str, modules: list) -> bool:
    """Whether what the project's helper `name` does at `where` ("torch.load at exp/x.py:213", its
    own line, not through another helper) sits under `if flag:` of a parameter that defaults to off
    and that this call leaves off: `exp.test(setting)` of `def test(self, setting, test=0): ... if
    test: torch.load(...)` loads nothing there, whatever another call (`exp.test(setting, test=1)`) does."""
    m = re.match(r"[^(]*? at ([^\s,]+\.py:\d+)", where)
    if m is None:
        return False
    line = int(m.group(1).rpartition(":")[2])
    for module in modules:
        for fn in ast.walk(module):
            if not (isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name in (name, "__init__")
                    and fn.lineno <= line <= (fn.end_lineno or fn.lineno) and _at(module, line) == m.group(1)):
                continue
            defaults = _constant_defaults(fn)
            params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
            params = params[1:] if params[:1] in (["self"], ["cls"]) and isinstance(call.func, ast.Attribute) else params
            switches = [n.test.id for n in ast.walk(fn) if isinstance(n, ast.If) and isinstance(n.test, ast.Name)
                        and n.test.id in defaults and _off(defaults[n.test.id])
                        and n.body[0].lineno <= line <= (n.body[-1].end_lineno or n.body[-1].lineno)]
            # (whether this call leaves it off: read as the switches every call leaves off are)
            left_off = SwitchesLeftOff(modules, [call])._left_off_by if switches else None
            if any(left_off(call, p, params.index(p) if p in params else None, True) for p in switches):
                return True
            return False
    return False
