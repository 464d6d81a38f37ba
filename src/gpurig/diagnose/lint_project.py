"""The script's own project, as `gpurig lint` reads it: the modules it imports from its folder
(silencing of other ranks' output, downloads in helpers, a process group started or ended there).
"""

from __future__ import annotations

import ast
import re

from gpurig.diagnose.lint_devices import _loose_load, _map_location
from gpurig.diagnose.lint_growth import (
    SwitchesLeftOff,
    _grown,
    _guarded_lines,
    _inits,
    _module_name,
    _through,
    switches_left_on,
)
from gpurig.diagnose.lint_guards import (
    _mentions_rank,
)
from gpurig.diagnose.lint_modules import (
    _at,
    _builds_dataset,
    _dataset_classes,
    _fetches_by_library,
    _library_fetchers,
    _names_inside,
)
from gpurig.diagnose.lint_nodes import (
    _DOWNLOADERS,
    _SILENCERS,
    NAMED_FETCHES,
    _calls_barrier,
    _constant_defaults,
    _data_file,
    _dotted,
    _is_const,
    _kept_on_self,
    _kw,
    _local_path,
    _name_of,
    _one_listed_gpu,
    _pretrained_weights,
    _reads_local_files,
    _sampler_shuffle,
    _written_file,
)
from gpurig.diagnose.lint_paths import (
    _OWN_FILE,
    _assigned_once,
    _mentions_rank_value,
    _names_a_file_in,
    buffer_names,
    in_private_file,
    own_file_written,
    path_given,
    weights_held_in,
)

# --- what the script's own project does elsewhere -------------------------------------------


def _silences_output(tree: ast.AST) -> bool:
    """Whether code replaces print on other ranks (`builtins.print = ...`), defines or calls a
    known silencing helper, or sets a logging level that depends on the rank."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if _dotted(t) in ("builtins.print", "__builtin__.print", "__builtins__.print"):
                    return True
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in _SILENCERS:
            if any(isinstance(n, ast.Assign) and any(_dotted(t).endswith(".print") for t in n.targets) for n in ast.walk(node)) \
                    or any(isinstance(n, ast.Call) and _name_of(_dotted(n.func)) in ("setLevel", "basicConfig", "disable")
                           and _mentions_rank(n) for n in ast.walk(node)):
                return True
        elif isinstance(node, ast.Call) and _name_of(_dotted(node.func)) in ("setLevel", "basicConfig") and _mentions_rank(node):
            return True
    return False


def _shadowed(module: ast.AST) -> set[int]:
    """The functions and classes a later one of the same name in the same body replaces: `def
    load_checkpoint(model, path)` then `def load_checkpoint(config, model, ...)` in one module, whose
    callers only ever reach the last."""
    out: set[int] = set()
    for node in ast.walk(module):
        body = getattr(node, "body", None)  # (a lambda's body is one expression, not a list)
        last: dict[str, ast.AST] = {}
        for stmt in body if isinstance(body, list) else ():
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if stmt.name in last:
                    out.add(id(last[stmt.name]))
                last[stmt.name] = stmt
    return out


def _functions_calling(modules: list, what: str, matches) -> dict[str, str]:
    """Functions of the project's own modules with a call `matches(call, fn)` accepts: name -> "<what> at
    <file>:N" (the first such call). A class's `__init__` stands under the class's name."""
    out: dict[str, str] = {}
    for module in modules:
        init_of, shadowed = _inits([module]), _shadowed(module)
        for fn in ast.walk(module):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and id(fn) not in shadowed:
                hit = next((n for n in ast.walk(fn) if isinstance(n, ast.Call) and matches(n, fn)), None)
                if hit is not None:
                    out[init_of.get(id(fn), fn.name)] = f"{what} at {_at(module, hit.lineno)}"
    return out


# Keras's bundled datasets: `mnist.load_data()` fetches into ~/.keras/datasets unless given a path.
_KERAS_DATASETS = frozenset({"mnist", "fashion_mnist", "cifar10", "cifar100", "imdb", "reuters", "boston_housing",
                             "california_housing"})


_SHELL_CALLS = frozenset({"os.system", "subprocess.run", "subprocess.call", "subprocess.check_call", "subprocess.check_output",
                          "subprocess.Popen"})
_SHELL_FETCH = re.compile(r"(?:^|[;&|]\s*)(?:wget|gdown|curl|aria2c)\s")


def _named_fetch(call: ast.Call) -> bool:
    """A call that fetches by what it is, not by a keyword: torch.hub, evaluate, OpenAI's clip.load,
    fair-esm's pretrained models, gdown and wget, a streamed `requests.get`, a Keras dataset's load_data() (unless the path it is
    given holds the rank: one file per rank)."""
    func = _dotted(call.func)
    if func in NAMED_FETCHES:
        return True
    if func == "requests.get" and _is_const(getattr(_kw(call, "stream"), "value", None), True):
        return True
    if func in _SHELL_CALLS and call.args:  # `os.system("gdown <id>")`, `subprocess.run(shlex.split(f"wget {url}"))`
        command = "".join(n.value for n in ast.walk(call.args[0]) if isinstance(n, ast.Constant) and isinstance(n.value, str))
        return _SHELL_FETCH.search(command) is not None
    head, _, short = func.rpartition(".")
    if head == "esm.pretrained" and short.startswith("esm"):  # fair-esm: esm2_t33_650M_UR50D() fetches into torch hub's cache
        return True
    # (diffusers before 0.12: `DDPMScheduler.from_config(model_id, subfolder="scheduler")` fetches the
    # scheduler's config as from_pretrained does; from_config given a config object fetches nothing)
    if short == "from_config" and _kw(call, "subfolder") is not None and call.args and not _reads_local_files(call):
        return True
    if short == "load_data" and head.rpartition(".")[2] in _KERAS_DATASETS:
        path = _kw(call, "path")
        return path is None or not _mentions_rank_value(path.value)
    return False


def _is_download_call(call: ast.Call, off: frozenset[str] = frozenset()) -> bool:
    func = _dotted(call.func)
    short = _name_of(func)
    # (`pretrained=is_main_process()`: only the main process fetches, DETR's way)
    # (`pretrained="/data/weights/deit_base.pth"`: a file of this machine, not a switch)
    # (`resnet18(pretrained=pretrained)` in `get_resnet(name, pretrained=False)` that every caller leaves off: `off`)
    on = [k for k in call.keywords if k.arg in ("download", "pretrained")
          and not _is_const(k.value, False) and not _is_const(k.value, None) and not _mentions_rank(k.value)
          and not (isinstance(k.value, ast.Name) and k.value.id in off)
          and not (isinstance(k.value, ast.Constant) and _local_path(k.value.value))]
    return bool(on) or (short in _DOWNLOADERS and not _reads_local_files(call)) or _named_fetch(call) \
        or _pretrained_weights(call) is not None


# Collectives every rank waits in, as a barrier does (AnyCost GAN: `if hvd.rank() == 0: <download>`,
# then `hvd.broadcast(torch.tensor(0), root_rank=0)`, then every rank loads what rank 0 fetched).
_WAITS = frozenset({"barrier", "wait_for_everyone", "broadcast", "all_reduce", "allreduce", "broadcast_object_list"})


def _rank_zero_first(fn: ast.AST) -> bool:
    """The helper makes the other ranks wait while rank 0 works: `if args.local_rank not in [-1, 0]:
    torch.distributed.barrier()` first (the matching barrier of rank 0 after), or rank 0 fetching
    under a rank check followed by a barrier (or a collective) in the same block, in any branch of
    it. Remembered per function (the growth asks of each function again and again)."""
    hit = _FIRST_CACHE.get(id(fn))
    if hit is not None and hit[0] is fn:
        return hit[1]
    body = getattr(fn, "body", [])
    answer = any(isinstance(stmt, ast.If) and _mentions_rank(stmt.test) and _calls_barrier(*stmt.body) for stmt in body)
    blocks = [body] + [getattr(n, f, []) for n in ast.walk(fn) if isinstance(n, (ast.If, ast.Try, ast.With)) for f in ("body", "orelse")]
    for block in blocks if not answer else ():
        waited = False  # (read backwards: a wait comes after this statement)
        for stmt in reversed(block):
            if waited and isinstance(stmt, ast.If) and _mentions_rank(stmt.test) and any(
                    isinstance(n, ast.Call) and _is_download_call(n) for b in stmt.body for n in ast.walk(b)):
                answer = True
                break
            waited = waited or any(isinstance(n, ast.Call) and _name_of(_dotted(n.func)) in _WAITS for n in ast.walk(stmt))
        if answer:
            break
    _FIRST_CACHE[id(fn)] = (fn, answer)
    return answer


_FIRST_CACHE: dict[int, tuple] = {}  # id(function) -> (function, whether rank 0 goes first in it)


_MAX_SITES = 8  # the fetches of one helper named in its findings


def _local_path_names(fn: ast.AST) -> set[str]:
    """The names `fn` assigns, every time, a constant path of this machine."""
    values: dict[str, list] = {}
    for n in ast.walk(fn):
        if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None:
            for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                if isinstance(t, ast.Name):
                    values.setdefault(t.id, []).append(n.value)
    return {k for k, vs in values.items() if all(isinstance(v, ast.Constant) and _local_path(v.value) for v in vs)}


def _downloading_functions(modules: list, script_calls: list = ()) -> dict[str, str]:
    """Functions of the project's own modules that download without a rank check: name -> what.
    A class whose `__init__` downloads stands under its own name: building it downloads
    (`VQLoss()` -> `LPIPS()` -> `vgg16(pretrained=True)`)."""
    init_of = _inits(modules)
    # The project's own `resnet50(pretrained=True)` is judged by its body (it may read a local file),
    # not by the keyword: the growth below finds it if its body fetches.
    # (called by its plain name or through a module of the project: `datasets.CIFAR10(download=True)` of
    # torchvision inside the project's own `class CIFAR10` is torchvision's)
    own = {n.name for module in modules for n in ast.walk(module)
           if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    own_modules = {part for m in modules for part in _module_name(m).split(".")}
    out: dict[str, str] = {}
    calls = [n for m in modules for n in ast.walk(m) if isinstance(n, ast.Call)] + list(script_calls)
    left_off = SwitchesLeftOff(modules, calls)
    for module in modules:
        imports = [n for n in ast.walk(module) if isinstance(n, (ast.Import, ast.ImportFrom))]
        fetchers, datasets, shadowed = _library_fetchers(imports), _dataset_classes(imports), _shadowed(module)
        foreign = {a.asname or a.name.split(".")[0] for n in imports for a in n.names if not getattr(n, "level", 0)
                   and (n.module if isinstance(n, ast.ImportFrom) else a.name).split(".")[0] not in own_modules}
        for fn in ast.walk(module):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or _rank_zero_first(fn) or id(fn) in shadowed:
                continue
            name = init_of.get(id(fn), fn.name)
            off = left_off(fn, name)
            guarded_lines = _guarded_lines(fn, left_on=switches_left_on(fn, name, calls), left_off=off)
            # parameters that default to a path of this machine (`tokenizer_path='../model'`), and names
            # the function sets only to such paths (`local_path = '/maindata/ckpts/text_encoder'`)
            local = {name for name, value in _constant_defaults(fn).items() if _local_path(value)} | _local_path_names(fn)
            bound = _assigned_once(fn)  # (`weights = ResNet50_Weights.IMAGENET1K_V2` ... `resnet50(weights=weights)`)
            # every fetch of the function, each a thing its callers do on every rank
            sites = [f"{_name_of(_dotted(n.func)) or ast.unparse(n.func)[:40]} at {_at(module, n.lineno)}"
                     for n in ast.walk(fn) if isinstance(n, ast.Call) and (_is_download_call(n, off) or _fetches_by_library(n, fetchers)
                                                                          or _builds_dataset(_dotted(n.func), datasets)
                                                                          or weights_held_in(n, bound))
                     and n.lineno not in guarded_lines
                     and not (_name_of(_dotted(n.func)) in own and _dotted(n.func).partition(".")[0] not in foreign - own)
                     and not (
                         _name_of(_dotted(n.func)) == "from_pretrained" and n.args and getattr(n.args[0], "id", None) in local)]
            if sites:
                out[init_of.get(id(fn), fn.name)] = "; ".join(sites[:_MAX_SITES])
    grown = _grown(modules, out, skip=_rank_zero_first)
    _FIRST_CACHE.clear()  # (it holds the modules' nodes)
    return grown


def _joins(call: ast.Call, fn: ast.AST) -> bool:
    return _name_of(_dotted(call.func)) in ("init_process_group", "Accelerator") or _dotted(call.func) == "deepspeed.initialize"


def _joiners_in_process(modules: list, subclasses: dict[str, set[str]] | None = None) -> set[str]:
    """The project's functions and classes that start or join a process group in the process that
    calls them, themselves or through the project's functions (`setup.setup_dist_env()` ->
    `dist_init()` -> init_process_group), not through workers they start: after a call of one, the
    caller is a rank. (Not one that forks, `os.fork()` per GPU: what came before it ran in the parent alone.)
    `subclasses`: the script's own classes by their bases; one built on such a class starts it as that
    class does (Betty's `class ReweightingEngine(Engine)`)."""
    forks = lambda fn: any(isinstance(n, ast.Call) and _dotted(n.func) in ("os.fork", "fork") for n in ast.walk(fn))  # noqa: E731
    joiners = set(_grown(modules, _functions_calling(modules, "a process group", _joins), skip=forks, in_process=True))
    return joiners | {name for name, bases in (subclasses or {}).items() if bases & joiners}


def _device_setters(modules: list) -> set[str]:
    """The project's functions and classes that set the device of the process that calls them,
    themselves or through the project's functions (`Engine.__init__` -> torch.cuda.set_device(local_rank)),
    not in workers they start: after a call of one, a DDP without device_ids finds its GPU."""
    sets = lambda call, fn: _name_of(_dotted(call.func)) in ("set_device", "set_device_index")  # noqa: E731
    return set(_grown(modules, _functions_calling(modules, "the device", sets), in_process=True))


def _group_joiners(modules: list) -> set[str]:
    """The project's functions and classes that start or join a process group, themselves or
    through the project's functions and the workers they start: init_process_group, an Accelerator,
    DeepSpeed's initialize."""
    return set(_grown(modules, _functions_calling(modules, "a process group", _joins)))


def _imports_trainer(modules: list) -> bool:
    """Whether the project's modules import a Hugging Face Trainer of any kind (`setup_trainer()` builds it)."""
    return any(isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] in ("transformers", "trl")
               and any(a.name.endswith("Trainer") for a in n.names) for m in modules for n in ast.walk(m))


def _reachable_call(modules: list, name: str, script_calls: set[str]) -> bool:
    """Whether the project's own modules call `name` where the script gets to it: at a module's
    top level, or in a function the script calls, directly or through the project's other
    functions (`ddp_main()` -> `ddp_cleanup()` -> `destroy_process_group()`). A wrapper nobody
    calls does not count."""
    for module in modules:
        for stmt in getattr(module, "body", []):
            if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and any(
                    isinstance(n, ast.Call) and _name_of(_dotted(n.func)) == name for n in ast.walk(stmt)):
                return True
    callers = _functions_calling(modules, name, lambda call, fn: _name_of(_dotted(call.func)) == name)
    if any(fn in script_calls for fn in callers):
        return True
    return any(fn in script_calls for fn in _grown(modules, callers))


def _sampler_functions(modules: list) -> dict:
    """Functions of the project's own modules that build a DistributedSampler: name -> (how the first
    shuffles (`_sampler_shuffle`), where each is: "file.py:N, file.py:M")."""
    out: dict = {}
    init_of = _inits(modules)  # (a class whose `__init__` builds one, under the class's name)
    for module in modules:
        for fn in ast.walk(module):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                params = [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]
                name = init_of.get(id(fn), fn.name)
                for n in ast.walk(fn):
                    if isinstance(n, ast.Call) and _name_of(_dotted(n.func)) == "DistributedSampler":
                        how = _sampler_shuffle(n, params[1:] if name != fn.name else params)
                        if how != "no":
                            how, sites = out.get(name, (how, ""))  # (its first; every place named)
                            out[name] = (how, f"{sites}, {_at(module, n.lineno)}" if sites else _at(module, n.lineno))
    # and the functions that call one that always shuffles (`build_dataloader()` -> `build_sampler()`)
    # (said where the sampler itself is built)
    grown = _grown(modules, {name: sites for name, (how, sites) in out.items() if how is None},
                   through=lambda callee, sites, where: sites)
    return {**{name: (None, sites) for name, sites in grown.items()}, **out}


def _saving_functions(modules: list) -> dict[str, str]:
    """Functions of the project's own modules that torch.save to a file without a rank check (nor
    the rank in the file name): name -> where (a class's `__init__` under the class's name). A call of
    one on every rank writes that file at once."""
    out: dict[str, str] = {}
    init_of = _inits(modules)
    for module in modules:
        shadowed = _shadowed(module)
        for fn in ast.walk(module):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or id(fn) in shadowed:
                continue
            name = init_of.get(id(fn), fn.name)
            params = [a.arg for a in fn.args.args]
            # `self.filename = filename` then `open(self.filename, "a")`: still the path it is given
            kept = _kept_on_self(fn, set(params))
            # `if not is_main_process(): return` and the like: it decides itself what comes after
            # (a rank check after the write, `if rank > 0: logger.setLevel(...)`, does not guard it)
            # (one that only wraps a block, `if self.device == 0: print(...)`, guards that block alone)
            decides = min((stmt.lineno for stmt in fn.body if isinstance(stmt, ast.If) and _mentions_rank(stmt.test)
                           and any(isinstance(s, (ast.Return, ast.Raise)) for s in stmt.body + stmt.orelse)), default=None)
            # (and a function defined inside runs where it is called: it is judged as a function of its own)
            skipped = [(decides, fn.end_lineno or decides)] if decides is not None else []
            skipped += [(inner.lineno, inner.end_lineno or inner.lineno) for inner in ast.walk(fn)
                        if inner is not fn and isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef))]
            guarded_lines = set(_guarded_lines(fn, with_else=True)).union(*(range(a, b + 1) for a, b in skipped))
            # (`with open(record, 'a'): pass` only makes sure the file is there: the write is the one after)
            guarded_lines |= {w.lineno for w in ast.walk(fn) if isinstance(w, ast.With) and all(isinstance(b, ast.Pass) for b in w.body)
                              and all(len(i.context_expr.args) > 1 and str(getattr(i.context_expr.args[1], "value", "")).startswith("a")
                                      for i in w.items if isinstance(i.context_expr, ast.Call))}
            buffers = buffer_names(fn)
            # a file name held in a local variable (`save_path = ...{dist.get_rank()}...`)
            per_rank = {t.id for n in ast.walk(fn) if isinstance(n, ast.Assign) and _mentions_rank_value(n.value)
                        for t in n.targets if isinstance(t, ast.Name)}
            writes: list[str] = []  # every unguarded write, the first found first (what the finding is about)
            for n in ast.walk(fn):
                if isinstance(n, ast.Call) and _dotted(n.func) == "torch.save" and n.lineno not in guarded_lines \
                        and len(n.args) > 1 and not _mentions_rank_value(n.args[1]) \
                        and not in_private_file(n.args[1], buffers) and not (isinstance(n.args[1], ast.Name) and n.args[1].id in per_rank):
                    writes.append(f"torch.save at {_at(module, n.lineno)}")
                    continue
                # `def yaml_save(file, data): with open(file, "w")`: the file the caller names
                if isinstance(n, ast.Call) and _dotted(n.func) == "open" and n.lineno not in guarded_lines \
                        and len(n.args) >= 2 and isinstance(n.args[1], ast.Constant) and str(n.args[1].value)[:1] in ("w", "a") \
                        and (isinstance(n.args[0], ast.Name) and n.args[0].id in params
                             or isinstance(n.args[0], ast.Attribute) and _dotted(n.args[0].value) == "self" and n.args[0].attr in kept):
                    param = n.args[0].id if isinstance(n.args[0], ast.Name) else n.args[0].attr
                    given = params[1:] if params[:1] in (["self"], ["cls"]) else params
                    at = f", argument {given.index(param) + 1}" if param in given else ""
                    writes.append(f"open(..., {n.args[1].value!r}) at {_at(module, n.lineno)}, on the path it is given ({param}{at})")
                    continue
                # `with open('class_indices.json', 'w')`: a file the helper names itself, the same for every rank;
                # or names in the folder it is given (`open(f"{save_path}/train.log", "a")`)
                if isinstance(n, ast.Call) and _dotted(n.func) == "open" and n.lineno not in guarded_lines \
                        and len(n.args) >= 2 and isinstance(n.args[1], ast.Constant) and str(n.args[1].value)[:1] in ("w", "a"):
                    held = own_file_written(n.args[0], fn)  # (`open(dump, "w")`: the file `dump` holds)
                    if isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str) and n.args[1].value[:1] == "w" \
                            or _names_a_file_in(n.args[0], params) and not _mentions_rank_value(n.args[0]) or held is not None:
                        writes.append(f"a write of {_file_said(held or n.args[0])} at {_at(module, n.lineno)}")
                        continue
                # `shutil.copyfile(config, os.path.join(path, "config.json"))` into the folder it is given
                if isinstance(n, ast.Call) and _dotted(n.func) in ("shutil.copyfile", "shutil.copy2", "shutil.copy", "copyfile") \
                        and n.lineno not in guarded_lines and len(n.args) == 2 and not _mentions_rank_value(n.args[1]) and (
                            _names_a_file_in(n.args[1], params) or isinstance(n.args[1], ast.Call) and _name_of(_dotted(n.args[1].func)) == "join"
                            and all(isinstance(a, ast.Name) and a.id in params or isinstance(a, ast.Constant) for a in n.args[1].args)):
                    writes.append(f"a copy to {ast.unparse(n.args[1])[:60]} at {_at(module, n.lineno)}")
                    continue
                # a config saved by its library, `OmegaConf.save(config=cfg, f=os.path.join(save_path, "hparams.yaml"))`
                # or `cfg.dump(...)`, into a file of its own (not a plot or an array: results an evaluation path writes)
                target = _written_file(n, _dotted(n.func)) if isinstance(n, ast.Call) and n.lineno not in guarded_lines and (
                    _dotted(n.func) == "OmegaConf.save" or _name_of(_dotted(n.func)) == "dump") else None
                if target is not None and not _mentions_rank_value(target) and (_names_a_file_in(target, params) or (
                        own_file_written(target, fn) is not None) or isinstance(target, ast.Constant) and _own_file_in_place(target)):
                    writes.append(f"a write of {_file_said(target)} at {_at(module, n.lineno)}")
            if writes:  # ("a write of 'config.json' at train.py:81; torch.save at train.py:552")
                out[name] = "; ".join(dict.fromkeys(writes))
    # A function that hands such a helper a file of its own, the same on every rank, writes it
    # (`Learner.__init__` -> `CsvWriter(file_path=os.path.join(self.args.checkpoint_dir, "results.csv"))`).
    given = {k: v for k, v in out.items() if ", on the path it is given (" in v.split("; ")[0]}
    for module in modules if given else ():
        shadowed = _shadowed(module)
        for fn in (f for f in ast.walk(module) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and id(f) not in shadowed):
            guarded_lines = _guarded_lines(fn, with_else=True)
            hit = next(((n, a) for n in ast.walk(fn) if isinstance(n, ast.Call) and _name_of(_dotted(n.func)) in given
                        and n.lineno not in guarded_lines for a in path_given(n, given[_name_of(_dotted(n.func))])
                        if _own_file_in_place(a)), None)
            if hit is not None and init_of.get(id(fn), fn.name) not in out:
                callee = _name_of(_dotted(hit[0].func))
                opened = re.search(r" at ([^\s,]+\.py:\d+)", given[callee])  # (where the helper opens it)
                out[init_of.get(id(fn), fn.name)] = _through(callee, f"a write of {_file_said(hit[1])}" + (
                    f" at {opened.group(1)}" if opened else ""), _at(module, hit[0].lineno))
    # A class whose `__init__` has one of its own methods save (`MyDataset.__init__` -> `self.process()`
    # -> torch.save of the processed split): building it saves.
    for module in modules:
        for cls in (c for c in ast.walk(module) if isinstance(c, ast.ClassDef) and c.name not in out):
            init = next((fn for fn in cls.body if isinstance(fn, ast.FunctionDef) and fn.name == "__init__"), None)
            guarded = _guarded_lines(init) if init is not None else set()
            # (the class's own method saves: the place its description names is in that method)
            saves = {fn.name for fn in cls.body if isinstance(fn, ast.FunctionDef) and fn.name in out
                     and _names_inside(out[fn.name], module, fn.lineno, fn.end_lineno or fn.lineno)}
            hit = next((n for n in ast.walk(init) if isinstance(n, ast.Call) and n.lineno not in guarded and isinstance(n.func, ast.Attribute)
                        and _dotted(n.func.value) == "self" and n.func.attr in saves), None) if init is not None else None
            if hit is not None:
                out[cls.name] = _through(hit.func.attr, out[hit.func.attr], _at(module, hit.lineno))
    return out


def _global_rank_device_functions(modules: list) -> dict[str, str]:
    """Functions of the project's own modules that make the global rank the GPU index:
    `r = dist.get_rank()` (or RANK from the environment), then `torch.cuda.set_device(r)` or
    `DistributedDataParallel(m, device_ids=[r])`: name -> where."""
    from gpurig.diagnose.lint_guards import _holds_global_rank

    def global_rank_device(call: ast.Call, fn: ast.AST) -> bool:
        short = _name_of(_dotted(call.func))
        if short in ("set_device", "set_device_index") and call.args:
            given = call.args[0]
        elif short in ("DistributedDataParallel", "DDP") and _kw(call, "device_ids") is not None:
            given = _kw(call, "device_ids").value
            given = given.elts[0] if isinstance(given, (ast.List, ast.Tuple)) and len(given.elts) == 1 else given
        else:
            return False
        ranks = {_dotted(t) for n in ast.walk(fn) if isinstance(n, ast.Assign) and _holds_global_rank(n.value)
                 for t in n.targets if _dotted(t)}
        return _dotted(given) in ranks or _holds_global_rank(given)

    return _grown(modules, _functions_calling(modules, "the global rank as the GPU index", global_rank_device))


def _own_file_in_place(path: ast.AST) -> bool:
    """A path written out where it is used that names a file of its own, the same on every rank:
    'results.csv', os.path.join(out_dir, "results.csv"), f"{out}/log.txt"."""
    own = [n for n in ast.walk(path) if isinstance(n, ast.Constant) and isinstance(n.value, str) and _OWN_FILE.search(n.value)]
    return bool(own) and (isinstance(path, (ast.Constant, ast.JoinedStr, ast.BinOp)) or isinstance(path, ast.Call)
                          and _name_of(_dotted(path.func)) == "join") and not _mentions_rank_value(path)


def _file_said(path: ast.AST) -> str:
    """A written path as a finding says it: whole where short, else the file name it is built with
    ('opt.txt' of a long os.path.join), else its first 60 characters and an ellipsis."""
    text = ast.unparse(path)
    if len(text) <= 60:
        return text
    names = [n.value for n in ast.walk(path) if isinstance(n, ast.Constant) and isinstance(n.value, str) and "." in n.value]
    return f"{names[-1]!r}" if names else text[:60] + "…"


def _data_parallel_functions(modules: list) -> dict[str, str]:
    """Functions of the project's own modules that wrap a model in nn.DataParallel (`create_model`
    returning `DataParallel(model, device_ids=opt.gpu_ids)`): name -> where."""
    found = _functions_calling(modules, "DataParallel", lambda call, fn: _name_of(_dotted(call.func)) == "DataParallel"
                               and not _one_listed_gpu(call))
    # A subclass of it (`class CustomDataParallel(nn.DataParallel)`) is one too.
    found.update({cls.name: f"a DataParallel subclass at {_at(module, cls.lineno)}" for module in modules
                  for cls in ast.walk(module) if isinstance(cls, ast.ClassDef)
                  and any(_name_of(_dotted(b)) == "DataParallel" for b in cls.bases)})
    return _grown(modules, found)


def _loading_functions(modules: list) -> tuple[dict[str, str], dict[str, set[str]]]:
    """Functions of the project's own modules (and classes, through their __init__) that read a
    checkpoint with torch.load and no map_location, without a rank check: name -> where. Called on
    every rank, each loads it onto the GPU it was saved from. Beside them, the method names that
    other classes of the project define without such a load (sockeye's `Batch.load(device)` beside
    `ParallelDataSet.load`), each with the classes whose method loads: a call of one stands for the
    loading method only on an object of such a class (`receiver_of_helper`)."""
    out: dict[str, str] = {}
    owner = {id(f): c.name for module in modules for c in ast.walk(module) if isinstance(c, ast.ClassDef) for f in c.body}
    loaders: dict[str, set[str | None]] = {}  # name -> the classes whose method of that name loads (None: a function)
    idle: set[str] = set()  # method names some class defines without a loose load
    for module in modules:
        shadowed = _shadowed(module)
        for node in ast.walk(module):
            if id(node) in shadowed:
                continue
            if isinstance(node, ast.ClassDef):
                if any(_name_of(_dotted(b)).endswith("Dataset") for b in node.bases):
                    continue  # a Dataset's torch.load reads its data, not a checkpoint
                init = next((b for b in node.body if isinstance(b, ast.FunctionDef) and b.name == "__init__"), None)
                fn, name = init, node.name
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                fn, name = node, node.name
            else:
                continue
            if fn is None:
                continue
            guarded_lines = _guarded_lines(fn, with_else=True)
            for n in ast.walk(fn):
                if isinstance(n, ast.Call) and _dotted(n.func) == "torch.load" and n.lineno not in guarded_lines \
                        and n.args and _loose_load(n) and not _mentions_rank_value(n.args[0]) and not _data_file(n.args[0]):
                    fixed = _map_location(n)  # (or one GPU named by number: map_location='cuda:0')
                    onto = f" onto {ast.unparse(fixed)[:30]}" if fixed is not None else ""
                    out[name] = f"torch.load{onto} at {_at(module, n.lineno)}"
                    loaders.setdefault(name, set()).add(owner.get(id(node)) if isinstance(node, ast.FunctionDef) else None)
                    break
            else:
                if id(node) in owner:
                    idle.add(name)
    return out, {name: classes for name, classes in loaders.items() if name in idle and None not in classes}


def _imported_definitions(modules: list, imports) -> dict[str, set[str]]:
    """Names the script imports from a project module that defines them itself (`from utils import
    load_model`, utils.py holding `def load_model`): name -> that module's file, as `_at` names it
    (the files, where alternatives import it: `if 'cifar' in cfg.dataset: from datasets.cifar import
    get_datasets` / `elif ...: from datasets.imagenet import get_datasets`)."""
    out: dict[str, set[str]] = {}
    for node in imports:
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
            continue
        found = [m for m in modules if _module_name(m) == node.module or _module_name(m).endswith("." + node.module)]
        if len(found) != 1 or not getattr(found[0], "gpurig_where", None):
            continue
        defined = {n.name for n in found[0].body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        for a in node.names:
            if a.name in defined:
                out.setdefault(a.asname or a.name, set()).add(found[0].gpurig_where)
    return out


_FIRST_FILE = re.compile(r"([\w.-][\w./-]*\.py):\d+")


def _project_helpers(modules: list, name_aliases: dict[str, set[str]], imports=(), calls=()) -> tuple[dict, ...]:
    """What the project's own functions and classes do on every rank that a rule judges at their
    call: (download, save, load without map_location, DataParallel, global rank as device), each
    name -> where; then the loading method names other classes define without loading, with the
    classes that load (`receiver_of_helper`). A class or function picked by a name first (`Exp =
    Exp_Informer` ... `Exp(args)`) stands under that name too. A name the script imports from a
    module defining it is that module's: another module's function of the same name says nothing of it."""
    loading, ambiguous = _loading_functions(modules)
    found = (_downloading_functions(modules, calls), _saving_functions(modules), loading,
             _data_parallel_functions(modules), _global_rank_device_functions(modules))
    imported = _imported_definitions(modules, imports)
    for name, files in imported.items():
        for helpers in found:
            first = _FIRST_FILE.search(helpers.get(name, ""))
            if first is not None and first.group(1) not in files:
                del helpers[name]
    # `from src.train import main as app_main`: the module's function under the name it was given
    renamed = {a.asname: a.name for node in imports if isinstance(node, ast.ImportFrom) for a in node.names
               if a.asname and a.asname != a.name and a.asname in imported}
    for helpers in found:
        for alias, name in renamed.items():
            first = _FIRST_FILE.search(helpers.get(name, ""))
            if alias not in helpers and first is not None and first.group(1) in imported[alias]:
                helpers[alias] = helpers[name]
        for alias, targets in name_aliases.items():
            target = next((t for t in sorted(targets) if t in helpers), None)
            if alias not in helpers and target is not None:
                helpers[alias] = f"through {target}(): {helpers[target]}"
    return (*found, ambiguous)


def receiver_of_helper(func: str, ambiguous: dict[str, set[str]], instances: dict[str, str], name_aliases: dict[str, set[str]]) -> bool:
    """Whether a call `func` may stand for the project's helper of its name: always, unless several
    classes define that method and only some of them load (`ambiguous`); then only on an object the
    script built from one of those (`instances`: name -> the class it was built from; `Exp =
    Exp_Forecast` ... `exp = Exp(args)` stands for the classes the name was picked from)."""
    head, _, short = func.rpartition(".")
    if short not in ambiguous:
        return True
    kind = instances.get(head)
    return kind is not None and bool(({kind} | name_aliases.get(kind, set())) & ambiguous[short])

