"""Read a training script without running it (Python's `ast`) and report the classic multi-GPU
mistakes, each with its line and its fix.

    for finding in lint_source(open("train.py").read(), "train.py"):
        print(finding.line, finding.id, finding.fix)

Rules are deliberately conservative: a rule fires only on code it can see, and stays quiet when the
script shows it does the right thing somewhere (a rank check, a `set_epoch` call).
"""

from __future__ import annotations

import ast
from dataclasses import asdict, dataclass
from typing import Any

RANK_WORDS = ("rank", "is_main", "main_process", "master", "is_master", "is_primary", "primary", "local_zero", "global_zero")
RANK_NAMES = {"main", "leader", "is_leader", "zero"}  # whole names that only make sense as "the rank that speaks"
OUTPUT_LOG_METHODS = {"debug", "info", "warning", "warn", "error", "critical", "exception", "log"}


@dataclass
class LintFinding:
    id: str
    severity: str  # "warn"
    line: int
    title: str
    fix: str
    code: str = ""  # the source line

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _dotted(node: ast.AST) -> str:
    """`torch.nn.parallel.DistributedDataParallel` for an attribute chain; '' when not a name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    if isinstance(node, ast.Call):  # logging.getLogger(__name__).info -> "getLogger().info"
        inner = _dotted(node.func)
        return ".".join([inner + "()"] + list(reversed(parts))) if inner else ""
    return ""


def _kw(call: ast.Call, name: str) -> ast.keyword | None:
    return next((k for k in call.keywords if k.arg == name), None)


def _is_const(node: ast.AST | None, value: Any) -> bool:
    return isinstance(node, ast.Constant) and node.value is value


def _mentions_rank(test: ast.AST) -> bool:
    for node in ast.walk(test):
        name = None
        if isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = node.value if node.value in ("RANK", "LOCAL_RANK") else None
        if name and (any(w in name.lower() for w in RANK_WORDS) or name.lower() in RANK_NAMES):
            return True
    return False


def _exits(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Continue, ast.Raise))


class _Scanner(ast.NodeVisitor):
    """Walks the tree remembering whether the current statement only runs on one rank."""

    def __init__(self) -> None:
        self.calls: list[tuple[ast.Call, bool]] = []  # (call, guarded by a rank check)
        self.assigns: list[tuple[ast.Assign | ast.AnnAssign, bool]] = []
        self.enclosing: dict[int, tuple[str, ...]] = {}  # id(call) -> names of the functions around it
        self._guard = 0
        self._functions: list[str] = []
        self.defined: set[str] = set()

    def _block(self, stmts: list[ast.stmt]) -> None:
        raised = 0
        for stmt in stmts:
            self.visit(stmt)
            # `if rank != 0: return` guards everything after it in the same block.
            if isinstance(stmt, ast.If) and _mentions_rank(stmt.test) and _exits(stmt.body) and not stmt.orelse:
                self._guard += 1
                raised += 1
        self._guard -= raised

    def visit_Module(self, node: ast.Module) -> None:
        self._block(node.body)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        for d in node.decorator_list:
            self.visit(d)
        # A function body starts unguarded: whether it runs on one rank depends on its callers.
        outer, self._guard = self._guard, 0
        self._functions.append(node.name)
        self.defined.add(node.name)
        self._block(node.body)
        self._functions.pop()
        self._guard = outer

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        guarded = _mentions_rank(node.test)
        self._guard += guarded
        self._block(node.body)
        self._block(node.orelse)  # `else` of a rank check is also one-rank code
        self._guard -= guarded

    def visit_For(self, node: ast.For) -> None:
        self.visit(node.iter)
        self._block(node.body)
        self._block(node.orelse)

    visit_AsyncFor = visit_For  # type: ignore[assignment]

    def visit_While(self, node: ast.While) -> None:
        self.visit(node.test)
        self._block(node.body)
        self._block(node.orelse)

    def visit_With(self, node: ast.With) -> None:
        for item in node.items:
            self.visit(item)
        self._block(node.body)

    def visit_Try(self, node: ast.Try) -> None:
        self._block(node.body)
        for h in node.handlers:
            self._block(h.body)
        self._block(node.orelse)
        self._block(node.finalbody)

    def visit_Call(self, node: ast.Call) -> None:
        self.calls.append((node, self._guard > 0))
        self.enclosing[id(node)] = tuple(self._functions)
        self.generic_visit(node)

    def one_rank_functions(self) -> set[str]:
        """Functions of this file that are only ever called under a rank check."""
        only: set[str] = set()
        while True:
            sites: dict[str, list[bool]] = {}
            for call, guarded in self.calls:
                # f(...) and self.f(...) both count as calls of a function f defined in this file.
                name = call.func.id if isinstance(call.func, ast.Name) else (
                    call.func.attr if isinstance(call.func, ast.Attribute) else None)
                if name in self.defined:
                    inside = any(f in only for f in self.enclosing.get(id(call), ()))
                    sites.setdefault(name, []).append(guarded or inside)
            grown = {name for name, flags in sites.items() if flags and all(flags)}
            if grown <= only:
                return only
            only |= grown

    def visit_Assign(self, node: ast.Assign) -> None:
        self.assigns.append((node, self._guard > 0))
        self.generic_visit(node)


def _name_of(func: str) -> str:
    return func.rsplit(".", 1)[-1]


def lint_source(source: str, filename: str = "<script>") -> list[LintFinding]:
    """All findings for one script, in line order. A syntax error is reported as bad input."""
    tree = ast.parse(source, filename=filename)
    lines = source.splitlines()
    scan = _Scanner()
    scan.visit(tree)
    findings: list[LintFinding] = []

    def add(rule: str, node: ast.AST, title: str, fix: str) -> None:
        line = getattr(node, "lineno", 1)
        code = lines[line - 1].strip() if 0 < line <= len(lines) else ""
        findings.append(LintFinding(id=rule, severity="warn", line=line, title=title, fix=fix, code=code))

    one_rank = scan.one_rank_functions()
    calls = [
        (c, _dotted(c.func), g or any(f in one_rank for f in scan.enclosing.get(id(c), ())))
        for c, g in scan.calls
    ]
    names = {_name_of(f) for _, f, _ in calls}
    text = source
    uses_cuda = any(
        ("cuda" in f.split(".")) or f.endswith(".cuda") for _, f, _ in calls
    ) or "'nccl'" in text or '"nccl"' in text or "device_ids" in text
    distributed = bool(
        names & {"init_process_group", "DistributedDataParallel", "DDP", "DistributedSampler", "spawn"}
    ) or "LOCAL_RANK" in text

    set_device_lines = [c.lineno for c, f, _ in calls if f.endswith("cuda.set_device") or f == "set_device"]

    for call, func, guarded in calls:
        short = _name_of(func)
        if short == "DataParallel":
            add(
                "data-parallel", call,
                "nn.DataParallel: one process drives every GPU, and the GIL and GPU 0 hold it back",
                "Use DistributedDataParallel with one process per GPU: wrap with DDP(model, device_ids=[local_rank]) "
                "and start with `gpurig launch script.py` (torchrun).",
            )
        if short in ("DistributedDataParallel", "DDP"):
            fup = _kw(call, "find_unused_parameters")
            if fup is not None and _is_const(fup.value, True):
                add(
                    "find-unused-parameters", call,
                    "find_unused_parameters=True walks the autograd graph every step (slower)",
                    "Leave it off unless DDP raises 'Expected to have finished reduction'; if some parameters really are "
                    "unused, freeze them or make every output feed the loss (static_graph=True helps when the unused set is fixed).",
                )
            if uses_cuda and _kw(call, "device_ids") is None and not any(ln < call.lineno for ln in set_device_lines):
                add(
                    "ddp-without-device", call,
                    "DDP built with no device_ids and no torch.cuda.set_device(local_rank) before it: every rank may use GPU 0",
                    "Call torch.cuda.set_device(local_rank) first thing (local_rank = int(os.environ['LOCAL_RANK'])) and build "
                    "DDP(model, device_ids=[local_rank]).",
                )
        if func == "torch.load":
            if _kw(call, "map_location") is None and len(call.args) < 2:
                add(
                    "torch-load-without-map-location", call,
                    "torch.load without map_location: tensors saved on cuda:0 load onto GPU 0 in every rank",
                    "torch.load(path, map_location='cpu') (then .to(device)), or map_location=f'cuda:{local_rank}'.",
                )
        if short == "init_process_group":
            init = _kw(call, "init_method")
            if init is not None and isinstance(init.value, ast.Constant) and isinstance(init.value.value, str) \
                    and init.value.value.startswith("tcp://"):
                add(
                    "hard-coded-rendezvous", call,
                    f"init_method={init.value.value!r} is hard-coded: a second job on this machine fails with 'Address already in use'",
                    "Drop init_method (the default env:// reads MASTER_ADDR/MASTER_PORT set by torchrun) and start with "
                    "`gpurig launch`, which picks a free port.",
                )
        if distributed and not guarded:
            download = _kw(call, "download")
            pretrained = _kw(call, "pretrained")
            if (download is not None and _is_const(download.value, True)) or (
                pretrained is not None and _is_const(pretrained.value, True)
            ):
                what = "download=True" if download is not None and _is_const(download.value, True) else "pretrained=True"
                add(
                    "download-on-every-rank", call,
                    f"{what} runs in every rank at once: they race to write the same files",
                    "Download once before training: `if local_rank == 0: <download>` then dist.barrier(), and construct "
                    "with download=False in every rank (or download ahead of the run).",
                )
            is_log = (
                short in OUTPUT_LOG_METHODS
                and "." in func
                and any(w in func.split(".")[0].lower() for w in ("log", "logger", "logging"))
            )
            # A message that names its rank, or goes to stderr, is meant to come from every rank.
            per_rank_message = (short == "print" or is_log) and (
                any(_mentions_rank(a) for a in call.args)
                or (_kw(call, "file") is not None and _dotted(_kw(call, "file").value) == "sys.stderr")
            )
            if per_rank_message:
                pass
            elif short == "print" and func == "print" or is_log or func == "torch.save" or short == "SummaryWriter":
                kind = {"print": "print", "save": "torch.save", "SummaryWriter": "SummaryWriter"}.get(short, "logging")
                add(
                    "output-on-every-rank", call,
                    f"{kind} runs on every rank: duplicated output" + (", and ranks overwrite the same file" if kind in ("torch.save", "SummaryWriter") else ""),
                    "Guard it with `if rank == 0:` (rank = dist.get_rank()), or use one helper that decides which rank speaks.",
                )
        if short == "DataLoader" and uses_cuda:
            workers = _kw(call, "num_workers")
            pin = _kw(call, "pin_memory")
            missing = []
            if workers is None or _is_const(workers.value, 0) or (isinstance(workers.value, ast.Constant) and workers.value.value == 0):
                missing.append("num_workers")
            if pin is None or _is_const(pin.value, False):
                missing.append("pin_memory=True")
            if missing:
                add(
                    "dataloader-starves-gpu", call,
                    f"DataLoader feeding a GPU without {' and '.join(missing)}: the GPU waits for data",
                    "DataLoader(..., num_workers=4 or more, pin_memory=True, persistent_workers=True) and "
                    ".to(device, non_blocking=True) on the batch.",
                )

    for assign, _guarded in scan.assigns:
        for target in assign.targets:
            if isinstance(target, ast.Subscript) and _dotted(target.value) == "os.environ":
                key = target.slice
                if isinstance(key, ast.Constant) and key.value in ("MASTER_PORT", "MASTER_ADDR") \
                        and isinstance(assign.value, ast.Constant):
                    add(
                        "hard-coded-rendezvous", assign,
                        f"{key.value} is hard-coded to {assign.value.value!r}: a second job fails with 'Address already in use'",
                        "Let the launcher set MASTER_ADDR/MASTER_PORT (`gpurig launch` picks a free port); remove the assignment.",
                    )

    # DistributedSampler whose epoch is never set: the same shuffle every epoch.
    samplers: list[tuple[ast.Call, str | None]] = []
    for assign, _ in scan.assigns:
        if isinstance(assign.value, ast.Call) and _name_of(_dotted(assign.value.func)) == "DistributedSampler":
            target = assign.targets[0]
            samplers.append((assign.value, _dotted(target) or None))
    assigned = {id(c) for c, _ in samplers}
    for call, func, _ in calls:
        if _name_of(func) == "DistributedSampler" and id(call) not in assigned:
            samplers.append((call, None))
    set_epoch_targets = {f.rsplit(".", 1)[0] for _, f, _ in calls if f.endswith(".set_epoch")}
    for call, name in samplers:
        called = (name in set_epoch_targets) if name else bool(set_epoch_targets)
        if not called:
            add(
                "sampler-without-set-epoch", call,
                "DistributedSampler without set_epoch(epoch) in the loop: every epoch sees the same order",
                "Call sampler.set_epoch(epoch) at the start of each epoch, before iterating the DataLoader.",
            )

    findings.sort(key=lambda f: (f.line, f.id))
    return findings
