"""global-rank-as-device: which names of a script hold the global rank, and where one becomes a GPU
index. The global rank numbers every process of the job (0..15 on two nodes of 8 GPUs); a GPU index
numbers the GPUs of one machine (0..7). Used as a device, the global rank works on one node and asks
for cuda:8 on the second.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator

from gpurig.diagnose.lint_guards import _holds_global_rank
from gpurig.diagnose.lint_modules import _at
from gpurig.diagnose.lint_nodes import (
    _calls_function,
    _dotted,
    _kept_on_self,
    _kw,
    _leaf_name,
    _name_of,
)

# What a finding of this rule says: (node, title, fix).
Said = tuple[ast.AST, str, str]
MAP_FIX = "device_map={'': accelerator.local_process_index} (or int(os.environ['LOCAL_RANK']))."
LOCATION_FIX = "Map onto this process's own GPU: map_location=f\"cuda:{int(os.environ['LOCAL_RANK'])}\" (or 'cpu', then .to(device))."
LOCAL_FIX = "Move to the local GPU: device = torch.device('cuda', int(os.environ['LOCAL_RANK'])); x.to(device)."


def _cuda_format(value: ast.AST) -> bool:
    """`"cuda:{}".format(i)`: a device string filled in by str.format."""
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "format" \
        and isinstance(value.func.value, ast.Constant) and str(value.func.value.value).startswith("cuda:")


def _names_a_gpu(value: ast.AST) -> bool:
    """`torch.device("cuda", i)`, f"cuda:{i}", "cuda:%d" % i, "cuda:{}".format(i): a device expression
    (looked at shallowly)."""
    if _cuda_format(value):
        return True
    if isinstance(value, ast.Call):  # (or a helper given one: YOLO's `select_device(f"cuda:{rank}")`)
        return isinstance(value.func, (ast.Attribute, ast.Name)) and (_leaf_name(value.func) == "device" or (
            (_leaf_name(value.func) or "").endswith("_device") and len(value.args) == 1 and _names_a_gpu(value.args[0])))
    if isinstance(value, ast.JoinedStr):
        first = value.values[0] if value.values else None
    else:
        first = value.left if isinstance(value, ast.BinOp) else None
    return isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value.startswith("cuda")


def _fixed_gpu(value: ast.AST | None) -> bool:
    """A map_location naming one GPU by number: 'cuda:0', torch.device('cuda:1'), torch.device('cuda', 0).
    Every rank that loads with it puts the tensors on that one GPU."""
    if isinstance(value, ast.Call) and _dotted(value.func) in ("torch.device", "device") and value.args:
        args = value.args
        if len(args) == 2 and isinstance(args[0], ast.Constant) and args[0].value == "cuda":
            return isinstance(args[1], ast.Constant) and isinstance(args[1].value, int)
        value = args[0] if len(args) == 1 else None
    return isinstance(value, ast.Constant) and isinstance(value.value, str) and re.fullmatch(r"cuda:\d+", value.value) is not None


def _map_location(call: ast.Call) -> ast.AST | None:
    """What a torch.load(...) is given as map_location, by keyword or second argument."""
    location = _kw(call, "map_location")
    return location.value if location is not None else call.args[1] if len(call.args) > 1 else None


def _loose_load(call: ast.Call) -> str | None:
    """What is wrong with where a torch.load(...) puts the tensors, said in the finding's words: no
    map_location (the GPU they were saved from), or one GPU named by number; None when it is fine."""
    value = _map_location(call)
    if value is None:
        return "torch.load without map_location: tensors saved on cuda:0 load onto GPU 0 in every rank"
    if _fixed_gpu(value):
        return f"torch.load(map_location={ast.unparse(value)[:40]}): every rank loads the tensors onto that one GPU"
    return None


def _gpu_key(key: ast.AST | None) -> bool:
    """A key of a map_location dict that names a GPU: 'cuda:0', 'cuda:%d' % 0, f"cuda:{i}"."""
    return key is not None and (isinstance(key, ast.Constant) and str(key.value).startswith("cuda:") or _names_a_gpu(key))


def _rank_device(node: ast.AST, is_rank: Callable[[ast.AST], bool]) -> bool:
    """A device expression whose index `is_rank` accepts: the index itself, f"cuda:{i}",
    torch.device("cuda", i) or torch.device(i), either branch of `a if c else b`."""
    if isinstance(node, ast.IfExp):
        return _rank_device(node.body, is_rank) or _rank_device(node.orelse, is_rank)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant):
        return str(node.left.value).startswith("cuda:") and is_rank(node.right)  # 'cuda:%d' % rank
    if isinstance(node, ast.JoinedStr):
        text = "".join(str(v.value) for v in node.values if isinstance(v, ast.Constant))
        return text.startswith("cuda:") and any(isinstance(v, ast.FormattedValue) and is_rank(v.value) for v in node.values)
    if _cuda_format(node):  # "cuda:{}".format(rank)
        return any(is_rank(a) for a in node.args)
    if isinstance(node, ast.Call) and _names_a_gpu(node) and _name_of(_dotted(node.func)).endswith("_device"):
        return _rank_device(node.args[0], is_rank)  # select_device(f"cuda:{rank}")
    if isinstance(node, ast.Call) and _dotted(node.func) in ("torch.device", "device") and node.args:
        return (len(node.args) == 1 or isinstance(node.args[0], ast.Constant) and node.args[0].value == "cuda") \
            and _rank_device(node.args[-1], is_rank)
    return is_rank(node)


def global_rank_sum(value: ast.AST) -> bool:
    """`node_rank * ngpus_per_node + gpu` (either order): how a spawned worker's global rank is made
    from the node's number and its index on the node."""
    return isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add) and any(
        isinstance(side, ast.BinOp) and isinstance(side.op, ast.Mult) for side in (value.left, value.right))


def rank_names_of(scan, calls: list, text: str, names: set[str]) -> set[str]:
    """The dotted names that hold the global rank in this script."""
    rank_names = set(scan.rank_names)
    # Under torchrun the name `rank` is the global rank (the script reads RANK/LOCAL_RANK from the
    # environment); under mp.spawn it is the process index on this node, a fine GPU index.
    torchrun_style = ("LOCAL_RANK" in text or "'RANK'" in text or '"RANK"' in text) and "spawn" not in names
    if torchrun_style:
        rank_names |= {"rank", "global_rank"}
    # A config object holding it, handed to a function of this file (`CFG.rank = int(os.environ["RANK"])`
    # ... `train(CFG)`): inside, the parameter's attribute holds it (`config.rank`).
    holders = {n.partition(".")[0] for n in rank_names if "." in n}
    for c, f, _ in calls if holders else ():
        params = scan.params.get(f) if isinstance(c.func, ast.Name) else None
        for param, arg in zip(params or (), c.args, strict=False):
            if isinstance(arg, ast.Name) and arg.id in holders:
                rank_names |= {f"{param}.{n.partition('.')[2]}" for n in list(rank_names) if n.startswith(arg.id + ".")}
    # A name the script assigns the rank within the node (`rank = int(os.environ["LOCAL_RANK"])`,
    # even with `RANK` as the fallback where LOCAL_RANK is unset) is a fine GPU index.
    rank_names -= scan.local_rank_names
    if local_group(scan, calls):
        rank_names -= {n for n in scan.rank_names if "global" not in n.lower() and n not in scan.summed_ranks} | {"rank"}
    return rank_names


def local_group(scan, calls: list) -> bool:
    """`init_process_group(rank=local_rank)`: the group numbers the processes by their local rank, so
    what dist.get_rank() returns is a GPU of this machine (a second node is wrong another way)."""
    given = [_kw(c, "rank").value for c, f, _ in calls if _name_of(f) == "init_process_group" and _kw(c, "rank")]
    # (by its name, unless the script gives that name the global rank: `args.local_rank = int(os.environ["RANK"])`)
    return any("local_rank" in _dotted(v).lower() and _dotted(v) not in scan.rank_names or _dotted(v) in scan.local_rank_names
               or _holds_global_rank(v, "LOCAL_RANK") for v in given)


class RankDevices:
    """The tests of one script: `is_global_rank(node)` and the devices made of it."""

    def __init__(self, scan, calls: list, text: str, names: set[str], modules: list = ()) -> None:
        self.scan, self.calls = scan, calls
        self.rank_names = rank_names_of(scan, calls, text, names) | (returned_ranks(modules, scan) - scan.local_rank_names)
        self.local_group = local_group(scan, calls)

    def reads_global_rank(self, node: ast.AST) -> bool:
        """`dist.get_rank()`, `int(os.environ["RANK"])`, `hvd.rank()` (not get_rank() of a group started
        with rank=local_rank)."""
        return _holds_global_rank(node) and not (
            self.local_group and isinstance(node, ast.Call) and _name_of(_dotted(node.func)) == "get_rank")

    def given_local_rank(self, name: str, call: ast.AST | tuple[str, ...]) -> bool:
        """`name` is a parameter of the function around `call` (or of the innermost of the functions
        named) that every call of it in this file gives the local rank (`def train(rank, world)` ...
        `train(local_rank, world)`)."""
        scan = self.scan
        inside = call if isinstance(call, tuple) else scan.enclosing.get(id(call), ())
        params = scan.params.get(inside[-1], []) if inside else []
        if name not in params:
            return False
        i = params.index(name)
        sites = [c for c, f, _ in self.calls if _calls_function(f, inside[-1])]
        return bool(sites) and all(
            len(c.args) > i and isinstance(c.args[i], ast.Name)
            and (c.args[i].id in scan.local_rank_names or "local_rank" in c.args[i].id.lower() or self._spawn_index(c.args[i].id, c))
            for c in sites)

    def _spawn_index(self, name: str, call: ast.AST) -> bool:
        """`name` is the first parameter of the worker function `call` is in: mp.spawn's process index
        on this node (`def main_single(gpu, flags): ... train(..., gpu)`)."""
        inside = self.scan.enclosing.get(id(call), ())
        params = self.scan.params.get(inside[-1], []) if inside else []
        return bool(params) and inside[-1] in self.scan.worker_functions and params[0] == name

    def is_global_rank(self, node: ast.AST, call: ast.AST | tuple[str, ...] | None = None) -> bool:
        """Whether the expression names the global rank (Accelerate's `process_index` too; its
        `local_process_index` is the GPU of this machine)."""
        for n in ast.walk(node):
            if isinstance(n, ast.Attribute) and n.attr == "process_index" or isinstance(n, ast.Call) and self.reads_global_rank(n):
                return True
            if isinstance(n, (ast.Name, ast.Attribute)) and _dotted(n) in self.rank_names \
                    and not (call is not None and self.given_local_rank(_dotted(n), call)):
                return True
        return False

    def device_of_rank(self, node: ast.AST, call: ast.AST | tuple[str, ...]) -> bool:
        """`rank`, f"cuda:{rank}", torch.device("cuda", rank), `"cpu" if offload else rank` of a global
        rank not given the local one, or of a read of the global rank itself (`x.cuda(dist.get_rank())`)."""
        def is_rank(n: ast.AST) -> bool:
            if isinstance(n, ast.Call):
                return self.reads_global_rank(n)
            return isinstance(n, (ast.Name, ast.Attribute)) and _dotted(n) in self.rank_names \
                and not self.given_local_rank(_dotted(n), call)

        return _rank_device(node, is_rank)

    def maps_onto_rank(self, value: ast.AST, call: ast.AST | tuple[str, ...]) -> bool:
        """A map_location that puts a checkpoint on the GPU of the global rank: a device of it
        (f"cuda:{rank}") or a dict mapping a GPU onto one ({"cuda:0": 'cuda:%d' % rank})."""
        if isinstance(value, ast.Dict):
            return any(_gpu_key(k) and v is not None and self.device_of_rank(v, call)
                       for k, v in zip(value.keys, value.values, strict=True))
        return self.device_of_rank(value, call)

    def findings(self) -> Iterator[Said]:
        """Every place the script makes the global rank a device (set_device and DDP's device_ids
        are judged with the other calls of lint_checks)."""
        for call, _func, _guarded in self.calls:
            short = _name_of(_func)
            if short in ("to", "cuda") and isinstance(call.func, ast.Attribute):
                device = call.args[0] if len(call.args) == 1 else (_kw(call, "device").value if _kw(call, "device") else None)
                if device is not None and self.device_of_rank(device, call):
                    yield (call, f".{short}({ast.unparse(device)[:40]}): the global rank used as the GPU index", LOCAL_FIX)
            device_id = _kw(call, "device_id") if short in ("FSDP", "FullyShardedDataParallel") else None
            if device_id is not None and self.device_of_rank(device_id.value, call):  # FSDP(model, device_id=rank)
                yield (device_id.value, f"FSDP(device_id={ast.unparse(device_id.value)[:40]}): the global rank used as "
                       "the GPU index", LOCAL_FIX)
            location = _kw(call, "map_location")  # torch.load(path, map_location={"cuda:0": f"cuda:{rank}"}) or f"cuda:{rank}"
            if location is not None and self.maps_onto_rank(location.value, call):
                yield (location.value, f"map_location={ast.unparse(location.value)[:60]}: the global rank made the GPU index", LOCATION_FIX)
            device_map = _kw(call, "device_map")
            if device_map is not None and isinstance(device_map.value, ast.Dict) and any(
                    v is not None and self.is_global_rank(v, call) for v in device_map.value.values):
                yield (device_map.value, "device_map puts the model on the GPU numbered by the global rank: "
                       "on a second node there is no such GPU", MAP_FIX)
        # `device = torch.device(f"cuda:{rank}")`: reported where the device is made, not at each use.
        for name, value in self.scan.device_vars.items():
            if self.device_of_rank(value, self.scan.device_inside.get(name, ())):
                yield (value, f"{name} = {ast.unparse(value)[:40]}: the global rank made the GPU index", LOCAL_FIX)
        # `device_map = {"": PartialState().process_index}`, handed to from_pretrained later; and
        # `map_location = {"cuda:0": f"cuda:{rank}"}`, handed to torch.load later.
        for value, inside in self.scan.device_maps:
            if any(_gpu_key(k) for k in value.keys):
                if self.maps_onto_rank(value, inside):
                    yield (value, f"map_location {ast.unparse(value)[:60]}: the global rank made the GPU index", LOCATION_FIX)
            elif any(v is not None and self.is_global_rank(v, inside) for v in value.values):
                yield (value, "device_map puts the model on the GPU numbered by the global rank: "
                       "on a second node there is no such GPU", MAP_FIX)


def report(devices: RankDevices, add: Callable[..., None], modules: list = ()) -> None:
    for node, title, fix in devices.findings():
        add("global-rank-as-device", node, title, fix)
    # `Trainer(args, world_size, rank)` with the global rank, where the project's Trainer makes that
    # parameter its GPU (`torch.device(f"cuda:{rank}")`, `device_ids=[self.rank]`): said at the call.
    params = rank_parameters(modules) if modules else {}
    for call, func, _ in devices.calls:
        short = _name_of(func)
        if short not in params or short in devices.scan.defined:
            continue
        position, name, where = params[short]
        given = _kw(call, name).value if _kw(call, name) is not None else call.args[position] if len(call.args) > position else None
        if given is not None and not isinstance(given, ast.Starred) and devices.is_global_rank(given, call):
            del params[short]  # (one mistake, said at its first call)
            add("global-rank-as-device", call, f"{short}() makes its {name} argument, here the global rank, the GPU index "
                f"({where}): on a second node there is no such GPU", f"Pass the local rank (int(os.environ['LOCAL_RANK'])) "
                f"as {name}, or let {short}() take its GPU from LOCAL_RANK.", where)


def rank_parameters(modules: list) -> dict[str, tuple[int, str, str]]:
    """Functions of the project's own modules (a class under its name, through `__init__` and the
    attribute it keeps the value in) that make a parameter the GPU index: name -> (its position among
    a call's arguments, its name, where it becomes a device)."""
    out: dict[str, tuple[int, str, str]] = {}
    for module in modules:
        scopes = [(fn, [fn], fn.name) for fn in module.body if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for cls in (c for c in module.body if isinstance(c, ast.ClassDef)):
            init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
            if init is not None:
                scopes.append((init, [f for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))], cls.name))
        for fn, bodies, name in scopes:
            args = [a.arg for a in fn.args.posonlyargs + fn.args.args][1 if fn.name == "__init__" else 0:]
            for position, param in enumerate(args):
                if "rank" not in param.lower() and param.lower() not in ("gpu", "device", "device_id"):
                    continue  # (a parameter named for what it is: rank, local_rank, gpu)
                names = {param} | {f"self.{attr}" for attr in _kept_on_self(fn, {param})}
                lines = sorted({n.lineno for body in bodies for n in ast.walk(body) if _device_use(n, names) is not None})
                if lines:
                    out[name] = (position, param, ", ".join(_at(module, line) for line in lines[:4]))
    return out


def _device_use(node: ast.AST, names: set[str]) -> ast.AST | None:
    """The device expression, where `node` makes one of `names` a device: set_device(x),
    device_ids=[x], .to(x), .cuda(x), torch.device(f"cuda:{x}" ...), and a device named first
    (`map_location = 'cuda:%d' % self.local_rank`, handed to torch.load below)."""
    def held(n: ast.AST) -> bool:
        return isinstance(n, (ast.Name, ast.Attribute)) and _dotted(n) in names

    if isinstance(node, ast.Assign) and (isinstance(node.value, (ast.JoinedStr, ast.BinOp)) or isinstance(
            node.value, ast.Call) and _dotted(node.value.func) in ("torch.device", "device")):
        return node.value if _rank_device(node.value, held) else None
    if not isinstance(node, ast.Call):
        return None
    short = _name_of(_dotted(node.func))
    ids = _kw(node, "device_ids")
    value = node.args[0] if short in ("set_device", "to", "cuda", "device") and node.args else \
        ids.value.elts[0] if ids is not None and isinstance(ids.value, ast.List) and ids.value.elts else None
    if short == "device" and value is not None:
        value = node
    if value is None and _kw(node, "map_location") is not None:  # torch.load(..., map_location='cuda:%d' % rank)
        value = _kw(node, "map_location").value
    return value if value is not None and _rank_device(value, held) else None


def fold_uses(findings: list, script: str) -> list:
    """The global rank made a device is one mistake, however many tensors it then moves: its uses
    (`.to(rank)`, `.cuda(rank)`) are named (`related`) where the device is chosen (`set_device`,
    `device_ids=`; else at the first use), not reported again. `findings` in line order; `script`:
    the file's name, as `related` names it."""
    ranks = [f for f in findings if f.id == "global-rank-as-device"]
    # (said where the device is chosen, `set_device(rank)` or `device_ids=[rank]`, when the script does:
    # a model's `.to(rank)` above it is one of its uses)
    head = next((f for f in ranks if not f.title.startswith(".")), ranks[0] if ranks else None)
    uses = [f for f in ranks if f is not head and f.title.startswith(".")]
    # (and the same use again, `device_ids=[rank]` of each model the script wraps: said once, naming the others)
    folded = {id(f) for f in uses}
    first: dict = {}  # title -> [the finding said, how many more times below]
    for f in (f for f in ranks if id(f) not in folded):
        said = first.setdefault(f.title, [f, 0])
        if said[0] is not f:
            said[0].related.append(f"{script}:{f.line}")
            said[1] += 1
            folded.add(id(f))
    if uses:
        head.related += [f"{script}:{f.line}" for f in uses]
        where = "below" if all(f.line > head.line for f in uses) else \
            f"at line{'s' if len(uses) > 1 else ''} " + ", ".join(str(f.line) for f in uses)
        head.title += f" (and {len(uses)} more use{'s' if len(uses) > 1 else ''} of it as a device {where})"
    for f, again in first.values():
        f.title += f" (and {again} more time{'s' if again > 1 else ''} below)" if again else ""
    return [f for f in findings if id(f) not in folded]



def returned_ranks(modules: list, scan) -> set[str]:
    """The script's names that a project function hands the global rank: `rank, device, seed =
    setup_ddp0(config)` where setup_ddp0 returns `rank` assigned from dist.get_rank() (or RANK)."""
    positions: dict[str, int] = {}
    for module in modules:
        for fn in ast.walk(module):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            held = {t.id for n in ast.walk(fn) if isinstance(n, ast.Assign) and _holds_global_rank(n.value)
                    for t in n.targets if isinstance(t, ast.Name)}
            last = next((n for n in reversed(fn.body) if isinstance(n, ast.Return)), None)
            if held and last is not None and isinstance(last.value, ast.Tuple):
                at = [i for i, e in enumerate(last.value.elts) if isinstance(e, ast.Name) and e.id in held]
                if len(at) == 1:
                    positions[fn.name] = at[0]
    out: set[str] = set()
    for node, _ in scan.assigns if positions else ():
        value, target = node.value, node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(value, ast.Call) and isinstance(target, ast.Tuple) and _name_of(_dotted(value.func)) in positions \
                and _name_of(_dotted(value.func)) not in scan.defined:
            i = positions[_name_of(_dotted(value.func))]
            if i < len(target.elts) and isinstance(target.elts[i], ast.Name):
                out.add(target.elts[i].id)
    return out
