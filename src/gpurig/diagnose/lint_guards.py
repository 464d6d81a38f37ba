"""The guards around a statement, for `gpurig lint`: whether a test picks ranks (`rank == 0`,
`accelerator.is_main_process`; remembered per node in `_RANK_CACHE`), whether it passes every rank
but one, whether a value holds the global or the local rank, which environment keys a branch
leaves unset, and the branches that leave a block or ask for a GPU.
"""

from __future__ import annotations

import ast
import re

from gpurig.diagnose.lint_nodes import (
    GPU_NAMES,
    RANK_NAMES,
    RANK_WORDS,
    _dotted,
    _is_const,
    _kw,
    _leaf_name,
    _name_of,
    _one_device,
)

# Decorators that run a function on the main process only: Lightning's `@rank_zero_only`, mmcv and
# mmengine's `@master_only`, Accelerate's `@accelerator.on_main_process` / `on_local_main_process`.
_MAIN_ONLY_DECORATORS = frozenset({"rank_zero_only", "master_only", "main_process_only", "on_main_process",
                                   "on_local_main_process"})


def runs_on_main_only(fn: ast.AST) -> bool:
    """A function decorated to run on the main process alone: its body is one rank's code."""
    return any(_name_of(_dotted(d.func if isinstance(d, ast.Call) else d)) in _MAIN_ONLY_DECORATORS
               for d in getattr(fn, "decorator_list", ()))


def _not_distributed(node: ast.AST) -> bool:
    """`not args.distributed`, `not args.multiprocessing_distributed`: true on every rank of a run
    started another way (torchrun without the flag), so it does not pick one rank."""
    return isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) and "distributed" in _dotted(node.operand).lower()


# A flag that says the run is distributed: `if args.distributed:`, `if ddp:`, `if is_distributed:`.
_DISTRIBUTED_FLAG = re.compile(r"(?:is_|use_)?(?:multiprocessing_)?distributed(?:_train(?:ing)?)?|(?:is_|use_)?ddp"
                               r"|(?:use_)?dist_train(?:ing)?|(?:is_|use_|with_)?(?:horovod|hvd)", re.IGNORECASE)


def _single_process_branch(test: ast.AST) -> tuple[bool, bool]:
    """(body, else) of `if <test>:` that run in one process only: the `else` of `if args.distributed:`
    or of `if dist.is_initialized():`, the body of `if not args.distributed:` (a run without the flag,
    or without a process group, is one process)."""
    negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    flag = test.operand if negated else test
    if isinstance(flag, ast.Call) and not flag.args:  # dist.is_initialized(), is_dist_avail_and_initialized()
        name = _dotted(flag.func).rpartition(".")[2]
        if name != "is_initialized" and not (name.startswith("is_dist") and name.endswith("initialized")):
            return False, False
    elif isinstance(flag, ast.Subscript) and isinstance(flag.slice, ast.Constant) and isinstance(flag.slice.value, str):
        if not _DISTRIBUTED_FLAG.fullmatch(flag.slice.value):  # (`if args["horovod"]:`, a config read as a dict)
            return False, False
    elif not isinstance(flag, (ast.Name, ast.Attribute)) or not _DISTRIBUTED_FLAG.fullmatch(_dotted(flag).rpartition(".")[2]):
        return False, False
    return negated, not negated


def leaves_one_rank(stmt: ast.stmt, rank_test) -> bool:
    """After `stmt` one rank goes on: `if rank != 0: return`, `if rank == 0: ... else: continue` (the
    others leave), or one of those last in `if args.distributed:` (a run without the flag is one process).
    `rank_test(test)`: whether a test checks the rank."""
    if not isinstance(stmt, ast.If) or not stmt.body:
        return False
    if rank_test(stmt.test):
        return _exits(stmt.body, stmt.test) and not stmt.orelse or bool(stmt.orelse) \
            and isinstance(stmt.orelse[-1], (ast.Return, ast.Continue)) and not _all_but_one(stmt.test)
    return not stmt.orelse and _single_process_branch(stmt.test) == (False, True) and leaves_one_rank(stmt.body[-1], rank_test)


def _bypassed(test: ast.AST, word: str = "distributed") -> bool:
    """`not args.multiprocessing_distributed or rank % ngpus == 0`: an `or` that every rank passes
    when the run was started without that flag (torchrun, one process per node). `word`: what the
    negated flag must be named after."""
    return isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) and any(
        _not_distributed(v) and word in _dotted(v.operand).lower() for v in test.values)


def _flag_bypass(test: ast.AST) -> str:
    """`not args.multiprocessing_distributed or rank % ngpus == 0`: the flag's name (lowercase), where
    the rest of the `or` picks ranks; a guard of rank 0 only where the flag is on ("" otherwise)."""
    if not _bypassed(test, "multiprocessing"):
        return ""
    flags = [v for v in test.values if _not_distributed(v)]
    if len(flags) != 1 or not any(_rank_check(v) for v in test.values if v is not flags[0]):
        return ""
    return _dotted(flags[0].operand).rpartition(".")[2].lower()


def _framework_hooks(cls: ast.ClassDef, own_methods: set[tuple[str, str]]) -> tuple[set[str], set[int]]:
    """(names run though nothing names them, ids of methods run on every rank) of a class whose base is
    a framework's. A callback's (TrainerCallback, Lightning's Callback) `on_*` hooks run, in every
    process. A Trainer's `save_model` is called by its checkpointing in every process, whatever guards
    the script's own calls of a `save_model` (another function of the file, often)."""
    bases = [_name_of(_dotted(b)) for b in cls.bases]
    methods = [f for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    called = {f.name for f in methods if f.name.startswith("on_")} if any(b.endswith("Callback") for b in bases) else set()
    trainer = any(b.endswith("Trainer") and all(c != b for c, _ in own_methods) for b in bases)  # (not a class of the file)
    return called, {id(f) for f in methods if trainer and f.name in ("save_model", "_save_checkpoint")}


_STATE_HOOKS = {"register_save_state_pre_hook": "save_state", "register_load_state_pre_hook": "load_state"}


def only_called(scan, where) -> set[str]:
    """The functions of this file all of whose calls are `where(call, guarded)`, or made from
    such a function (grown until nothing changes)."""
    only: set[str] = set()
    # Accelerate runs a hook given to `accelerator.register_save_state_pre_hook(save_model_hook)` inside
    # each `accelerator.save_state()` (load: `load_state()`): those calls are the hook's calls.
    hooks = {_STATE_HOOKS[_name_of(_dotted(c.func))]: c.args[0].id for c, _ in scan.calls
             if _name_of(_dotted(c.func)) in _STATE_HOOKS and c.args and isinstance(c.args[0], ast.Name) and c.args[0].id in scan.defined}
    # (`torch.save(...)` is no call of this file's `save()`: a name a module was imported as is no object of it)
    modules = {a.asname or a.name.partition(".")[0] for node in scan.imports if isinstance(node, ast.Import) for a in node.names}
    # (`model.train()` is no call of the file's function `train`: an object's method is one of a class)
    methods = {m for _, m in scan.own_methods}
    while True:
        sites: dict[str, list[bool]] = {}
        for call, guarded in scan.calls:
            # f(...) and self.f(...) both count as calls of a function f defined in this file.
            name = call.func.id if isinstance(call.func, ast.Name) else (
                call.func.attr if isinstance(call.func, ast.Attribute) and _dotted(call.func).partition(".")[0] not in modules
                and (call.func.attr in methods or call.func.attr in hooks) else None)
            name = hooks.get(name, name) if isinstance(call.func, ast.Attribute) else name
            if name in scan.defined:
                inside = any(f in only for f in scan.enclosing.get(id(call), ()))
                sites.setdefault(name, []).append(where(call, guarded) or inside)
        grown = {name for name, flags in sites.items() if flags and all(flags)} - scan.worker_functions
        if grown <= only:
            return only
        only |= grown


def first_functions(scan) -> set[str]:
    """Resolve the `with` sections of the file's own rank-first context managers into `first`,
    then the functions of this file only ever called inside rank-first sections (or from them):
    the calls they make run on rank 0 first too."""
    for name in scan.first_managers:
        scan.first |= scan.first_pending.get(name, set())
    return only_called(scan, lambda call, guarded: id(call) in scan.first)


def one_rank_functions(scan) -> set[str]:
    """Functions of this file that are only ever called under a rank check (never the function
    the workers run: every rank runs that one)."""
    return only_called(scan, lambda call, guarded: guarded)


def note_one_rank_value(scan, node: ast.Assign, name: str, guarded: bool) -> None:
    """`output_dir = None`, then under a rank check (`guarded`) `output_dir = get_outdir(...)`: the
    name holds a value on one rank only, so `if output_dir is not None:` picks that rank, as a rank
    check would (timm's train.py). A value given it later on every rank undoes that."""
    if name and len(node.targets) == 1 and _sets_bool(node) and not _DISTRIBUTED_FLAG.fullmatch(name.rpartition(".")[2]):
        # `self.verbose = True`, then under a rank check `self.verbose = False` (T5+CL's trainer): a flag
        if not (guarded or scan.in_rank_test):
            scan.bools[name] = node.value.value
        elif scan.bools.get(name, node.value.value) != node.value.value:
            scan.flags.add(name)
        return
    if not name or len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
        return
    if _is_const(node.value, None):
        if not guarded:
            scan.unset.add(name)
    elif guarded and name in scan.unset:
        scan.flags.add(name)
    elif name in scan.unset:
        scan.unset.discard(name)
        scan.flags.discard(name)


def flags_on(names: set[str], calls, modules, configs) -> set[str]:
    """Those of `names` (flags, lowercase) that are on by default: an option's `default=True`, or
    set True (and never False) in the project's modules or in every shipped config naming it."""
    from gpurig.diagnose.lint_nodes import _option_defaults
    from gpurig.diagnose.lint_rendezvous import _fixed_in_configs

    values: dict[str, set] = {}
    for key, found in _option_defaults(calls).items():
        values.setdefault(key.lower(), set()).update(found)
    for module in modules:
        for n in ast.walk(module):
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, bool):
                for t in n.targets:
                    leaf = _leaf_name(t)
                    if leaf and leaf.lower() in names:
                        values.setdefault(leaf.lower(), set()).add(n.value.value)

    def pick(key: str, value) -> bool:
        return key.lower() in names and isinstance(value, bool)

    on = _fixed_in_configs(configs, pick, lambda v: v is True)  # on in every shipped config naming it
    for key in _fixed_in_configs(configs, pick, lambda v: True):  # every key named at all
        values.setdefault(key.lower(), set()).add(key in on)
    return {n for n in names if values.get(n) == {True}}


_RANK_CACHE: dict[int, tuple[ast.AST, bool]] = {}


def _picks_one(test: ast.AST) -> bool:
    """A rank check that tells the ranks of a run apart (`rank == 0`, `dist.get_rank() != 0`, `rank %
    ngpus == 0`), not one that holds on every rank of a launched run and so only tells a launched run
    from a plain one (`local_rank != -1`, `"LOCAL_RANK" in os.environ`)."""
    if not _mentions_rank(test):
        return False
    for n in ast.walk(test):
        if isinstance(n, ast.Compare):
            if any(isinstance(op, (ast.In, ast.NotIn)) for op in n.ops) and any(_dotted(c).endswith("environ") for c in n.comparators):
                return False
            if any(isinstance(x, ast.UnaryOp) and isinstance(x.op, ast.USub) and _is_const(x.operand, 1) for x in (n.left, *n.comparators)):
                return False
    # (`if os.environ.get("LOCAL_RANK"):` alone: set or not)
    return not (isinstance(test, ast.Call) and _name_of(_dotted(test.func)) in ("get", "getenv"))


def _picks(test: ast.AST) -> bool:
    return _picks_one(test) and not _all_but_one(test)  # (`RANK != -1`: every rank of a run)


def rank_function(node: ast.AST) -> bool:
    """A small function of no arguments that returns a rank check (ANCE's `is_first_worker()`:
    `return not dist.is_initialized() or dist.get_rank() == 0`)."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.args.args or len(node.body) > 4:
        return False
    returns = [n.value for n in ast.walk(node) if isinstance(n, ast.Return)]
    return bool(returns) and all(isinstance(v, (ast.Compare, ast.BoolOp, ast.UnaryOp)) and _picks(v) for v in returns)


def rank_flags(modules: list) -> frozenset[str]:
    """What the project's own code computes from a rank check, by its last name: attributes it sets
    from one (HybrIK's `if opt.rank % opt.ngpus_per_node == 0: opt.log = True`, else False;
    `args.is_master = args.rank == 0`) and functions that return one (`rank_function`). Where the
    script tests `opt.log` or calls `is_first_worker()` in a test, it tests the rank."""
    out: set[str] = set()
    picked: dict[int, tuple[str, bool]] = {}  # attributes given True or False under a rank check: id(assign) -> (attr, value)
    given: list[tuple[str, bool, int]] = []  # every attribute given True or False
    for node in (n for module in modules for n in ast.walk(module)):
        if isinstance(node, ast.If) and _picks_one(node.test):
            # (True under `rank != 0` is not one: it holds on every rank but one)
            every_but_one = _all_but_one(node.test)
            picked.update((id(a), (t.attr, a.value.value)) for stmt in node.body for a in ast.walk(stmt) if _sets_bool(a)
                          and not (every_but_one and a.value.value) for t in a.targets if isinstance(t, ast.Attribute))
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Compare) and _picks(node.value):
            out.update(t.attr for t in node.targets if isinstance(t, ast.Attribute))
        elif rank_function(node):
            out.add(node.name)
        if _sets_bool(node):
            given += [(t.attr, node.value.value, id(node)) for t in node.targets if isinstance(t, ast.Attribute)]
    # True under a rank check; or False under one (`if self.args.gpu != 0: self.verbose = False`, in an
    # `if distributed:` or not) where it is True elsewhere (`self.verbose = True` before it, VL-T5's trainer).
    true_elsewhere = {a for a, v, i in given if v and i not in picked}
    out.update(attr for attr, value in picked.values() if value or attr in true_elsewhere)
    return frozenset(a for a in out if not _DISTRIBUTED_FLAG.fullmatch(a))


def _sets_bool(node: ast.AST) -> bool:
    return isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, bool)


def _mentions_rank(test: ast.AST) -> bool:
    """`_rank_check(test)`, remembered per node for the current lint (the same tests are asked about
    several times: by the scanner, by each rule)."""
    hit = _RANK_CACHE.get(id(test))
    if hit is not None and hit[0] is test:
        return hit[1]
    answer = _rank_check(test)
    _RANK_CACHE[id(test)] = (test, answer)
    return answer


def _rank_check(test: ast.AST) -> bool:
    """Whether a condition picks ranks: it names a rank (`rank == 0`, `dist.get_rank() != 0`,
    `args.rank % ngpus_per_node == 0`, `accelerator.is_main_process`, `trainer.is_global_zero`),
    or compares the process's GPU index with 0 (`if self.gpu_id == 0`). `not distributed or rank == 0`
    does not: launched without that flag, every rank passes it."""
    if _bypassed(test):
        return False
    # `accelerator.is_main_process or accelerator.distributed_type == DistributedType.DEEPSPEED`: under
    # DeepSpeed every rank passes (diffusers' scripts, for the save_state DeepSpeed needs on every rank)
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) and any(
            isinstance(v, ast.Compare) and _dotted(v.left).endswith("distributed_type") for v in test.values):
        return False
    for node in ast.walk(test):
        name = _leaf_name(node)
        if name is None and isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = node.value if node.value in ("RANK", "LOCAL_RANK") else None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str) \
                and node.slice.value.lower() in ("rank", "local_rank", "global_rank", "gpu", "gpu_id"):
            name = node.slice.value  # a setting kept in a dict: self.config["rank"], opt["rank"]
        if name and (any(w in name.lower() for w in RANK_WORDS) or name.lower() in RANK_NAMES):
            return True
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            zero = any(isinstance(x, ast.Constant) and x.value in (0, -1) for x in sides) or any(
                isinstance(x, (ast.List, ast.Tuple, ast.Set)) and any(isinstance(e, ast.Constant) and e.value in (0, -1) for e in x.elts)
                for x in sides)
            # (`self.device == 0`: a device held as its index, the local rank; a torch.device never equals 0)
            if zero and any((_leaf_name(x) or "").lower() in GPU_NAMES | {"device"} for x in sides):
                return True
    return False


def _exits(body: list[ast.stmt], test: ast.AST | None = None) -> bool:
    """The branch leaves (return, continue, raise). A raise leaves as a guard only where the test picks
    every rank but one (`if rank != 0: raise SystemExit`): `if local_rank >= device_count(): raise
    RuntimeError(...)` is a check of the machine, and every rank goes on past it."""
    if not body or not isinstance(body[-1], (ast.Return, ast.Continue, ast.Raise)):
        return False
    return not isinstance(body[-1], ast.Raise) or test is None or _all_but_one(test)


# dist.get_rank() and the projects' own wrappers of it (`utils.get_rank()`, MeMOTR's `distributed_rank()`)
_GLOBAL_RANK_CALL = re.compile(r"get_(?:global_|dist(?:ributed)?_|world_)?rank|(?:global|dist(?:ributed)?|world)_rank")


def _holds_global_rank(value: ast.AST, key: str = "RANK") -> bool:
    """`int(os.environ["RANK"])`, `os.environ.get("RANK")`, `os.getenv("RANK")`, `dist.get_rank()`,
    `hvd.rank()`, `accelerator.process_index`, a list of one of those (not LOCAL_RANK); with
    key="LOCAL_RANK", the same reads of the rank within the node. Looked at shallowly: it runs on every assignment of the file."""
    if isinstance(value, (ast.List, ast.Tuple)) and len(value.elts) == 1:  # `device_ids = [dist.get_rank()]`
        return _holds_global_rank(value.elts[0], key)
    if isinstance(value, ast.Call):
        func = _dotted(value.func)
        if key == "RANK" and (_GLOBAL_RANK_CALL.fullmatch(_name_of(func)) or func in ("hvd.rank", "horovod.rank")):
            return True  # (Horovod's rank() is global too; its local_rank() is the index on the node)
        if key == "LOCAL_RANK" and func in ("hvd.local_rank", "horovod.local_rank"):
            return True
        if func == "int" and value.args:
            return _holds_global_rank(value.args[0], key)
        if _name_of(func) in ("get", "getenv") and value.args:
            return isinstance(value.args[0], ast.Constant) and value.args[0].value == key
    if isinstance(value, ast.Subscript) and _dotted(value.value).endswith("environ"):
        return isinstance(value.slice, ast.Constant) and value.slice.value == key
    if isinstance(value, ast.Attribute):  # Accelerate's state: process_index is global, local_process_index this node's
        return value.attr == ("process_index" if key == "RANK" else "local_process_index")
    return False


def _env_read(node: ast.AST) -> str | None:
    """The variable `os.getenv("K")` / `os.environ.get("K")` reads, with no default; None for anything else."""
    if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str) and (_dotted(node.func) in ("os.getenv", "getenv") or _dotted(node.func).endswith("environ.get")):
        return node.args[0].value
    return None


def _env_tests(test: ast.AST) -> tuple[frozenset[str], frozenset[str]]:
    """(keys unset where the test is true, keys unset where it is false) for `"K" not in os.environ`
    and `"K" in os.environ`, `not os.getenv("K")` and `os.getenv("K")` (alone or joined with `and`/`or`
    as far as that stays sure)."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Constant) \
            and isinstance(test.left.value, str) and _dotted(test.comparators[0]).endswith("environ"):
        key = frozenset({test.left.value})
        if isinstance(test.ops[0], ast.NotIn):
            return key, frozenset()
        if isinstance(test.ops[0], ast.In):
            return frozenset(), key
    # `not os.getenv("K")`, `os.environ.get("K") is None` (and `os.getenv("K")` alone: set where true)
    read = _env_read(test.operand if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) else
                     test.left if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.IsNot))
                     and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None else test)
    if read is not None:
        unset_when_true = isinstance(test, ast.UnaryOp) or isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.Is)
        return (frozenset({read}), frozenset()) if unset_when_true else (frozenset(), frozenset({read}))
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return frozenset().union(*(_env_tests(v)[0] for v in test.values)), frozenset()
    # `any([x not in os.environ for x in ["RANK", "WORLD_SIZE", "MASTER_PORT", "MASTER_ADDR"]])`: one of
    # them is unset, so no launcher started the run (a launcher sets them all)
    if isinstance(test, ast.Call) and _dotted(test.func) == "any" and len(test.args) == 1 \
            and isinstance(test.args[0], (ast.ListComp, ast.GeneratorExp)) and len(test.args[0].generators) == 1:
        elt, gen = test.args[0].elt, test.args[0].generators[0]
        if isinstance(elt, ast.Compare) and isinstance(elt.ops[0], ast.NotIn) and isinstance(elt.left, ast.Name) \
                and _dotted(elt.comparators[0]).endswith("environ") and isinstance(gen.iter, (ast.List, ast.Tuple)):
            return frozenset(e.value for e in gen.iter.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)), frozenset()
    return frozenset(), frozenset()


def _all_but_one(test: ast.AST) -> bool:
    """A rank check true on every rank but one: `rank != 0`, `local_rank not in [-1, 0]`, `rank > 0`,
    `not is_main_process()`."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return True
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, right = test.ops[0], test.comparators[0]
        if isinstance(op, (ast.NotEq, ast.NotIn)):
            return True
        if isinstance(op, (ast.Gt, ast.GtE)) and isinstance(right, ast.Constant) and right.value in (0, 1):
            return True
    return False


def _is_main_test(test: ast.AST) -> bool:
    """`__name__ == "__main__"`."""
    return isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq) and {
        _dotted(test.left), getattr(test.comparators[0], "value", None)} >= {"__name__", "__main__"}


def _asks_for_gpu(test: ast.AST) -> bool:
    """`torch.cuda.is_available()` (negated or not): one branch has no GPU and needs no device."""
    return any(isinstance(n, ast.Call) and _name_of(_dotted(n.func)) == "is_available"
               for n in ast.walk(test))


# The frameworks that launch one process per device, and what a script may borrow from one without
# being launched by it: its loggers, callbacks and utilities, its seeding and rank-zero helpers.
_FRAMEWORK_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+((?:accelerate|lightning|pytorch_lightning|deepspeed)\b[\w.]*)[ \t]+import"
                               r"[ \t]+([^\n#]*)|import[ \t]+((?:accelerate|lightning|pytorch_lightning|deepspeed)\b[\w.]*))", re.M)
_HELPER_MODULE = re.compile(r"[a-z_]+(?:\.(?:pytorch|fabric))?\.(?:loggers|callbacks|utilities|utils|logging)(?:\.\w+)*")
_HELPER_NAMES = frozenset({"seed_everything", "rank_zero_only", "rank_zero_info", "rank_zero_warn", "set_seed", "get_logger"})


def _framework_launched(text: str, names: set[str]) -> bool:
    """The script imports Accelerate, Lightning or DeepSpeed for more than their helpers (not only
    `from pytorch_lightning.loggers import CSVLogger` or `from pytorch_lightning import seed_everything`
    in a script that runs itself in one process), or fits a trainer built elsewhere (`trainer.fit`)."""
    imports = _FRAMEWORK_IMPORT.findall(text)
    return bool(imports) and (not all(_borrows_helpers(*found) for found in imports) or "fit" in names)


def _borrows_helpers(module: str, imported: str, plain: str) -> bool:
    """One import of a framework takes only its helpers: from a helper submodule (`from
    pytorch_lightning.loggers import ...`, `import lightning.pytorch.callbacks`), or helper names
    (`from pytorch_lightning import seed_everything`; a parenthesised list is not read)."""
    if _HELPER_MODULE.fullmatch(module or plain):
        return True
    taken = {name.strip(" ()").split(" ")[0] for name in imported.split(",") if name.strip(" ()")}
    return bool(module) and "(" not in imported.replace("()", "") and taken <= _HELPER_NAMES


def _runs_on_every_rank(scan, calls: list, names: set[str], text: str, project_trainer: bool = False) -> bool:
    """Whether the script is one that every rank runs whole: it starts or joins a process group, or
    is launched one process per GPU by its framework (Horovod, a Hugging Face Trainer read from the
    command line, Accelerate, Lightning, DeepSpeed)."""
    # (torch.distributed's own get_rank()/get_world_size() alone are no sign: they fail without a group,
    # so a script that never starts one calls them only on a path it does not take, a vestigial
    # `--use_ddp`; a project's own `get_rank()` may start or find one)
    own_asks = bool(names & {"get_rank", "get_world_size"}) and re.search(
        r"(?<!dist\.)(?<!distributed\.)\b(?:get_rank|get_world_size)\s*\(", text) is not None
    distributed = bool(
        names & {"init_process_group", "DistributedDataParallel", "DDP", "DistributedSampler", "spawn",
                 "Accelerator", "init_distributed_mode", "init_distributed", "setup_distributed",
                 "init_distributed_device", "FullyShardedDataParallel", "FSDP", "fully_shard", "init_device_mesh"}
    ) or own_asks or "LOCAL_RANK" in text or bool(scan.aliases & names) or (
        # (a script reading the launcher's WORLD_SIZE or RANK, alpaca-lora's `ddp = world_size != 1`, is run by one)
        re.search(r"""environ(?:\.get\(\s*|\[\s*)["'](?:WORLD_SIZE|RANK)["']""", text) is not None)
    # Horovod: one process per GPU (horovodrun/mpirun), each running the whole script. (TensorFlow's
    # multi-worker strategy is one process per machine: its caches are per machine, not shared.)
    distributed = distributed or (bool(re.search(r"^\s*(?:from|import)\s+horovod\b", text, re.M)) and "init" in names)
    # A Hugging Face Trainer script reading its TrainingArguments from the command line: written for
    # `torchrun --nproc_per_node N` (or `deepspeed`), one process per GPU, each running the whole script.
    # Any Trainer of that family counts: Seq2SeqTrainer, TRL's SFTTrainer (read by TrlParser, a
    # HfArgumentParser), a project's own subclass or copy.
    # (`project_trainer`: the Trainer is built in the project's modules, `setup_trainer()`.)
    distributed = distributed or (bool(names & {"HfArgumentParser", "TrlParser"}) and (project_trainer or (
        any(n.endswith("Trainer") for n in names) and ("transformers" in text or "trl" in text))))
    # ... or TrainingArguments given a DeepSpeed config in the script: run by the `deepspeed` launcher
    distributed = distributed or any(_name_of(f).endswith("TrainingArguments") and _kw(c, "deepspeed") is not None
                                     and not _is_const(_kw(c, "deepspeed").value, None) for c, f, _ in calls)
    if not distributed and _framework_launched(text, names):
        # Launched by the framework: one process per device, unless every Trainer / Fabric the
        # script builds asks for one device (`devices=1`, or a setting of the script equal to 1).
        runners = [c for c, f, _ in calls if _name_of(f) in ("Trainer", "Fabric")]
        distributed = not runners or not all(_one_device(c, scan.settings) for c in runners)
    return distributed


def _never_run(scan, call: ast.Call) -> bool:
    """In a function of this file that nothing in it calls or names: not run by this script."""
    inside = scan.enclosing.get(id(call), ())
    # (`__init__` and the other special methods run without being named: building the object runs them)
    return bool(inside) and inside[-1] in scan.defined and inside[-1] not in scan.referenced \
        and not (inside[-1].startswith("__") and inside[-1].endswith("__"))


def _never_destroys(scan, calls: list) -> bool:
    """Whether none of the script's destroy_process_group calls ends the default group of a run that
    ends normally, on every rank: each destroys a subgroup (`destroy_process_group(group)`), or is
    under a rank check (`if rank in [-1, 0]: ... else: destroy...`: the others never do), or in an
    exception handler (`except KeyboardInterrupt:`), or in a function of this file run only from
    handlers (`cleanup()`), or that nothing runs, but for a function that starts the group itself
    (a file run from elsewhere: its `main()` starts and ends the group, nothing in the file calls it)."""
    # The functions that start the group: call init_process_group, or a function of this file that does.
    starts = {scan.enclosing[id(c)][-1] for c, f, _ in calls if _name_of(f) == "init_process_group" and scan.enclosing.get(id(c))}
    starts |= {fn for c, f, _ in calls if _name_of(f) in starts for fn in scan.enclosing.get(id(c), ())}

    def ends_nothing(call: ast.Call, guarded: bool) -> bool:
        inside = scan.enclosing.get(id(call), ())
        group = _kw(call, "group")
        return bool(call.args) or (group is not None and not _is_const(group.value, None)) or guarded \
            or id(call) in scan.handled_destroys or (_never_run(scan, call) and inside[-1] not in starts) or (
                bool(inside) and inside[-1] in scan.defined and inside[-1] in scan.run_in_handlers
                and inside[-1] not in scan.run_outside_handlers)

    destroys = [(c, g) for c, f, g in calls if _name_of(f) == "destroy_process_group"]
    return bool(destroys) and all(ends_nothing(c, g) for c, g in destroys)


def _checks_a_file(test: ast.AST) -> bool:
    """`os.path.exists(p)`, `not Path(p).is_file()` and the like: a test of whether a file is there."""
    return any(isinstance(n, ast.Call) and _name_of(_dotted(n.func)) in ("exists", "isfile", "isdir", "is_file", "is_dir")
               for n in ast.walk(test))


def _walks_container(loop: ast.AST) -> bool:
    """A `for` over a literal collection, a dict's keys/values/items, or sorted(...) of one."""
    it = getattr(loop, "iter", None)
    if isinstance(it, ast.Call) and _name_of(_dotted(it.func)) in ("sorted", "reversed") and it.args:
        it = it.args[0]
    if isinstance(it, (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.Constant)):
        return True
    return isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in ("items", "keys", "values")


def _conjuncts(test: ast.AST) -> frozenset[str]:
    """The parts of an `and` test, each as its dump (`a and (b and c)`: a, b, c); the test itself otherwise."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return frozenset().union(*(_conjuncts(v) for v in test.values))
    return frozenset((ast.dump(test),))
