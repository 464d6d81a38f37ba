"""What `gpurig lint` reads in a script: one pass of Python's `ast` over it (`_Scanner`) that keeps
the calls and assignments the rules judge, with the rank checks around them; and, for a big
script, the same pass one top-level statement at a time (`_stream_scan`), so its whole tree is
never held.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from gpurig.diagnose.lint_assigns import _AssignScan
from gpurig.diagnose.lint_calls import normalize_call
from gpurig.diagnose.lint_compact import _CompactScan
from gpurig.diagnose.lint_followups import _late_test, fixed_epoch
from gpurig.diagnose.lint_guards import (
    _all_but_one,
    _asks_for_gpu,
    _bypassed,
    _checks_a_file,
    _conjuncts,
    _env_tests,
    _flag_bypass,
    _framework_hooks,
    _is_main_test,
    _mentions_rank,
    _picks_one,
    _single_process_branch,
    _walks_container,
    leaves_one_rank,
    rank_function,
    runs_on_main_only,
)
from gpurig.diagnose.lint_nodes import (
    _FETCH_NAME,
    _LAUNCHER_KEYS,
    _SILENCERS,
    _calls_barrier,
    _device_arg,
    _dotted,
    _if_chain,
    _is_const,
    _leaf_name,
    _name_of,
    _sampler_shuffle,
    _Walker,
    _worker_started,
)
from gpurig.diagnose.lint_paths import private_names
from gpurig.diagnose.lint_project import _is_download_call

_ADDRESS_KEYS = frozenset({"MASTER_PORT", "MASTER_ADDR"})

# A context manager that lets one rank run its body first while the others wait for it.
# A file lock serializes the ranks the same way: the first downloads, the others find the files.
_RANK_FIRST = re.compile(r"(?:main_process|rank|zero|master)_first$|(?:^|\.)\w*(?:FileLock|file_lock)$")

_BRANCHING = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


class _Scanner(_AssignScan, _CompactScan, _Walker):
    """Walks the tree remembering whether the current statement only runs on one rank."""

    def __init__(self) -> None:
        self.calls: list[tuple[ast.Call, bool]] = []  # (call, guarded by a rank check)
        self.assigns: list[tuple[ast.Assign | ast.AnnAssign, bool]] = []
        self.enclosing: dict[int, tuple[str, ...]] = {}  # id(call) -> names of the functions around it
        self._guard = 0
        self._functions: list[str] = []
        self.defined: set[str] = set()
        # One pass collects what the rules need about the whole file (a walk per question is
        # what makes a linter slow on a big file):
        self.silenced = False  # print replaced, or a logging level that depends on the rank
        self.rank_names: set[str] = set()  # names holding the global rank
        self.constants: dict[str, Any] = {}  # NAME = constant
        self.device_before: dict[int, bool] = {}  # id(DDP call) -> set_device ran before it on its path
        self._path: list[bool] = []  # per open block: set_device already ran in it
        self._set_devices = 0
        self.sets_device_in: set[str] = set()  # functions that call set_device themselves
        self._device_conditions: set[frozenset[str]] = set()  # if-tests under which set_device ran (their `and` parts)
        self._held: list[frozenset[str]] = []  # the `and` parts of the if-tests whose bodies enclose this statement
        self.first: set[int] = set()  # ids of calls made by rank 0 first while the others wait
        self.aliases: set[str] = set()  # other names of DistributedDataParallel & co. (`as NativeDDP`)
        self.flags: set[str] = set()  # names holding a rank check's result (or a value only one rank sets)
        self.project_flags: frozenset[str] = frozenset()  # attributes and functions the project computes from a rank check
        self.device_setters: frozenset[str] = frozenset()  # the project's functions and classes that set the device
        self.rank_functions: set[str] = set()  # the file's own top-level functions that return a rank check
        self.multi_device_classes: set[str] = set()  # classes of the file whose __init__ puts parts on two devices
        self.data_parallel_classes: dict[str, str] = {}  # classes of the file made on a DataParallel -> that base (CompressAI's)
        self.multi_device_models: set[str] = set()  # names given one of them (`mp_model = ToyMpModel(dev0, dev1)`)
        self._devices: set[str] | None = None  # in a class's __init__: the devices its parts are moved to
        self._init_devices: dict[int, set[str]] = {}  # id(__init__ of a class being read) -> those devices
        self.unset: set[str] = set()  # names set to None on every rank (a value under a rank check makes them flags)
        self.bools: dict[str, bool] = {}  # names set True or False on every rank (the other under a rank check: flags)
        self.in_rank_test = 0  # open `if` blocks (either branch) of a rank test
        # `if rank == 0: saver = ModelSaver(d) else: saver = NoOp()`: names bound to a null object on some
        # ranks and to a real one under a rank check; what their methods do happens on that rank alone.
        self.null_bound: set[str] = set()
        self._fors: list[ast.For] = []  # the `for` loops around the statement being visited
        self.fixed_epochs: list[ast.Call] = []  # set_epoch(args.epoch) in an epoch loop: never changes
        # Tests read again once the whole file is scanned (a flag set further down; see lint_followups.resolve_late):
        self.group_gates: set[str] = set()  # flags the process group starts under (`if args.distributed: init_process_group`)
        self._gate_names: list[str] = []  # the plain-flag tests of the `if` bodies being visited
        self._late: list[tuple] = []  # enclosing tests that were no rank check when visited
        self.late_calls: list[tuple[int, tuple]] = []  # (index in `calls`, those tests)
        self.guard_bound: set[str] = set()
        self.flag_guarded: dict[int, str] = {}  # `if not args.multiprocessing_distributed or rank == 0:` -> the flag
        self._hooks: set[int] = set()  # methods a framework calls in every process
        self._flag_guards: list[str] = []
        self._asserted_off: set[str] = set()  # `assert not opt.evolve, '--evolve is not compatible with DDP'`
        self._first = 0
        self._prefetched: list[set[str]] = []  # per open block: what rank 0 called alone before a barrier
        self._states: list[list] = []  # the open blocks' states (see block_start)
        # `with rank0_first():` where the script defines rank0_first itself (a @contextmanager that
        # waits at a barrier): known only once its def is read, which may come after the `with`.
        self.first_managers: set[str] = set()  # such context managers of this file
        self.first_pending: dict[str, set[int]] = {}  # manager name -> ids of calls in its `with` bodies
        self._pending: list[str] = []
        self.worker_functions: set[str] = set()  # functions given to mp.spawn / Process(target=) to run
        self.imports: list[ast.Import | ast.ImportFrom] = []  # every import statement, at any depth
        self.first_stmt: ast.stmt | None = None
        # Facts about every call, kept even where the call itself is not (see `compact`):
        self.short_names: set[str] = set()  # the last name of every function called
        self.cuda_call = False  # some call names cuda (x.cuda(), torch.cuda.*)
        self.set_epoch_call = False
        self._loops = 0  # loops around the statement being visited
        self.nested_loop = False  # a loop inside a loop somewhere (an epoch loop around a batch loop)
        self.set_device_call = False
        # compact: keep only the calls and assignments some rule judges (a big script read in
        # groups of statements: what is not kept is freed with its group). `keep_names` holds the
        # functions the file defines (read from its text first: a call may come before its def).
        self.compact = False
        self.keep_names: set[str] = set()
        self.import_tops: frozenset[str] = frozenset()  # (compact mode: the top names the script imports, `_project_roots`'s tops)
        self.unjudged: frozenset[str] = frozenset()  # judged call names no chosen rule looks at
        self.local_names: set[str] = set()  # names imported from the project's own modules
        self.local_roots: set[str] = set()  # the project's own modules, as imported
        self.keep_plain = False
        self.script_dir = None
        self.local_rank_names: set[str] = set()  # names assigned the rank within the node (LOCAL_RANK)
        self.fallback_calls: set[int] = set()  # calls made only where no launcher set its variables
        self.assigned_in: dict[int, str] = {}  # id(`os.environ["MASTER_PORT"] = ...`) -> the function around it
        self.env_fallback: set[int] = set()  # ids of `os.environ[K] = v` run only where K is not set (and of
        # init_process_group calls run only where the launcher's keys are not set)
        self._env_absent: list[frozenset[str]] = []  # per open `if`: environment keys known to be unset
        self._no_env = 0  # how many of them are empty (most: a call looks at the list only where one is not)
        self.own_methods: set[tuple[str, str]] = set()  # (class, method) defined in this file
        self.class_bases: dict[str, set[str]] = {}  # class defined in this file -> the names of its bases
        self.spawns_in: set[str] = set()  # functions that start the workers (mp.spawn) themselves
        self.settings: dict[str, set] = {}  # last name -> the constant values the script assigns it (x = 1, x: int = 1)
        self.buffers: set[str] = set()  # names bound to a private file (io.BytesIO(), a temporary file)
        self.params: dict[str, list[str]] = {}  # the file's functions: name -> parameter names (the first def)
        self.name_aliases: dict[str, set[str]] = {}  # `Exp = Exp_Informer`: name -> the names it was given
        # (function, name) -> the path expression a name is given once there (`log = os.path.join(out, "log.txt")`);
        # None where the function gives it more than one value.
        self.path_vars: dict[tuple[str, str], ast.AST | None] = {}
        self.path_attrs: dict[str, tuple | None] = {}  # the same for an attribute, given once in the file: (value, function)
        self.touch_only: set[int] = set()  # ids of open() calls of a `with` whose body is just `pass`
        # Models moved to a device before DDP wraps them: (model's name, the device expression, the
        # open blocks, line): `model.cuda(args.gpu)`, `model = Net().to(device)`.
        self.moves: list[tuple[str, ast.AST, tuple[int, ...], int]] = []
        self.device_vars: dict[str, ast.AST] = {}  # `device = torch.device("cuda", local_rank)`: name -> value
        self.device_inside: dict[str, tuple[str, ...]] = {}  # name -> the functions around its assignment
        self.device_maps: list[tuple[ast.Dict, tuple[str, ...]]] = []  # `device_map = {"": ...}`, where
        self._handlers = 0  # except-handlers around the current node
        self._tries = 0  # try bodies with a handler around the current node
        self._cache_checks = 0  # file-existence checks around the current node, in a rank-first section
        # Calls in a rank-first section that fill a cache the others then read (under `except` after a
        # failed load, or under a check that the file exists): run by the first rank only.
        self.cache_fills: set[int] = set()
        # what from_pretrained(..., local_files_only=True) reads (`model_args.model_name_or_path`): a
        # folder of this machine, for the tokenizer and config loaded from the same name too
        self.offline_sources: set[str] = set()
        self.handled_destroys: set[int] = set()  # destroy_process_group calls in an except handler
        self.run_in_handlers, self.run_outside_handlers = set[str](), set[str]()  # called (or handed on) in, out of them
        self.summed_ranks: set[str] = set()  # `args.rank = args.node_rank * ngpus_per_node + gpu`
        self._blocks: list[int] = []  # the open blocks (a statement's path: a move counts for a DDP under it)
        self._block_count = 0
        self.blocks_of: dict[int, tuple[int, ...]] = {}  # id(DDP or from_pretrained call) -> its open blocks
        self.referenced: set[str] = set()  # every name read, and every attribute named (a function used anywhere)
        self.attributes: set[str] = set()  # every attribute named (`args.master_port`: an option read)
        # Functions of this file that build a DistributedSampler: name -> (how it shuffles (see
        # `_sampler_shuffle`), the line of its first).
        self.sampler_functions: dict[str, tuple[tuple[str, int] | None, int]] = {}
        self._params: list[list[str]] = []
        self._defaults: list[ast.FunctionDef | ast.AsyncFunctionDef] = []  # the open functions (for their defaults)
        # `os.environ["MASTER_PORT"] = str(port)` with `port=29500` a parameter's default: (assign, function, parameter, index)
        self.port_params: list[tuple[ast.Assign, str, str, int]] = []
        self.main_calls: set[int] = set()  # ids of calls in the `if __name__ == "__main__":` block
        self.main_spawns = False  # that block starts the workers itself
        self.barriers = 0  # calls of dist.barrier() (under any name) walked so far
        self._main = 0
        self._classes: list[str] = []
        self.chains: list[tuple[tuple[int, int], ...]] = []  # per if / elif / else: its branches' lines
        self._elifs: set[int] = set()  # ids of the elif nodes of a chain already read

    def _block(self, stmts: list[ast.stmt]) -> list:
        state = self.block_start()
        for stmt in stmts:
            self.block_step(state, stmt)
        self.block_end(state)
        return state

    # A block is walked as start / one step per statement / end, so that a module read one
    # top-level statement at a time (a big file, see `_stream_scan`) is walked as one block.
    def block_start(self) -> list[int]:
        self._path.append(False)
        self._block_count += 1
        self._blocks.append(self._block_count)
        # (guards raised, rank-0-first sections raised, a barrier passed, the one-rank sections no barrier
        # has followed yet, what rank 0 alone called before a barrier since passed) in this block
        state: list = [0, 0, 0, [], set()]
        self._states.append(state)
        return state

    def block_step(self, state: list[int], stmt: ast.stmt) -> None:
        if self.first_stmt is None:
            self.first_stmt = stmt  # the script's first statement (its first line, for file-wide findings)
        before = self._set_devices
        # `if rank == 0: build()` / `barrier()` / `if rank != 0: build()`: the others come after rank 0.
        after_first = state[2] and isinstance(stmt, ast.If) and _all_but_one(stmt.test)
        self._first += after_first
        # `if rank == 0: CIFAR10(root, download=True)` / `barrier()` / `CIFAR10(root, download=True)`:
        # the later call finds what rank 0 fetched while the others waited.
        fetched = bool(state[4])  # (only a block where rank 0 fetched something is looked at by the calls)
        if fetched:
            self._prefetched.append(state[4])
        barriers = self.barriers
        self.visit(stmt)
        if fetched:
            self._prefetched.pop()
        self._first -= after_first
        if isinstance(stmt, ast.If) and not stmt.orelse and _mentions_rank(stmt.test) and not _all_but_one(stmt.test):
            state[3].append(stmt)  # read only if a barrier follows (most one-rank sections are not followed by one)
        if isinstance(stmt, ast.Expr) and self.barriers > barriers:  # it called dist.barrier() under some name
            state[2] = 1
            for section in state[3]:
                calls = [n for b in section.body for n in ast.walk(b) if isinstance(n, ast.Call)]
                state[4].update(_name_of(_dotted(n.func)) for n in calls)
                # Rank 0 fetched something (`download_weights(phi)`): whatever is built with
                # pretrained weights after the barrier finds them in the cache.
                if any(_is_download_call(n) or _FETCH_NAME.search(_name_of(_dotted(n.func))) for n in calls):
                    state[4].add("*")
            state[3].clear()
        # `if rank != 0: barrier()` ... work ... `if rank == 0: barrier()`: rank 0 goes first through the
        # work between the two; the second barrier ends that section.
        if self.barriers > barriers and isinstance(stmt, ast.If) and not stmt.orelse and _mentions_rank(stmt.test):  # (a barrier in its body)
            if state[1] and not _all_but_one(stmt.test):
                self._first -= state[1]
                state[1] = 0
            else:
                self._first += 1
                state[1] += 1
        if self._set_devices > before and (
                not isinstance(stmt, _BRANCHING) or getattr(stmt, "_both_set_device", False)):
            self._path[-1] = True  # set_device ran on the path of everything after this statement
        # `if rank != 0: return` guards everything after it in the same block (see leaves_one_rank); after
        # an unconditional `raise` (a code path retired with `raise RuntimeError("not supported")`) nothing runs.
        if leaves_one_rank(stmt, self._rank_test) or isinstance(stmt, ast.Raise):
            self._guard += 1
            state[0] += 1

    def block_end(self, state: list) -> None:
        self._states.pop()
        state.append(self._path.pop())  # (whether set_device ran on every path through the block)
        self._blocks.pop()
        self._guard -= state[0]
        self._first -= state[1]

    def visit_Module(self, node: ast.Module) -> None:
        self._block(node.body)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        for d in node.decorator_list:
            self.visit(d)
        if not self._functions and rank_function(node):
            self.rank_functions.add(node.name)  # (`def is_first_worker(): return ... get_rank() == 0`)
        # A function body starts unguarded: whether it runs on one rank depends on its callers.
        outer, self._guard = self._guard, 0
        outer_path, self._path = self._path, []
        outer_fors, self._fors = self._fors, []  # (a loop around a def does not run its body)
        outer_devices, self._devices = self._devices, self._init_devices.pop(id(node), self._devices)
        self._functions.append(node.name + "@every-rank" if id(node) in self._hooks else node.name)
        self._params.append([a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs])
        self.params.setdefault(node.name, self._params[-1])
        self._defaults.append(node)  # its constant defaults are read only where MASTER_PORT is set
        self.defined.add(node.name)
        if node.name == "prepare_data" or runs_on_main_only(node):  # Lightning calls prepare_data on one process per node (or globally) only
            self._guard += 1
        if node.name in _SILENCERS:
            self.silenced = True
        if any(_name_of(_dotted(d)) == "contextmanager" for d in node.decorator_list) and _calls_barrier(node):
            self.first_managers.add(node.name)
        self._block(node.body)
        self._functions.pop()
        self._params.pop()
        self._defaults.pop()
        self._guard = outer
        self._path = outer_path
        self._fors = outer_fors
        self._devices = outer_devices

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.own_methods |= {(node.name, f.name) for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
        self.class_bases[node.name] = {_name_of(_dotted(b)) for b in node.bases}
        self.data_parallel_classes.update((node.name, _dotted(b)) for b in node.bases if _name_of(_dotted(b)) == "DataParallel")
        called, hooks = _framework_hooks(node, self.own_methods)
        self.referenced |= called
        self._hooks |= hooks
        inits = {id(f): set() for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == "__init__"}
        self._init_devices.update(inits)
        outer, self._devices = self._devices, None  # (its other methods move no part for good)
        self.generic_visit(node)
        self._devices = outer
        if len(set().union(*inits.values())) >= 2:
            self.multi_device_classes.add(node.name)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self.referenced.add(node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.referenced.add(node.attr)
        self.attributes.add(node.attr)
        self.visit(node.value)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        """`SummaryWriter(log_dir) if rank == 0 else None`: the chosen side runs on one rank."""
        self.visit(node.test)
        guarded = self._rank_test(node.test)
        all_but_one = guarded and _all_but_one(node.test)
        self._guard += guarded and not all_but_one
        self.visit(node.body)
        self._guard += all_but_one - (guarded and not all_but_one)
        self.visit(node.orelse)
        self._guard -= all_but_one

    def visit_Assert(self, node: ast.Assert) -> None:
        test = node.test
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, (ast.Name, ast.Attribute)):
            self._asserted_off.add(_dotted(test.operand))
        self.generic_visit(node)

    def visit_If(self, node: ast.If) -> None:
        if id(node) in self._elifs:
            self._elifs.discard(id(node))
        elif node.orelse:  # one branch of an if / elif / else runs (see lint_rules.fold_alternatives)
            chain, elifs = _if_chain(node)
            self.chains.append(chain)
            self._elifs |= elifs
        self.visit(node.test)
        guarded = self._rank_test(node.test)
        # `if rank != 0:` / `if not is_main_process():` runs on every rank but one: its body is not
        # one-rank code (its `else` is).
        all_but_one = guarded and _all_but_one(node.test)
        self._guard += guarded and not all_but_one
        picks = guarded and _picks_one(node.test)
        self.in_rank_test += picks  # (either branch: a value set there differs between the ranks of a run)
        start = self._set_devices
        # The test's text only matters once some `if` set the device (a dump per `if` is what a big file pays for).
        # (`if args.use_gpu and args.distributed: set_device(...)`, then `if args.use_gpu:` / `if args.distributed:`
        # around the DDP: all the parts of that test hold there)
        test = _conjuncts(node.test) if self._device_conditions else None
        held = test.union(*self._held) if test is not None else None
        again = held is not None and any(c <= held for c in self._device_conditions)  # `if args.distributed:` again, after one that set the device
        if again:
            self._path.append(True)
        # `if "MASTER_PORT" not in os.environ: os.environ["MASTER_PORT"] = ...`: a default for a run
        # without a launcher, never used where the launcher set it.
        unset, set_ = _env_tests(node.test)
        self._env_absent.append(unset)
        self._no_env += not unset
        main = _is_main_test(node.test) and not self._functions
        self._main += main
        one_body, one_else = _single_process_branch(node.test)
        # `if not opt.evolve: train() else: ...` after `assert not opt.evolve` in the distributed set-up:
        # the branch that needs the option runs in a run of one process only
        flag = node.test.operand if isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not) else node.test
        if not (one_body or one_else) and self._asserted_off and isinstance(flag, (ast.Name, ast.Attribute)) \
                and _dotted(flag) in self._asserted_off:
            one_body, one_else = flag is node.test, flag is not node.test
        self._guard += one_body
        self._flag_guards.append(_flag_bypass(node.test))
        # `if not os.path.exists(cache): ... save(cache)`: in a section one rank goes through first,
        # the others find what it wrote and skip the write.
        checks_file = bool(self._first) and _checks_a_file(node.test)
        self._cache_checks += checks_file
        late = None if guarded or one_body else _late_test(node.test, *((self._functions[-1], self._params[-1]) if self._functions else ()))
        gate = _dotted(node.test) if isinstance(node.test, (ast.Name, ast.Attribute)) else None
        self._late += [late] if late else []
        self._gate_names += [gate] if gate else []
        self._held.append(test or frozenset())
        body = self._block(node.body)
        self._held.pop()
        del self._late[len(self._late) - bool(late):], self._gate_names[len(self._gate_names) - bool(gate):]
        self._flag_guards.pop()
        self._guard -= one_body
        self._main -= main
        self._no_env -= not self._env_absent.pop()
        if again:
            self._path.pop()
        in_body = self._set_devices > start
        if in_body:
            self._device_conditions.add(test if test is not None else _conjuncts(node.test))
        middle = self._set_devices
        self._env_absent.append(set_)
        self._no_env += not set_
        self._guard += all_but_one + one_else
        orelse = self._block(node.orelse)  # `else` of a rank check is also one-rank code
        self._guard -= all_but_one + one_else
        self._cache_checks -= checks_file
        if self._states:  # what rank 0 fetched before a barrier in a branch, the rest of this block finds
            self._states[-1][4] |= body[4] | orelse[4]
        self._no_env -= not self._env_absent.pop()
        in_else = self._set_devices > middle
        # `if not torch.cuda.is_available(): cpu else: set_device(...)`: the branch without a GPU needs no device.
        # `if args.distributed: set_device(args.gpu); init_process_group(...)` with no else: the path around
        # it is a run of one process, so every rank set its device (where the body sets it on all its paths).
        node._both_set_device = (in_body and in_else) or ((in_body or in_else) and _asks_for_gpu(node.test)) \
            or body[5] and one_else or orelse[5] and one_body  # type: ignore[attr-defined]
        self._guard -= guarded and not all_but_one
        self.in_rank_test -= picks

    def _loop_body(self, node: ast.For | ast.While | ast.AsyncFor) -> None:
        # A loop in a loop is an epoch loop around a batch loop, unless the inner one walks a
        # container (`for k, v in sorted(d.items())`, `for x in [a, b]`): that is no pass over data.
        self.nested_loop = self.nested_loop or (self._loops > 0 and not _walks_container(node))
        self._loops += 1
        self._block(node.body)
        self._loops -= 1
        self._block(node.orelse)

    def visit_For(self, node: ast.For) -> None:
        self.visit(node.iter)
        self._fors.append(node)
        self._loop_body(node)
        self._fors.pop()

    visit_AsyncFor = visit_For  # type: ignore[assignment]

    def visit_While(self, node: ast.While) -> None:
        self.visit(node.test)
        self._loop_body(node)

    def visit_With(self, node: ast.With) -> None:
        before = self._set_devices
        for item in node.items:
            self.visit(item)
        if self._set_devices > before and self._path:  # (`with Engine(args) as engine:` set the device before the body)
            self._path[-1] = True
        # `with accelerator.main_process_first():` / `training_args.main_process_first()`: the
        # main process runs the body first, the others after it (from its cache).
        # Under other names too: `idist.one_rank_first()`, `fabric.rank_zero_first()`,
        # `torch_distributed_zero_first(LOCAL_RANK)` (YOLOv5), `local_main_process_first()`.
        first = any(_RANK_FIRST.search(_dotted(getattr(i.context_expr, "func", i.context_expr)))
                    for i in node.items)
        for i in node.items:
            self.buffers.update(private_names(i.optional_vars, i.context_expr))
            if isinstance(i.context_expr, ast.Call) and len(node.body) == 1 and isinstance(node.body[0], ast.Pass):
                self.touch_only.add(id(i.context_expr))  # `with open(log, "w"): pass` only creates or empties it
        pending = [] if first else [_name_of(_dotted(i.context_expr.func)) for i in node.items
                                    if isinstance(i.context_expr, ast.Call)]
        self._first += first
        self._pending.extend(pending)
        self._block(node.body)
        del self._pending[len(self._pending) - len(pending):]
        self._first -= first

    def visit_Try(self, node: ast.Try) -> None:
        self._tries += bool(node.handlers)  # (`try: from_pretrained(x, local_files_only=True)` / `except: ...(x)`)
        self._block(node.body)
        self._tries -= bool(node.handlers)
        # `try: rank = int(os.environ["RANK"]) ... except KeyError:`: the handler runs where the
        # launcher set none of those keys (a run started by hand).
        read = frozenset(n.slice.value for b in node.body for n in ast.walk(b) if isinstance(n, ast.Subscript)
                         and _dotted(n.value).endswith("environ") and isinstance(n.slice, ast.Constant))
        for h in node.handlers:
            unset = read if read and h.type is not None and "KeyError" in ast.dump(h.type) else frozenset()
            self._env_absent.append(unset)
            self._no_env += not unset
            self._handlers += 1
            self._block(h.body)
            self._handlers -= 1
            self._no_env -= not self._env_absent.pop()
        self._block(node.orelse)
        self._block(node.finalbody)

    def visit_Call(self, node: ast.Call) -> None:
        normalize_call(node)
        if self._devices is not None and (device := _device_arg(node)) is not None:
            self._devices.add(device)
        func = _dotted(node.func)
        short = _name_of(func)
        self.short_names.add(short)
        if short == "barrier":
            self.barriers += 1
        if short == "from_pretrained" and node.args and not self._tries and any(
                k.arg == "local_files_only" and _is_const(k.value, True) for k in node.keywords):
            source = node.args[0]  # (`model_path if resume is None else resume`: either)
            self.offline_sources |= {_leaf_name(x) for x in ((source.body, source.orelse) if isinstance(source, ast.IfExp) else (source,))} - {None}
        if short == "destroy_process_group" and self._handlers:  # (never run where the run ends normally)
            self.handled_destroys.add(id(node))
        ran = self.run_in_handlers if self._handlers else self.run_outside_handlers
        ran.add(short)
        ran.update(a.id for a in node.args if type(a) is ast.Name)
        if "cuda" in func.split(".") or func.endswith(".cuda"):
            self.cuda_call = True
        if func.endswith("set_epoch") or (isinstance(node.func, ast.Attribute) and node.func.attr == "set_epoch"):
            if fixed_epoch(node, self._fors):
                self.fixed_epochs.append(node)
            self.set_epoch_call = True  # also on a receiver no dotted name reads: self.sampler["train"].set_epoch(...)
        if func.endswith(("set_device", "set_device_index")):
            self.set_device_call = True
        if short == "init_process_group" and any(keys & _LAUNCHER_KEYS for keys in self._env_absent):
            self.env_fallback.add(id(node))  # the group a run without a launcher starts
        if len(self._env_absent) > self._no_env and any(keys & _LAUNCHER_KEYS and keys & _ADDRESS_KEYS for keys in self._env_absent):
            self.fallback_calls.add(id(node))  # (a function only ever called so sets up a run nobody launched)
        if short == "init_process_group":
            self.group_gates.update(self._gate_names)
        if not self.compact or self._judged(node, func, short):
            self.calls.append((node, self._guard > 0))
            if self._late and not self._guard:
                self.late_calls.append((len(self.calls) - 1, tuple(self._late)))
            if any(self._flag_guards) and not self._guard:
                self.flag_guarded[id(node)] = next(f for f in reversed(self._flag_guards) if f)
            if self._first or (self._prefetched and any(short in names or "*" in names for names in self._prefetched)):
                self.first.add(id(node))
            for name in self._pending:
                self.first_pending.setdefault(name, set()).add(id(node))
            self.enclosing[id(node)] = tuple(self._functions)
            if self._first and (self._handlers or self._cache_checks):
                self.cache_fills.add(id(node))
            if self._main and not self._functions:
                self.main_calls.add(id(node))
        if short == "spawn" and ("multiprocessing" in func or func.startswith("mp.")):
            if self._functions:
                self.spawns_in.add(self._functions[-1])
            elif self._main:
                self.main_spawns = True
        # The function a worker process runs (`mp.spawn(train, ...)`, `Process(target=train)`): every
        # rank runs it, whatever its direct call sites (a one-GPU path calling train(0, 1)) say.
        worker = _worker_started(node) if short in ("spawn", "start_processes", "Process") else None
        if isinstance(worker, ast.Name):
            self.worker_functions.add(worker.id)
        if short in ("to", "cuda") and isinstance(node.func, ast.Attribute) and node.args and _dotted(node.func.value):
            self.moves.append((_dotted(node.func.value), node.args[0], tuple(self._blocks), node.lineno))
        if short == "DistributedSampler" and self._functions:
            shuffle = _sampler_shuffle(node, self._params[-1])
            if shuffle != "no":
                self.sampler_functions.setdefault(self._functions[-1], (shuffle, node.lineno))
        if short in ("set_device", "set_device_index") or short in self.device_setters and _dotted(node.func).partition(".")[0] not in ("self", "cls"):
            self._set_devices += 1
            if self._functions:
                self.sets_device_in.add(self._functions[-1])
        elif short in ("DistributedDataParallel", "DDP"):
            self.device_before[id(node)] = any(self._path)
            self.blocks_of[id(node)] = tuple(self._blocks)
        # (a second fetch of the same files after a from_pretrained on its path reads the cache; a second push_to_hub
        # in the block of one already reported uploads the same run)
        elif short in ("from_pretrained", "push_to_hub", "load_dataset"):
            self.blocks_of[id(node)] = tuple(self._blocks)
        elif short in ("setLevel", "basicConfig") and _mentions_rank(node):
            self.silenced = True
        elif short in _SILENCERS:
            self.silenced = True
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        self.imports.append(node)
        if self.compact:
            self._note_local(node)
        for a in node.names if isinstance(node, ast.ImportFrom) else ():
            if a.asname and a.name in ("DistributedDataParallel", "DistributedSampler", "init_process_group"):
                self.aliases.add(a.asname)

    visit_ImportFrom = visit_Import

    def _rank_test(self, test: ast.AST) -> bool:
        """A rank check, or a test of a flag computed from one (`args.save_logs = ... and is_master(args)`);
        never `not distributed or ...`, which every rank passes when started without that flag."""
        if _bypassed(test, "multiprocessing"):
            return False
        return _mentions_rank(test) or any(_dotted(n) in self.flags or isinstance(n, ast.Attribute) and n.attr in self.project_flags
                                           or isinstance(n, ast.Call) and _name_of(_dotted(n.func)) in self.project_flags
                                           for n in ast.walk(test) if isinstance(n, (ast.Name, ast.Attribute, ast.Call)))
