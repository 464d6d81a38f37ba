"""The script's own project on disk, for `gpurig lint`: which modules it imports are the project's
(beside the script or in its folders) and which come from elsewhere, read and parsed, and how a
finding names a line of one of them.
"""

from __future__ import annotations

import ast
import os
import re
from functools import cache

from gpurig.diagnose.lint_calls import normalize_call
from gpurig.diagnose.lint_nodes import _AUTO_DATASETS, _dotted


def _at(module: ast.AST, line: int) -> str:
    """A line of a project module, as a finding names it: "losses/lpips.py:6" (relative to the script's folder)."""
    where = getattr(module, "gpurig_where", None)
    return f"{where}:{line}" if where else f"line {line} of its module"


_PLACE_IN = re.compile(r"([\w./-]+\.py):(\d+)")


def _names_inside(what: str, module: ast.AST, start: int, end: int) -> bool:
    """Whether a helper's description ("through f() at x.py:3: ...") names a line from `start` to `end`
    of `module`: what it says is done there."""
    where = getattr(module, "gpurig_where", None)
    return where is not None and any(file == where and start <= int(line) <= end for file, line in _PLACE_IN.findall(what))


def _imported_names(nodes) -> list[tuple[int, str]]:
    """(level, dotted name) of what import statements name: `from a.b import c` gives a.b and a.b.c
    (and `from .core import _fit`, .core and .core._fit: c may be a module of the package)."""
    names: list[tuple[int, str]] = []
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append((0, node.module))
            names.extend((0, f"{node.module}.{a.name}") for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level:
            names.extend((node.level, n) for n in ([node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                                                   if node.module else [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            names.extend((0, a.name) for a in node.names)
    return names


def _source_of(func: str, imports) -> str | None:
    """The module a dotted call name comes from, by the file's import statements (absolute ones):
    `DataParallel` after `from pipegoose.nn import DataParallel` is pipegoose.nn's, `dp.DataParallel`
    after `import paddle.distributed as dp` paddle.distributed's; None when no import names it."""
    head = func.partition(".")[0]
    for node in imports:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if any((a.asname or a.name) == head for a in node.names):
                return node.module
        elif isinstance(node, ast.Import):
            for a in node.names:
                if (a.asname or a.name.partition(".")[0]) == head:
                    return a.name if a.asname else head
    return None


def _torch_data_parallel(func: str, imports, project_names=()) -> bool:
    """A `DataParallel` call is PyTorch's (or PyTorch Geometric's subclass, or the project's own:
    most often a copy of it, as CenterNet's), not another library's class of the name (Paddle's
    and pipegoose's `DataParallel` are data parallelism over one process per GPU)."""
    source = _source_of(func, imports)
    return source is None or source.split(".")[0] in ("torch", "torch_geometric") or func.partition(".")[0] in project_names


# Library calls that fetch weights or data from the network as they run, by what they are:
# (top-level package, name). Perceptual losses and image metrics download their backbone when
# built (lpips' AlexNet/VGG, torchmetrics' FID Inception and CLIPScore's CLIP), Whisper and
# sentence-transformers their model, nltk its corpora, a transformers pipeline its model.
LIBRARY_FETCHES = frozenset({
    ("lpips", "LPIPS"), ("piq", "LPIPS"), ("piq", "DISTS"), ("pytorch_fid", "InceptionV3"),
    ("torchmetrics", "FrechetInceptionDistance"), ("torchmetrics", "KernelInceptionDistance"),
    ("torchmetrics", "InceptionScore"), ("torchmetrics", "LearnedPerceptualImagePatchSimilarity"),
    ("torchmetrics", "CLIPScore"), ("whisper", "load_model"), ("sentence_transformers", "SentenceTransformer"),
    ("sentence_transformers", "CrossEncoder"), ("nltk", "download"), ("transformers", "pipeline"),
    ("datasets", "load_metric"),
    # the Hugging Face libraries' download-to-cache helper of their first releases (a URL -> a cached file)
    ("pytorch_pretrained_bert", "cached_path"), ("pytorch_transformers", "cached_path"), ("transformers", "cached_path"),
})
LIBRARY_FETCH_NAMES = frozenset(name for _, name in LIBRARY_FETCHES)


def _library_fetchers(imports) -> set[str]:
    """How the given import statements let a file spell the calls of LIBRARY_FETCHES: `lpips.LPIPS`
    after `import lpips`, `FID` after `from torchmetrics.image.fid import FrechetInceptionDistance as FID`."""
    out: set[str] = set()
    for node in imports:
        if isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.split(".")[0]
                bound = a.asname or a.name  # `import torchmetrics.image` binds torchmetrics: reached by the full name
                out.update(f"{bound}.{name}" for package, name in LIBRARY_FETCHES if package == top)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            top = node.module.split(".")[0]
            for a in node.names:
                if (top, a.name) in LIBRARY_FETCHES:
                    out.add(a.asname or a.name)
                elif a.name != "*":  # `from torchmetrics import image` -> image.fid.FrechetInceptionDistance: any depth
                    out.update(f"{a.asname or a.name}.{name}" for package, name in LIBRARY_FETCHES if package == top)
    return out


# Packages whose every dataset class downloads its files on construction when they are missing
# (PyTorch Geometric's InMemoryDataset and Dataset run download() from __init__): no `download=True`
# says so. A dataset of the package named nowhere in _AUTO_DATASETS is known by where it comes from.
DATASET_PACKAGES = ("torch_geometric.datasets",)


def _dataset_classes(imports) -> tuple[frozenset[str], tuple[str, ...]]:
    """(names bound to such dataset classes, prefixes that reach them): `MD17` after `from
    torch_geometric.datasets import MD17`, "torch_geometric.datasets." after `import torch_geometric`,
    "D." after `import torch_geometric.datasets as D`, "datasets." after `from torch_geometric import datasets`."""
    names: set[str] = set()
    prefixes: list[str] = []
    for node in imports:
        if isinstance(node, ast.Import):
            for a in node.names:
                for package in DATASET_PACKAGES:
                    if a.asname and a.name == package:
                        prefixes.append(a.asname + ".")
                    elif not a.asname and package.startswith(a.name.split(".")[0] + "."):
                        prefixes.append(package + ".")
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                if any(node.module == p or node.module.startswith(p + ".") for p in DATASET_PACKAGES) and a.name != "*":
                    names.add(a.asname or a.name)
                elif f"{node.module}.{a.name}" in DATASET_PACKAGES:
                    prefixes.append((a.asname or a.name) + ".")
    return frozenset(names), tuple(prefixes)


def _builds_dataset(func: str, classes: tuple[frozenset[str], tuple[str, ...]]) -> bool:
    """The call (by its dotted name) builds a dataset that downloads when its files are missing."""
    names, prefixes = classes
    return func.rpartition(".")[2] in _AUTO_DATASETS or func in names or (bool(prefixes) and func.startswith(prefixes))


def _fetches_by_library(call: ast.Call, fetchers: set[str]) -> bool:
    """The call is one of the library fetches `fetchers` names (see _library_fetchers), not given a
    file of this machine (`whisper.load_model("./ckpt/base.pt")`, `pipeline(model="../out")`)."""
    from gpurig.diagnose.lint_nodes import _dotted, _local_path

    if not fetchers:
        return False
    func = _dotted(call.func)
    head, _, name = func.rpartition(".")
    named = func in fetchers or (bool(head) and name in LIBRARY_FETCH_NAMES and any(
        f.endswith("." + name) and func.startswith(f.rpartition(".")[0] + ".") for f in fetchers))
    given = [*call.args, *(k.value for k in call.keywords)]
    return named and not any(isinstance(v, ast.Constant) and isinstance(v.value, str) and _local_path(v.value) for v in given)


def _project_roots(path, imports=()) -> tuple:
    """The folders the script's own imports are looked for in: its own, and two above it (a script
    in app/vjepa/ importing src.utils), and the folder holding a package the script lies in and
    imports by its full name, however deep (`from pkg.train.utils import setup` in pkg/a/train/)."""
    from pathlib import Path

    if path is None:
        return ()
    folder = Path(path).resolve().parent
    tops = {a.name.split(".")[0] for n in imports if isinstance(n, ast.Import) for a in n.names} | {
        n.module.split(".")[0] for n in imports if isinstance(n, ast.ImportFrom) and not n.level and n.module}
    return _folders_up(folder) + _path_folders(folder) + _package_roots(folder, tops)


def _package_roots(folder, tops) -> tuple:
    """The folders above the script's own package folders named in `tops` (at most six up)."""
    return tuple(a.parent for a in (folder, *folder.parents)[:6] if a.name in tops and a.parent not in _folders_up(folder))


def _path_folders(folder) -> tuple:
    """Folders the modules beside the script put on sys.path, the old research-code way (HRNet's
    `import _init_paths`: `sys.path.insert(0, osp.join(this_dir, '..', 'lib'))`): every existing
    folder an `os.path.join(..., 'a', 'b')` of constants names from there, in a file that touches
    sys.path. Read again only when one of those files changes (a long-lived process may lint twice)."""
    files = sorted(folder.glob("*.py"))[:50]
    return _path_folders_of(folder, tuple((py, py.stat().st_mtime_ns, py.stat().st_size) for py in files))


@cache
def _path_folders_of(folder, files: tuple) -> tuple:
    found: list = []
    for py, _, _ in files:
        try:
            text = py.read_text(encoding="utf-8", errors="replace") if py.stat().st_size < 200_000 else ""
            tree = ast.parse(text) if "sys.path" in text else None
        except (SyntaxError, ValueError, OSError):
            continue
        for n in ast.walk(tree) if tree is not None else ():
            if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.args):
                continue
            # (`osp.join(C.root_dir, 'furnace')`, a root worked out at run time: the folders up hold it)
            named, bases = None, _folders_up(folder)
            if n.func.attr == "join" and len(n.args) > 1 and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in n.args[1:]):
                named = os.path.join(*[a.value for a in n.args[1:]])
            # `sys.path.append("../utils")`, `sys.path.insert(0, "src")`: a folder named from where the
            # script is run, its own folder or the project's root above it (`python demo/train.py`)
            elif n.func.attr in ("append", "insert") and _dotted(n.func.value) == "sys.path" \
                    and isinstance(n.args[-1], ast.Constant) and isinstance(n.args[-1].value, str) and n.args[-1].value:
                named, bases = n.args[-1].value, _folders_up(folder)
            cand = next((c for c in ((b / named).resolve() for b in bases) if c.is_dir()), None) if named else None
            if cand is not None and cand not in found:
                found.append(cand)
    return tuple(found)


def _folders_up(folder) -> tuple:
    """A script's folder and the two above it: where its project's modules (and shell scripts) are."""
    return folder, folder.parent, folder.parent.parent


def _imported_names_by_origin(imports, path) -> tuple[set[str], set[str]]:
    """(names the script binds by importing from outside its project, names it takes from its own
    project's modules). A call through a library name (`OmegaConf.load(cfg)`, `json.load`) is none of
    the project's helpers, whatever its name; a call of a project name (`from data_utils import
    load_dataset`) is the project's function, judged by its body, whatever a library calls its own."""
    import sys

    roots = _project_roots(path, imports)

    def project(module: str) -> bool:
        top = module.split(".")[0]
        return top not in sys.stdlib_module_names and any((r / top).is_dir() or (r / f"{top}.py").is_file() for r in roots)

    foreign: set[str] = set()
    own: set[str] = set()
    for node in imports:
        if isinstance(node, ast.Import):
            for a in node.names:
                (own if project(a.name) else foreign).add(a.asname or a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and (node.level or node.module):
            side = own if node.level or project(node.module) else foreign
            side.update(a.asname or a.name for a in node.names)
    return foreign, own


def _names_by_origin(imports, path, modules: list) -> tuple[set[str], set[str]]:
    """`_imported_names_by_origin`, with the project's names that no module read defines among the
    first (names whose calls are none of the project's helpers): `from .config import Config` where
    config.py is not read makes `Config.load(...)` unknown, not the `load` another module defines
    (sockeye's `ParallelDataSet.load`). A module read is known by its name (`from . import data_io`)
    and by what its top level defines or assigns (a name another module only imports is not read)."""
    foreign, own = _imported_names_by_origin(imports, path)
    known: set[str] = set()
    for m in modules:
        parts = getattr(m, "gpurig_where", "").replace(os.sep, "/").removesuffix(".py").split("/")
        known.add(parts[-2] if parts[-1] == "__init__" and len(parts) > 1 else parts[-1])
        for n in m.body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                known.add(n.name)
            elif isinstance(n, ast.Assign):
                known.update(t.id for t in n.targets if isinstance(t, ast.Name))
    # (a name is known by what it imports: `from src.train import main as app_main` is train.py's main)
    original = {a.asname or a.name.split(".")[0]: a.name.rpartition(".")[2] for node in imports
                if isinstance(node, (ast.Import, ast.ImportFrom)) for a in node.names}
    return foreign | {name for name in own if name not in known and original.get(name, name) not in known}, own


def _project_import(node: ast.Import | ast.ImportFrom, script_dir, tops=frozenset()) -> tuple[set[str], set[str], bool]:
    """What one import statement takes from the script's own project (files in its folder or up to
    two above, or above a package folder of the script's that it imports by name: `tops`, as
    `_project_roots` finds them): (names it binds from the project, of which the roots of calls,
    whether `import *`)."""
    from pathlib import Path

    def local(name: str | None) -> bool:
        if not name:
            return False
        rel = Path(*name.split("."))
        return any((root / rel.with_suffix(".py")).is_file() or (root / rel / "__init__.py").is_file()
                   for root in _folders_up(script_dir) + _path_folders(script_dir) + _package_roots(script_dir, {name.split(".")[0], *tops}))

    if isinstance(node, ast.ImportFrom):
        if node.level or local(node.module) or any(local(f"{node.module}.{a.name}") for a in node.names):
            bound = {a.asname or a.name for a in node.names}
            return bound, bound, any(a.name == "*" for a in node.names)
        return set(), set(), False
    return set(), {a.asname or a.name.split(".")[0] for a in node.names if local(a.name)}, False


def _local_modules(tree: ast.AST, path, imports: list | None = None) -> list:
    """The project's own modules the script imports (files beside it or in its folders), and the
    project modules those import in turn (two steps: `VQLoss` in vq_loss.py builds `LPIPS` of
    lpips.py), read and parsed; what cannot be found or parsed is left out. `imports`: the script's
    import statements when already collected (the scanner does), else they are looked for in `tree`."""
    from pathlib import Path

    imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))] if imports is None else imports
    roots = _project_roots(path, imports)
    if not roots:
        return []
    base = roots[0]
    found: list[ast.AST] = []
    paths: list[Path] = []
    seen: set[Path] = set()
    script = Path(path).resolve()  # (a script importing itself, `from train import Workspace`: it is read already)

    def add(cand: Path) -> ast.AST | None:
        if cand in seen or cand.resolve() == script or not cand.is_file() or cand.stat().st_size > 2_000_000 or len(seen) > 50:
            return None
        seen.add(cand)
        try:
            module = ast.parse(cand.read_bytes())
        except (SyntaxError, ValueError, RecursionError, OSError):
            return None
        module.gpurig_where = os.path.relpath(cand, base)  # type: ignore[attr-defined]  # "losses/lpips.py", "../src/utils.py"
        for n in ast.walk(module):
            if isinstance(n, ast.Call):
                normalize_call(n)
        found.append(module)
        paths.append(cand)
        return module

    def re_exports(init: Path, module: ast.AST) -> None:
        """A package re-exports its modules (`from .train_utils import *`, `from .datasets import
        create_dataloader` where datasets is a package itself): read those too, three levels down,
        depth first. (A stack, not a call of itself: no reference cycle keeps what was read alive.)"""
        stack = [(init, ast.walk(module), 0)]
        while stack:
            init, nodes, depth = stack[-1]
            node = next(nodes, None)
            if node is None:
                stack.pop()
            elif isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                sub = init.parent / Path(*node.module.split("."))
                add(sub.with_suffix(".py"))
                inner = add(sub / "__init__.py")
                if inner is not None and depth < 2:
                    stack.append((sub / "__init__.py", ast.walk(inner), depth + 1))

    def read(names: list[tuple[int, str]], here: Path) -> None:
        for level, name in names:
            rel = Path(*name.split("."))
            ups = [here, *here.parents]
            for root in (ups[level - 1:level] if level else roots):
                for cand in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
                    module = add(cand)
                    if module is not None and cand.name == "__init__.py":
                        re_exports(cand, module)

    read(_imported_names(imports), base)
    done = 0
    for _ in range(3):  # what those modules (and the ones their packages re-export) import
        step, done = list(zip(paths[done:], found[done:], strict=True)), len(found)
        for cand, module in step:
            read(_imported_names(ast.walk(module)), cand.parent)
    return found
