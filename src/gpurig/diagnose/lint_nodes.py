"""What one node of a script says, looked at shallowly, for `gpurig lint`: dotted names, keywords and
constants of a call, the parameters a call passes, paths and devices an expression names; and the
names the rules look for (rank words, GPU indices, downloaders, loggers, output silencers).
"""

from __future__ import annotations

import ast
import os
import re
from typing import Any

RANK_WORDS = ("rank", "is_main", "main_process", "master", "is_master", "is_primary", "primary", "local_zero", "global_zero", "process_zero",
              "process_index",  # Accelerate's (local_)process_index == 0
              "is_leader",  # s3prl's is_leader_process()
              "is_root", "root_worker", "is_chief")
RANK_NAMES = {"main", "leader", "is_leader", "zero",  # whole names that only make sense as "the rank that speaks"
              "should_save"}  # (the HF TrainingArguments property: true in the process that saves)
# Names of the process's GPU index: `if gpu == 0` / `if self.gpu_id == 0` picks one process as well.
GPU_NAMES = {"gpu", "gpu_id", "gpu_idx", "device_id", "local_gpu", "cuda_id", "gpu_index", "device_index"}
# Calls that fetch from the network into a shared cache (the Hub, torch.hub, dataset hubs).
_DOWNLOADERS = {"from_pretrained", "load_dataset", "load_state_dict_from_url", "hf_hub_download", "snapshot_download",
                "download_url", "download_and_extract_archive", "urlretrieve",
                "load_url"}  # torch.utils.model_zoo.load_url: load_state_dict_from_url's old name
# Calls that fetch by what they are, whatever their arguments (see lint_project._named_fetch).
NAMED_FETCHES = frozenset({"evaluate.load", "torch.hub.load", "torch.hub.list", "clip.load", "clip._download", "gdown.download", "wget.download"})
# A setting's value that is a model already built (`pretrained = AutoModel.from_pretrained(...)`), no switch.
BUILT = object()
# Dataset classes that download into their root folder when it lacks the files: OGB's and PyG's.
_AUTO_DATASETS = frozenset({
    "PygNodePropPredDataset", "PygGraphPropPredDataset", "PygLinkPropPredDataset", "NodePropPredDataset",
    "GraphPropPredDataset", "LinkPropPredDataset", "PygPCQM4Mv2Dataset", "PCQM4Mv2Dataset", "Planetoid", "Reddit",
    "Reddit2", "Flickr", "Yelp", "PPI", "TUDataset", "QM9", "ZINC", "MoleculeNet", "OGB_MAG", "AmazonProducts",
    "MovieLens", "Taobao", "CitationFull", "Coauthor", "Amazon", "WikiCS",
})

OUTPUT_LOG_METHODS = {"debug", "info", "warning", "warn", "error", "critical", "exception", "log"}


# A helper that silences every rank but one (DETR/MoCo's setup_for_distributed, YOLOv5's logging).
_SILENCERS = {"setup_for_distributed", "setup_print", "suppress_print", "silence_print", "disable_print",
              "is_master_print", "set_logging", "setup_logger", "init_distributed_mode", "init_distributed"}


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
    if isinstance(node, ast.Subscript) and parts:  # kwargs["model"].save_pretrained -> "kwargs[].save_pretrained"
        inner = _dotted(node.value)
        return ".".join([inner + "[]"] + list(reversed(parts))) if inner else ""
    return ""


def _kw(call: ast.Call, name: str) -> ast.keyword | None:
    return next((k for k in call.keywords if k.arg == name), None)


def _worker_started(call: ast.Call) -> ast.AST | None:
    """The function a call starts as worker processes: `mp.spawn(run, ...)`, `mp.spawn(fn=run, ...)`,
    `start_processes(run, ...)`, `Process(target=run)`."""
    short = _dotted(call.func).rpartition(".")[2]
    if short in ("spawn", "start_processes"):
        return call.args[0] if call.args else getattr(_kw(call, "fn"), "value", None)
    return getattr(_kw(call, "target"), "value", None) if short == "Process" else None


def _init_method(call: ast.Call) -> ast.AST | None:
    """What `init_process_group(backend, init_method, ...)` is given as its address: the keyword, or the
    second positional argument; of `"tcp://localhost:23456" if nodes == 1 else "env://"`, the fixed
    address of one path (not a default used only where the launcher's variables are absent)."""
    init = _kw(call, "init_method")
    value = init.value if init is not None else call.args[1] if len(call.args) > 1 and not isinstance(call.args[1], ast.Starred) else None
    if isinstance(value, ast.IfExp) and not any(isinstance(n, ast.Constant) and n.value in _LAUNCHER_KEYS or _dotted(n) == "os.environ"
                                                for n in ast.walk(value.test)):
        return next((b for b in (value.body, value.orelse) if isinstance(b, ast.Constant) and str(b.value).startswith("tcp://")), value)
    return value


def _is_const(node: ast.AST | None, value: Any) -> bool:
    return isinstance(node, ast.Constant) and node.value is value


def _leaf_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _sampler_shuffle(call: ast.Call, params: list[str]):
    """How a DistributedSampler built in a function shuffles: None (always: the default, or
    shuffle=True), (name, index) of the function's parameter that decides, or "no"."""
    shuffle = _kw(call, "shuffle")
    if shuffle is None or _is_const(shuffle.value, True):
        return None
    if isinstance(shuffle.value, ast.Name) and shuffle.value.id in params:
        return shuffle.value.id, params.index(shuffle.value.id)
    return "no"


def _shuffles_at(call: ast.Call, how) -> bool:
    """Whether a call of a sampler-building function (see `_sampler_shuffle`) gets a shuffling one."""
    if how is None:
        return True
    name, index = how
    kw = _kw(call, name)
    if kw is not None:
        return _is_const(kw.value, True)
    return len(call.args) > index and _is_const(call.args[index], True)


def _constant_defaults(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, Any]:
    """A function's parameters that default to a constant: name -> value."""
    args = fn.args.posonlyargs + fn.args.args
    pairs = list(zip(args[len(args) - len(fn.args.defaults):], fn.args.defaults, strict=True))
    pairs += [(a, d) for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True) if d is not None]
    return {a.arg: d.value for a, d in pairs if isinstance(d, ast.Constant)}


def _call_params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """A function's parameters as a call gives them: a method's without its `self` / `cls`."""
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]
    return params[1:] if params[:1] in (["self"], ["cls"]) else params


def _rebound(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The names a function assigns (`port = os.environ.get("PORT", port)`): a parameter among them
    may no longer hold what its caller gave."""
    return {t.id for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}


def _passes(call: ast.Call, param: str, index: int) -> bool:
    """Whether a call gives the parameter (by keyword, by position, or through *args/**kwargs)."""
    return _kw(call, param) is not None or any(k.arg is None for k in call.keywords) or len(call.args) > index \
        or any(isinstance(a, ast.Starred) for a in call.args)


def _path_like(value: ast.AST) -> bool:
    """A file name or a path built from one (looked at shallowly): "log.csv", f"{out}/log.txt",
    out / "results.txt", os.path.join(out, "main.log"), Path(out, "x.yaml"), or a folder's pathlib
    join (`self.exp_path / filename`)."""
    if isinstance(value, ast.Constant):
        return isinstance(value.value, str) and "." in value.value
    if isinstance(value, ast.JoinedStr):
        return True
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Div) and re.search(
            r"(?i)path|dir|folder|root", _leaf_name(value.left) or ""):
        return True
    if isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Div, ast.Add, ast.Mod)):
        return any(isinstance(side, ast.Constant) and isinstance(side.value, str) for side in (value.left, value.right))
    return isinstance(value, ast.Call) and isinstance(value.func, (ast.Name, ast.Attribute)) \
        and _leaf_name(value.func) in ("join", "Path")


def _kept_on_self(fn: ast.AST, params: set[str]) -> set[str]:
    """The attributes a function keeps one of `params` in: `self.filename = filename`, also in a tuple
    assignment (`self.world_size, self.rank = world_size, rank`) -> {"filename", "rank"}."""
    pairs = [(t, n.value) for n in ast.walk(fn) if isinstance(n, ast.Assign) for t in n.targets]
    pairs += [p for t, v in pairs if isinstance(t, ast.Tuple) and isinstance(v, ast.Tuple) for p in zip(t.elts, v.elts, strict=False)]
    return {t.attr for t, v in pairs if isinstance(v, ast.Name) and v.id in params
            and isinstance(t, ast.Attribute) and _dotted(t.value) == "self"}


def _one_process_group(call: ast.Call) -> bool:
    """`init_process_group(..., world_size=1)`: a group of one process that a library needs (a
    single-GPU run), not a distributed run to tear down at the end."""
    size = _kw(call, "world_size")
    return size is not None and isinstance(size.value, ast.Constant) and size.value.value == 1 and size.value.value is not True


def _if_chain(node: ast.If) -> tuple[tuple[tuple[int, int], ...], set[int]]:
    """The first and last lines of each branch of an if / elif / else chain (one branch runs), and
    the ids of its `elif` nodes (read as part of this chain, not as chains of their own)."""
    ranges, elifs = [], set()
    while True:
        ranges.append((node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno))
        if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
            node = node.orelse[0]
            elifs.add(id(node))
            continue
        if node.orelse:
            ranges.append((node.orelse[0].lineno, node.orelse[-1].end_lineno or node.orelse[-1].lineno))
        return tuple(ranges), elifs


def _device_arg(call: ast.Call) -> str | None:
    """The device a module part is moved to by `.to(dev)` / `.cuda(dev)` (not the CPU), as written.
    A class whose `__init__` moves parts to two or more (`.to(dev[0])`, `.to(dev[1])`) is split over
    GPUs by itself (model parallelism, the DDP tutorial's `ToyMpModel(dev0, dev1)`): DDP must be
    given no device_ids for it."""
    if isinstance(call.func, ast.Attribute) and call.func.attr in ("to", "cuda") and len(call.args) == 1 \
            and not (isinstance(call.args[0], ast.Constant) and str(call.args[0].value).startswith("cpu")):
        return ast.unparse(call.args[0])
    return None


# A file of prepared data rather than a checkpoint: `torch.load(os.path.join(data_dir, "train.pt"))`.
_DATA_STEM = re.compile(r"(?:\w*[_-])?(?:train|val|valid|validation|eval|test|dev|dataset|data|tokens|features|labels|cache|cached)(?:[_-]\w*)?",
                        re.IGNORECASE)
_NOT_DATA = re.compile(r"ckpt|checkpoint|model|weight|state|snapshot|pretrain|optim|epoch", re.IGNORECASE)


def _data_file(path: ast.AST) -> bool:
    """The file named (a literal, or else the variable holding it: `train_fname`) is prepared data."""
    names = [n.value for n in ast.walk(path) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    if not names:
        leaf = _leaf_name(path)
        names = [leaf] if leaf else []
    if not names:
        return False
    folder, stem = os.path.split(names[-1])
    stem = os.path.splitext(stem)[0]
    if not re.search(r"[A-Za-z]", stem):  # (`'datasets/cache/{}.bin'.format(name)`: the folder says what it holds)
        stem = os.path.basename(folder.rstrip("/"))
    # (or a Trainer checkpoint's parts that hold no CUDA tensor: scheduler.pt, rng_state.pth, training_args.bin)
    return _DATA_STEM.fullmatch(stem) is not None and not _NOT_DATA.search(stem) \
        or re.fullmatch(r"(?:lr_)?scheduler|rng_state(?:_\d+)?|training_args", stem) is not None


def _calls_barrier(*nodes: ast.AST) -> bool:
    """Whether any of the nodes (statements, a function) calls dist.barrier() under any name."""
    return any(isinstance(n, ast.Call) and _name_of(_dotted(n.func)) == "barrier" for node in nodes for n in ast.walk(node))


def _name_of(func: str) -> str:
    return func.rsplit(".", 1)[-1]


# A function whose name says it saves: the fix for it is at its call (`if rank == 0: save_checkpoint()`).
_SAVE_HELPER = re.compile(r"save|checkpoint|ckpt|dump|export|write|snapshot", re.IGNORECASE)


def _calls_function(func: str, name: str) -> bool:
    """`func` (a call's dotted name) calls this file's function or method `name`: `name(...)`,
    `self.name(...)`, `cls.name(...)`; never `model.name(...)` on some object."""
    if func == name:
        return True
    head, _, last = func.rpartition(".")
    return last == name and head in ("self", "cls")


# Dataset builders that read the user's own files (`load_dataset("json", data_files=...)`): nothing to download.
_LOCAL_BUILDERS = {"json", "csv", "text", "parquet", "arrow", "pandas", "imagefolder", "audiofolder", "videofolder",
                   "webdataset", "xml", "sql"}


# A folder on this machine by its name: `input_dir`, `output_dir`, `ckpt_dir`, `model_path` (never
# `model_name_or_path`, which may name a hub model).
_LOCAL_DIR = re.compile(r"\w*_dir|\w*_folder|(?:\w+_)?(?:ckpt|checkpoint|output|save|model|weights?|tokenizer|pretrained|peft|adapter|lora)_?path"
                        # a checkpoint this run wrote: `best_model_checkpoint`, `last_checkpoint`, `resume_from_checkpoint`
                        r"|(?:best|last|latest|resume)\w*_checkpoint"
                        r"|(?:model_)?config_?(?:path|file)?"
                        # a name that says it is a file: `data_file`, `train_files`, `train_manifest_path`
                        # (`data_path` is not: alpaca-lora defaults it to a hub dataset)
                        r"|\w+_files?|\w*(?:manifest|csv|jsonl?|tsv|txt|parquet|arrow)_?path",
                        re.IGNORECASE)


def _local_path(value: Any) -> bool:
    """A path of this machine, not a hub id: "../model", "./out/ckpt", "/data/llama", "~/weights"."""
    return isinstance(value, str) and value.startswith((".", "/", "~"))


def _reads_local_files(call: ast.Call) -> bool:
    """A load from this machine's files, not a hub: load_dataset("json", ...), or from_pretrained of
    a folder (`os.path.join(input_dir, "unet_ema")`, `input_dir`, `Path(out) / "model"`)."""
    short = _name_of(_dotted(call.func))
    if short == "load_dataset" and not call.args and _kw(call, "path") is None:
        return True  # not the Hub's (it needs a path): the project's own `load_dataset()`
    if short == "load_dataset":
        # A builder of local files, or a dataset read from a folder or files of this machine
        # (`load_dataset("wikihow", "all", data_dir="data/")`, `load_dataset(cfg.train_dataset_dir)`:
        # data the user fetched by hand), or streamed (nothing is written to the cache).
        return (bool(call.args) and isinstance(call.args[0], ast.Constant) and call.args[0].value in _LOCAL_BUILDERS) \
            or (bool(call.args) and _LOCAL_DIR.fullmatch(_leaf_name(call.args[0]) or "") is not None) \
            or (any(k.arg in ("data_dir", "data_files") for k in call.keywords)  # (of the Hub's dataset: fetched)
                and not (call.args and isinstance(call.args[0], ast.Constant) and _HUB_ID.fullmatch(str(call.args[0].value)))) \
            or any(k.arg == "streaming" and _is_const(k.value, True) for k in call.keywords)
    if short != "from_pretrained" or not call.args:
        return False
    if any(k.arg == "local_files_only" and _is_const(k.value, True) for k in call.keywords):
        return True  # (the Hub is never asked)
    # (PEFT's `PeftModel.from_pretrained(model, adapter_path)`: the adapter is the second argument)
    where = call.args[1] if len(call.args) > 1 and _dotted(call.func).endswith("PeftModel.from_pretrained") else call.args[0]
    # A path, not a hub id: "../model", "./out/ckpt", "/data/llama", "~/weights".
    if isinstance(where, ast.Constant) and _local_path(where.value):
        return True
    if isinstance(where, ast.Call) and _dotted(where.func) in ("os.path.join", "path.join", "Path", "pathlib.Path"):
        return True
    if isinstance(where, ast.BinOp) and isinstance(where.op, ast.Div):
        return True
    leaf = _leaf_name(where)
    return leaf is not None and _LOCAL_DIR.fullmatch(leaf) is not None


def _refetch_key(call: ast.Call, inside: tuple[str, ...], values: dict[str, set] | None = None) -> tuple | None:
    """What a from_pretrained call fetches, in its function: the class and the source it names. A second
    call with the same key, after the first ran in every rank, reads the files the first one wrote.
    Likewise a dataset class given `download=`, by its root folder (and `split=`, which some fetch
    apart): `MNIST(root, train=False, download=True)` after `MNIST(root, train=True, ...)` finds the
    files there (torchvision fetches both parts at once); and a Hub dataset by its name and
    configuration, whatever split; and a dataset class that fetches as it is built, by its root.
    `values`: the script's settings, which stand for their one value."""
    if any(k.arg == "download" for k in call.keywords):
        root = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "root"), None)
        return None if root is None else (inside, _dotted(call.func), (ast.unparse(root),),
                                          tuple(ast.unparse(k.value) for k in call.keywords if k.arg == "split"))
    if _name_of(_dotted(call.func)) == "load_dataset" and call.args:
        # (a Hub dataset is downloaded and prepared whole, every split, at its first load: `split=` reads it)
        return (inside, "load_dataset", tuple(ast.unparse(a) for a in call.args[:2]),
                tuple(ast.unparse(k.value) for k in call.keywords if k.arg in ("name", "data_files", "data_dir", "revision")))
    name = _name_of(_dotted(call.func))
    if name[:1].isupper():
        # A dataset class that fetches as it is built (PyG's `QM9(root, 'train')`, then `QM9(root, 'valid')`):
        # by its root folder, whatever part it then reads.
        root = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "root"), None)
        return None if root is None else (inside, _dotted(call.func), (ast.unparse(root),), ())
    if name != "from_pretrained" or not call.args:
        return None

    def source(a: ast.AST) -> str:  # (a setting of one value is that value: `--ref_id` and `--model_id` of one Hub id)
        name = _setting_name(a)
        return repr(next(iter(values[name]))) if values and name in values and len(values[name]) == 1 else ast.unparse(a)

    return (inside, _dotted(call.func), tuple(source(a) for a in call.args),
            tuple(ast.unparse(k.value) for k in call.keywords if k.arg in ("subfolder", "revision", "filename")))


_WEIGHTS_NAME = re.compile(r"DEFAULT|[A-Z0-9]+(?:_[A-Z0-9]+)*_V\d+")


def _names_weights(value: ast.AST) -> bool:
    """An expression naming torchvision's pretrained weights: `ResNet50_Weights.IMAGENET1K_V2`, "DEFAULT"."""
    if isinstance(value, ast.Attribute) and "_Weights" in _dotted(value):
        return True
    return isinstance(value, ast.Constant) and isinstance(value.value, str) and _WEIGHTS_NAME.fullmatch(value.value) is not None


def _pretrained_weights(call: ast.Call) -> ast.keyword | None:
    """torchvision's `weights=` naming pretrained weights, fetched into the hub cache when the model
    is built: `resnet50(weights=ResNet50_Weights.IMAGENET1K_V2)`, `weights="DEFAULT"`."""
    kw = _kw(call, "weights")
    return kw if kw is not None and _names_weights(kw.value) else None


# A model factory (create_model, build_model, create_model_and_transforms, get_model): fetches named weights.
_MODEL_FACTORY = re.compile(r"(?:create|build|get|make|init)_?\w*model", re.IGNORECASE)


# An endless iterator over a DataLoader (`cycle(loader)`, `inf_iterator(loader)`, `infinite_loader`):
# each pass over the data is an epoch, though no loop says so (not `repeat`: a tensor's method too).
_ENDLESS = re.compile(r"(?:\w+_)?(?:cycle|endless|forever|infinite)(?:_(?:iter|iterator|loader|loop|data|dataloader|batches|generator))?"
                      r"|(?:\w+_)?inf_(?:iter|iterator|loader|loop|data|dataloader|batches|generator)", re.IGNORECASE)


# A dataset for evaluation, by its name: val_dataset, dataset_val, testset, eval_data, data.valid, dev_dataset.
_EVAL_DATA = re.compile(r"(?:^|[._])(?:val|valid|validation|test|eval|evaluation|dev)(?:set|_?data(?:set)?)?(?:$|[._])"
                        r"|^(?:val|valid|test|eval|dev)(?:set|_?data(?:set)?)$|(?:val|test|dev)set$", re.IGNORECASE)


def _set_to_local_path(call: ast.Call, settings: dict, with_defaults: dict | None = None) -> bool:
    """from_pretrained(model_name) where the script sets that name only ever to paths of this
    machine (`model_name = "/scratch/llama3.2-3B-HF"`, passed on to the helper that loads it); or,
    set nowhere, where its option defaults to an absolute path of this machine (`--model_name` default
    "/root/data/pretrained/t5"; a relative default is often replaced by a Hub id in the README)."""
    leaf = _leaf_name(call.args[0]) if call.args and _name_of(_dotted(call.func)) == "from_pretrained" else None
    values = settings.get(leaf) if leaf else None
    if not values and leaf and with_defaults:
        defaults = with_defaults.get(leaf, set())
        values = defaults if all(isinstance(v, str) and v.startswith(("/", "~")) for v in defaults) else None
    return bool(values) and all(_local_path(v) for v in values)


# A Hugging Face Hub id ("bigcode/starcoder", "HuggingFaceH4/CodeAlpaca_20K"), not a folder of this
# machine ("data/train", "checkpoints/run1") nor a file ("data/train.json").
_HUB_ID = re.compile(r"(?![\w-]*(?<![^_-])(?:data|datasets?|models?|checkpoints?|ckpts?|outputs?|weights|pretrained|cache|hub"
                     r"|logs?|runs|exp|results|save[ds]?)(?:[_-][\w-]*)?/)[A-Za-z0-9][\w.-]*/(?![\w.-]*\.(?:jsonl?|csv|txt|pth?|bin|ya?ml|parquet|safetensors)$)"
                     r"[\w.-]+", re.IGNORECASE)


def _set_to_hub_id(call: ast.Call, settings: dict) -> bool:
    """from_pretrained(args.model_path), load_dataset(args.dataset_name) where every value the script
    or its shipped launch gives that name is a Hub id: a download, whatever the name says."""
    values = settings.get(_leaf_name(call.args[0])) if call.args else None
    return bool(values) and all(isinstance(v, str) and _HUB_ID.fullmatch(v) is not None for v in values)


def _option_defaults(calls: list) -> dict[str, set]:
    """The constant default of each command-line option: `add_argument("--model_path", default="x/y")`."""
    out: dict[str, set] = {}
    for c, f, _ in calls:
        flags = [a.value for a in c.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
        default = _kw(c, "default") if _name_of(f) == "add_argument" and flags else None
        if default is not None and isinstance(default.value, ast.Constant):
            out.setdefault(flags[0][2:].replace("-", "_"), set()).add(default.value.value)
    return out


def _one_listed_gpu(call: ast.Call) -> bool:
    """`DataParallel(model, device_ids=[local_rank])`: a list of one GPU, nothing to spread over."""
    ids = _kw(call, "device_ids")
    value = ids.value if ids is not None else call.args[1] if len(call.args) > 1 else None
    return isinstance(value, (ast.List, ast.Tuple)) and len(value.elts) == 1 and not isinstance(value.elts[0], ast.Starred)


# What a launcher (torchrun, mpirun, Slurm) sets: where these are unset, the run was started by hand.
_LAUNCHER_KEYS = frozenset({"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID"})

# A function that fetches by its name: `download_weights(phi)`, `fetch_checkpoint()`.
_FETCH_NAME = re.compile(r"download|fetch", re.IGNORECASE)


def _one_device(call: ast.Call, settings: dict) -> bool:
    """A Lightning Trainer / Fabric given one device: devices=1 (or gpus=1), as a literal or as a
    name the script sets to 1 (`devices = 1`, a config field `devices: int = 1`) and to nothing else."""
    kw = _kw(call, "devices") or _kw(call, "gpus")
    if kw is None:
        return False  # "auto": every GPU it sees
    if isinstance(kw.value, ast.Constant):
        return kw.value.value == 1
    leaf = _leaf_name(kw.value)
    return leaf is not None and settings.get(leaf) == {1}


def _device_from(node: ast.AST, rank_names: set[str]) -> bool:
    """A device named by a rank: `rank`, f"cuda:{rank}", torch.device("cuda", rank), `"cpu" if offload else rank`."""
    if isinstance(node, ast.IfExp):
        return _device_from(node.body, rank_names) or _device_from(node.orelse, rank_names)
    if isinstance(node, (ast.Name, ast.Attribute)):
        return _dotted(node) in rank_names
    if isinstance(node, ast.JoinedStr):
        text = "".join(str(v.value) for v in node.values if isinstance(v, ast.Constant))
        return text.startswith("cuda:") and any(isinstance(v, ast.FormattedValue) and _dotted(v.value) in rank_names
                                                for v in node.values)
    if isinstance(node, ast.Call) and _dotted(node.func) in ("torch.device", "device") and node.args:
        return any(_device_from(a, rank_names) for a in node.args[-1:]) and (
            len(node.args) == 1 or isinstance(node.args[0], ast.Constant) and node.args[0].value == "cuda")
    return False


class _Walker(ast.NodeVisitor):
    """ast.NodeVisitor, walked faster: one method per node class, looked up once (NodeVisitor builds
    a method name at every node); operators and a name's Load/Store are not walked into; a literal
    is not looked at (NodeVisitor's visit_Constant looks for the visit_Num/visit_Str of old Pythons).
    The tables live on the class, never as bound methods on an instance: a walker that referred to
    itself would be freed only by a pass of the cycle collector over everything it holds (seconds,
    at the end of a 14 MB script)."""

    _dispatch: dict[type, Any] = {}  # each subclass has its own (set in __init_subclass__)
    _child_fields: dict[type, tuple[str, ...]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._dispatch = {}

    def visit(self, node: ast.AST) -> Any:
        method = self._dispatch.get(node.__class__)
        if method is None:
            cls = type(self)
            method = self._dispatch[node.__class__] = getattr(cls, "visit_" + node.__class__.__name__, None) or cls.generic_visit
        return method(self, node)

    def visit_Constant(self, node: ast.Constant) -> None:
        pass

    def generic_visit(self, node: ast.AST) -> None:
        fields = self._child_fields.get(node.__class__)
        if fields is None:
            fields = self._child_fields[node.__class__] = tuple(f for f in node._fields if f not in ("ctx", "op", "ops"))
        visit = self.visit
        for name in fields:
            value = getattr(node, name, None)
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST):
                        visit(item)
            elif isinstance(value, ast.AST):
                visit(value)


def _unwrapped(value: ast.AST) -> ast.AST:
    """`str(x)`, `int(x)`, `f"{x}"`, `"%d" % x` and `"{}".format(x)`: x."""
    if isinstance(value, ast.Call) and _dotted(value.func) in ("str", "int") and len(value.args) == 1:
        return value.args[0]
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mod) and isinstance(value.left, ast.Constant) \
            and value.left.value in ("%d", "%s", "%i") and not isinstance(value.right, ast.Tuple):
        return value.right
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "format" \
            and isinstance(value.func.value, ast.Constant) and value.func.value.value in ("{}", "{0}") \
            and len(value.args) == 1 and not value.keywords:
        return value.args[0]
    if isinstance(value, ast.JoinedStr) and len(value.values) == 1 and isinstance(value.values[0], ast.FormattedValue):
        return value.values[0].value
    return value


def _setting_name(value: ast.AST) -> str | None:
    """The name of the setting an expression reads: `hparams.dist_url`, `h.dist_config['dist_url']`,
    also as `str(...)` or `f"{...}"`."""
    value = _unwrapped(value)
    if isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant) and isinstance(value.slice.value, str):
        return value.slice.value
    if isinstance(value, (ast.Attribute, ast.Name)):
        return _dotted(value).rpartition(".")[2] or None
    return None


def _names_a_file(value: ast.AST) -> bool:
    """`pretrained=args.checkpoint`, `pretrained=cfg.ckpt_path`, `pretrained="/data/w/deit.pth"`: a
    file of this machine, not a switch."""
    if isinstance(value, ast.Constant):
        return _local_path(value.value)
    leaf = (_leaf_name(value) or "").lower()
    return any(w in leaf for w in ("checkpoint", "ckpt", "path", "file", "resume"))


# Calls that write a file the caller names: short name -> where the path is (position, keyword).
_FILE_WRITERS = {"savefig": (0, "fname"), "save_image": (1, "fp"), "imwrite": (0, "filename"), "imsave": (0, "fname"),
                 "copyfile": (1, "dst"), "copy2": (1, "dst"), "copy": (1, "dst")}
# NumPy's: only as `np.save(...)` / `numpy.save(...)` (a `save` of anything else is another call).
_NUMPY_WRITERS = {"save": (0, "file"), "savez": (0, "file"), "savez_compressed": (0, "file"), "savetxt": (0, "fname")}
# Writers known by their whole name (a `save` of anything else is another call): OmegaConf's config.
_NAMED_WRITERS = {"OmegaConf.save": (1, "f")}
# A config object dumped to a file (`cfg.dump(osp.join(cfg.work_dir, ...))`: mmcv's / mmengine's Config
# writes its file when given one; with none, as yacs' `cfg.dump()`, it only returns the text).
_CONFIG_NAME = re.compile(r"(?i)^(?:cfg|config|conf|configs|\w+_cfg|\w+_config)$")


def config_dump_file(call: ast.Call) -> ast.AST | None:
    """The file a config object's dump writes: `cfg.dump(path)` / `config.dump(file=path)`, else None."""
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "dump" and _CONFIG_NAME.match(_name_of(_dotted(call.func.value)) or "")):
        return None
    given = _kw(call, "file")
    if given is not None and len(call.keywords) == 1 and not call.args:
        return given.value
    return call.args[0] if len(call.args) == 1 and not call.keywords else None


def _written_file(call: ast.Call, func: str) -> ast.AST | None:
    """The file a call writes, where it names one: `path.write_text()` (the path), `plt.savefig(path)`,
    `torchvision.utils.save_image(x, path)`, `cv2.imwrite(path, img)`, `shutil.copyfile(src, dst)`,
    `np.save(path, array)`, `OmegaConf.save(cfg, path)`."""
    short = func.rpartition(".")[2]
    if short == "dump":
        return config_dump_file(call)
    if short in ("write_text", "write_bytes"):
        return call.func.value if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name) else None
    if func in (f"np.{short}", f"numpy.{short}") and short in _NUMPY_WRITERS:
        at, key = _NUMPY_WRITERS[short]
    elif func in _NAMED_WRITERS:
        at, key = _NAMED_WRITERS[func]
    elif short not in _FILE_WRITERS or (short.startswith("copy") and func not in (short, "shutil." + short)):
        return None
    else:
        at, key = _FILE_WRITERS[short]
    kw = _kw(call, key)
    return kw.value if kw is not None else call.args[at] if len(call.args) > at else None


def _path_root(path: ast.AST) -> str | None:
    """The name a path is built on, where it is a plain name: `filename` in `filename + "_0.png"`,
    `os.path.join(out, "a.png")`, f"{out}/a.png" (None for `cfg.out_dir + ...`: a setting, not a name)."""
    while not isinstance(path, ast.Name):
        if isinstance(path, ast.BinOp):
            path = path.left
        elif isinstance(path, ast.Call) and path.args and _name_of(_dotted(path.func)) in ("join", "Path"):
            path = path.args[0]
        elif isinstance(path, ast.JoinedStr) and path.values and isinstance(path.values[0], ast.FormattedValue):
            path = path.values[0].value
        else:
            return None
    return path.id


# Every call some rule judges, by its last name (`_lint_scanned`); a call named otherwise matters
# only as a fact (`short_names`, `cuda_call`, ...) or as a call of the file's own functions.
_RULE_CALLS = frozenset({
    "DataParallel", "data_parallel", "DistributedDataParallel", "DDP", "set_device", "set_device_index", "to", "cuda",
    "load", "list", "init_process_group", "destroy_process_group", "add_argument", "print", "save", "SummaryWriter",
    "open", "tqdm", "DataLoader", "DistributedSampler", "barrier", "spawn", "start_processes", "Process", "setLevel", "basicConfig", "disable",
    "save_pretrained", "save_to_disk", "push_to_hub", "Trainer", "Fabric", "write_text", "write_bytes", "load_data", "FSDP",
    "FullyShardedDataParallel", *_FILE_WRITERS, *_NUMPY_WRITERS, "system", "run", "call", "check_call", "check_output", "Popen",
    "register_save_state_pre_hook", "register_load_state_pre_hook", "save_state", "load_state", "fully_shard",
    "init_device_mesh", "TrainingArguments", "Seq2SeqTrainingArguments", "from_config", "dump", "init_dist",
}) | _AUTO_DATASETS | _DOWNLOADERS | OUTPUT_LOG_METHODS | _SILENCERS
