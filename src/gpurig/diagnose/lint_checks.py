"""The checks of `gpurig lint`: every rule, judged over what one scan of a script collected
(`_lint_scanned`, over a `_Scanner` of lint_scan.py and the project's own modules of lint_project.py),
with the shallow tests of calls only the rules ask (a local dataset builder, a model factory...)."""

from __future__ import annotations

import ast
import re
from functools import cache, partial
from pathlib import Path

from gpurig.diagnose import lint_followups as followups
from gpurig.diagnose import lint_guards as guards
from gpurig.diagnose import lint_modules as mods
from gpurig.diagnose import lint_paths as paths
from gpurig.diagnose import lint_rendezvous as rendezvous
from gpurig.diagnose.lint_devices import RankDevices, _loose_load, fold_uses, report
from gpurig.diagnose.lint_growth import _listed, _origin, switched_off
from gpurig.diagnose.lint_guards import _mentions_rank, _never_destroys, _never_run, _runs_on_every_rank
from gpurig.diagnose.lint_nodes import (
    _DOWNLOADERS,
    _ENDLESS,
    _EVAL_DATA,
    _MODEL_FACTORY,
    _SAVE_HELPER,
    BUILT,
    GPU_NAMES,
    OUTPUT_LOG_METHODS,
    _calls_function,
    _data_file,
    _dotted,
    _init_method,
    _is_const,
    _kw,
    _leaf_name,
    _name_of,
    _names_a_file,
    _one_listed_gpu,
    _one_process_group,
    _option_defaults,
    _path_root,
    _pretrained_weights,
    _reads_local_files,
    _refetch_key,
    _set_to_hub_id,
    _set_to_local_path,
    _setting_name,
    _shuffles_at,
    _unwrapped,
    _written_file,
)
from gpurig.diagnose.lint_paths import gives_own_file, in_private_file, path_given
from gpurig.diagnose.lint_project import (
    _SHELL_CALLS,
    _group_joiners,
    _imports_trainer,
    _is_download_call,
    _joiners_in_process,
    _mentions_rank_value,
    _named_fetch,
    _project_helpers,
    _sampler_functions,
    _silences_output,
    receiver_of_helper,
)
from gpurig.diagnose.lint_rules import RULES, LintFinding, fold_alternatives
from gpurig.diagnose.lint_scan import _Scanner

_PLACE = followups.PLACE


def _lint_scanned(scan: _Scanner, source: str, path, modules: list | None = None) -> list[LintFinding]:
    """The rules, over what one scan of the whole script collected (never the tree itself: a big
    script is scanned one top-level statement at a time and its tree never held whole)."""
    findings: list[LintFinding] = []
    modules = mods._local_modules(None, path, scan.imports) if modules is None else modules
    folder = scan.script_dir or (Path(path).resolve().parent if path else None)  # the script's own folder
    here = Path(path).name if path else "<stdin>"  # the script, as a finding's `related` names its lines

    # What the project ships beside the script, read from disk only where a rule needs it, once.
    @cache
    def configs() -> list:
        from gpurig.diagnose.lint_read import project_configs

        return project_configs(folder)

    @cache
    def settings_with_launch(defaults: bool = False) -> dict[str, set]:
        """The script's settings, and the values its shipped shell scripts give its options (they replace
        the defaults). With `defaults`, the options' defaults too: only a sign of the Hub (a local default
        is often replaced by a Hub id in the README's command)."""
        from gpurig.diagnose.lint_read import shipped_options
        merged = _option_defaults(calls) if defaults else {}
        return {**merged, **{k: merged.get(k, set()) | v for k, v in scan.settings.items()}, **shipped_options(folder)}

    starts: list = []  # where each line begins, made at the first finding (a big file's lines are not split)

    def line_text(n: int) -> str:
        if not starts:
            from array import array

            starts.append(array("q", [0]))
            starts[0].extend(m.end() for m in re.finditer("\n", source))
        offsets = starts[0]
        if not 0 < n <= len(offsets):
            return ""
        end = source.find("\n", offsets[n - 1])
        return source[offsets[n - 1]:end if end >= 0 else len(source)].rstrip("\r")

    def add(rule: str, node: ast.AST, title: str, fix: str, where: str = "") -> None:
        """One finding at `node`; `where`: everything a helper was found to do, of which the title may
        name only the first few: each `path:line` in it (or in the title) goes to the finding's `related`."""
        line = getattr(node, "lineno", 1)
        code = line_text(line).strip()
        related = list(dict.fromkeys(_PLACE.findall(title + " " + where)))
        findings.append(LintFinding(id=rule, severity=RULES[rule].severity, line=line, title=title, fix=fix, code=code,
                                    why=RULES[rule].why, related=related))

    followups.resolve_late(scan)
    if scan.flag_guarded:  # `not args.multiprocessing_distributed or rank == 0`, that flag on by default
        on = guards.flags_on(set(scan.flag_guarded.values()), [(c, _dotted(c.func), g) for c, g in scan.calls], modules, configs())
        scan.calls = [(c, g or scan.flag_guarded.get(id(c)) in on) for c, g in scan.calls]
    # A script that starts its own workers (mp.spawn) and is never started by a launcher (it reads no RANK/LOCAL_RANK/WORLD_SIZE;
    # its workers may still meet through env:// on an address it sets): the function that spawns, or the __main__ block that does, runs once.
    if (scan.spawns_in or scan.main_spawns) and not re.search(r"""['"](?:LOCAL_RANK|RANK|WORLD_SIZE)['"]""", source):
        scan.calls = [(c, g or (id(c) in scan.main_calls and scan.main_spawns)
                       or bool(scan.enclosing.get(id(c))) and scan.enclosing[id(c)][-1] in scan.spawns_in)
                      for c, g in scan.calls]
    first_fns = guards.first_functions(scan)
    one_rank = guards.one_rank_functions(scan)
    one_rank_objects = scan.null_bound & scan.guard_bound  # (their methods do nothing on the other ranks)
    calls = [
        (c, _dotted(c.func), g or any(f in one_rank for f in scan.enclosing.get(id(c), ()))
         or isinstance(c.func, ast.Attribute) and _dotted(c.func.value) in one_rank_objects)
        for c, g in scan.calls
    ]
    calls += followups.worker_calls(calls, scan.defined)
    names = set(scan.short_names)
    module_calls = {_name_of(_dotted(n.func)) for m in modules for n in ast.walk(m) if isinstance(n, ast.Call)}
    downloading_helpers, saving_helpers, loading_helpers, data_parallel_helpers, rank_device_helpers, ambiguous = _project_helpers(
        modules, scan.name_aliases, scan.imports, [c for c, _, _ in calls])
    instances = {a.targets[0].id: _name_of(_dotted(a.value.func)) for a, _ in scan.assigns if ambiguous and isinstance(a, ast.Assign)
                 and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name) and isinstance(a.value, ast.Call)}  # model = Model()
    # (rule, what the helper does in the end): reported once, at the first call that gets there
    # (`WATrainer()` and `Trainer()` both reaching the same DataParallel are one mistake).
    reported_helpers: set[tuple[str, str]] = set()
    pushed: set[int] = set()  # the blocks whose first push_to_hub was reported (its others push the same run)
    text = source
    uses_cuda = scan.cuda_call or "'nccl'" in text or '"nccl"' in text or "device_ids" in text
    # (a call of the project's function that starts the group in this process, `setup.setup_dist_env()`, or of a library's:
    # `from mmcv.runner import init_dist`, as of one that does it itself)
    started = followups.library_group_start(scan.imports, calls)
    distributed = _runs_on_every_rank(scan, calls, names, text, _imports_trainer(modules)) or bool(names & _joiners_in_process(modules, scan.class_bases)) \
        or started is not None
    silenced = scan.silenced or any(_silences_output(m) for m in modules)
    set_epoch_anywhere = scan.set_epoch_call or "set_epoch" in module_calls
    if _never_destroys(scan, calls):
        names = names - {"destroy_process_group"}
    # (a project function called only in an exception handler, `except: cleanup()`, never ends a run that ends normally)
    handled_only = scan.run_in_handlers - scan.run_outside_handlers
    destroys_in_modules = followups.ends_group(modules, (names | {f for _, f, _ in calls}) - handled_only)
    # Calls of the project that start a group or workers that do (`train_ext()`): they run in every rank.
    joins_group = set() if distributed else _group_joiners(modules)
    any_set_device = scan.set_device_call or "set_device" in module_calls  # a setup helper of the project may set it

    # Datasets that download on construction (OGB, PyG) built by the parent before it spawns the
    # workers: the files are there when the workers build them again.
    dataset_classes = mods._dataset_classes(scan.imports)
    parent_built = {_name_of(f) for c, f, _ in calls if mods._builds_dataset(f, dataset_classes) and (
        (id(c) in scan.main_calls and scan.main_spawns) or (scan.enclosing.get(id(c)) or ("",))[-1] in scan.spawns_in)}

    # A rendezvous setting the script starts the group with or hands on (`init_method=hparams.dist_url`): fixed by the project?
    passed = rendezvous._passed_settings(calls, scan.defined, modules)
    fixed_settings = rendezvous._fixed_rendezvous_settings(modules, configs()) if passed else {}

    # Options the script itself defaults to a fixed address: that default is reported, and a config
    # setting the same option is the same mistake, not a second.
    fixed_options = rendezvous._fixed_option_names(calls) if fixed_settings else set()

    def never_run(call: ast.Call) -> bool:
        return _never_run(scan, call)

    def set_device_before(call: ast.Call) -> bool:
        """Whether torch.cuda.set_device ran on every path that reaches `call`: in a statement
        before it in its own block or an enclosing one, not in a sibling branch. Inside a function
        the callers' path is unknown: a set_device anywhere in the file counts."""
        if scan.device_before.get(id(call), False):
            return True
        inside = scan.enclosing.get(id(call))
        if not inside:
            return False
        # In a function that sets the device itself on some path, only its own paths count (the
        # `args.gpu is None` branch of ImageNet-style scripts); otherwise the callers may have.
        return any_set_device and inside[-1] not in scan.sets_device_in

    named_path = partial(paths.named_path, scan)  # (call, node): the path a name or attribute stands for

    def own_gpu(device: ast.AST) -> bool:
        """A device of this process's own GPU: `local_rank`, `args.gpu`, f"cuda:{local_rank}",
        torch.device("cuda", gpu_id), or a name assigned one of those (three steps); never the global rank."""
        steps = 0  # (a loop, not a call of itself: no reference cycle keeps `scan` alive)
        while True:
            names = [n for n in ast.walk(device) if isinstance(n, (ast.Name, ast.Attribute))]
            if any(_dotted(n) in rank_names for n in names):
                return False
            named = scan.device_vars.get(_dotted(device)) if isinstance(device, (ast.Name, ast.Attribute)) and steps < 3 else None
            if named is None:
                return any((_leaf_name(n) or "").lower() in GPU_NAMES or "local_rank" in (_leaf_name(n) or "").lower()
                           for n in names)
            device, steps = named, steps + 1

    def placed_on_own_gpu(call: ast.Call) -> bool:
        """DDP(model) of a model already moved to this process's GPU on the path to it (in its own
        block or an enclosing one, not a sibling branch): DDP keeps it there (a single-device module
        needs no device_ids)."""
        if not call.args or not _dotted(call.args[0]) or id(call) not in scan.blocks_of:
            return False
        model, path = _dotted(call.args[0]), scan.blocks_of[id(call)]
        return any(m == model and path[:len(b)] == b and line <= call.lineno and own_gpu(d) for m, d, b, line in scan.moves)

    devices = RankDevices(scan, calls, text, names, modules)
    rank_names, given_local_rank, is_global_rank = devices.rank_names, devices.given_local_rank, devices.is_global_rank

    report(devices, add, modules)
    # library names (and project names no module read defines), and the project's own (judged by its body)
    foreign, project_names = mods._names_by_origin(scan.imports, path, modules)
    lib_fetchers = mods._library_fetchers(scan.imports)  # lpips.LPIPS, FrechetInceptionDistance, ...
    fetched: dict[tuple, list[tuple[int, ...]]] = {}  # from_pretrained fetches reported: _refetch_key -> the blocks each ran in
    said: dict[tuple, LintFinding] = {}  # the finding of each dataset download reported, by its _refetch_key
    param_writes: list[tuple[str, str, ast.Call]] = []  # (function of this file, its parameter, the write to the path it names)
    torch_saving_helpers = {fn[-1] for c, f, g in calls if f == "torch.save" and not g and (fn := scan.enclosing.get(id(c))) and _SAVE_HELPER.search(fn[-1])}
    for call, func, guarded in calls:
        short = _name_of(func)
        helper = None if func.partition(".")[0] in foreign or not receiver_of_helper(func, ambiguous, instances, scan.name_aliases) \
            else short  # (`OmegaConf.load` is no helper of the project, nor `batch.load()` where other classes' load reads a checkpoint)
        if (short == "DataParallel" or short in scan.data_parallel_classes or func.endswith("parallel.data_parallel")) and not _one_listed_gpu(call) \
                and mods._torch_data_parallel(scan.data_parallel_classes.get(short, func), scan.imports, project_names):
            add(
                "data-parallel", call,
                "nn.DataParallel: one process drives every GPU, and the GIL and GPU 0 hold it back",
                "Use DistributedDataParallel with one process per GPU: wrap with DDP(model, device_ids=[local_rank]) "
                "and start with `gpurig launch script.py` (torchrun).",
            )
        elif helper in data_parallel_helpers and short not in scan.defined and ("data-parallel", _origin(data_parallel_helpers[short])) not in reported_helpers \
                and func.partition(".")[0] not in ("self", "cls"):  # a function of the project, not a method of this file's class
            reported_helpers.add(("data-parallel", _origin(data_parallel_helpers[short])))
            add("data-parallel", call, f"{short}() wraps the model in nn.DataParallel ({data_parallel_helpers[short]}): "
                "one process drives every GPU, and the GIL and GPU 0 hold it back",
                "Use DistributedDataParallel with one process per GPU (DDP(model, device_ids=[local_rank])) and start "
                "with `gpurig launch script.py` (torchrun).")
        if short in ("DistributedDataParallel", "DDP"):
            fup = _kw(call, "find_unused_parameters")
            if fup is not None and _is_const(fup.value, True):
                add(
                    "find-unused-parameters", call,
                    "find_unused_parameters=True walks the autograd graph every step (slower)",
                    "Leave it off unless DDP raises 'Expected to have finished reduction'; if some parameters really are "
                    "unused, freeze them or make every output feed the loss (static_graph=True helps when the unused set is fixed).",
                )
            if uses_cuda and _kw(call, "device_ids") is None and len(call.args) < 2 and not set_device_before(call) \
                    and not placed_on_own_gpu(call) and not (call.args and _dotted(call.args[0]) in scan.multi_device_models):  # (`DDP(model, device_ids)`: its second argument; a model split over GPUs takes none)
                add(
                    "ddp-without-device", call,
                    "DDP built with no device_ids and no torch.cuda.set_device(local_rank) before it on this path: every rank may use GPU 0",
                    "Call torch.cuda.set_device(local_rank) first thing (local_rank = int(os.environ['LOCAL_RANK'])) and build "
                    "DDP(model, device_ids=[local_rank]).",
                )
            ids = _kw(call, "device_ids")
            if ids is not None and is_global_rank(ids.value, call):
                add("global-rank-as-device", call, "device_ids uses the global rank: on a second node there is no such GPU",
                    "Use the local rank: local_rank = int(os.environ['LOCAL_RANK']); DDP(model, device_ids=[local_rank]).")
        if short in ("set_device", "set_device_index") and call.args and not given_local_rank(_dotted(call.args[0]), call) and (
                _dotted(call.args[0]) in rank_names or devices.reads_global_rank(call.args[0])):  # (dist.get_rank(), hvd.rank())
            add("global-rank-as-device", call, "torch.cuda.set_device(global rank): on a second node there is no such GPU",
                "torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) (the rank within this node).")
        if func == "torch.load":
            own_file = bool(call.args) and (_mentions_rank_value(call.args[0])  # each rank reads what it saved
                                            or _data_file(call.args[0]))  # a prepared dataset: CPU tensors
            loose = _loose_load(call)
            if loose and distributed and not guarded and not own_file and not never_run(call):
                add("torch-load-without-map-location", call, loose,
                    "torch.load(path, map_location='cpu') (then .to(device)), or map_location=f'cuda:{local_rank}'.")
        if helper in rank_device_helpers and short not in scan.defined and ("global-rank-as-device", _origin(rank_device_helpers[short])) not in reported_helpers \
                and not guarded:
            reported_helpers.add(("global-rank-as-device", _origin(rank_device_helpers[short])))
            add("global-rank-as-device", call, f"{short}() makes the global rank the GPU index ({rank_device_helpers[short]}): "
                "on a second node there is no such GPU",
                f"In {short}(), torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) (the rank within this node).")
        if helper in loading_helpers and short not in scan.defined and ("torch-load-without-map-location", _origin(loading_helpers[short])) not in reported_helpers \
                and distributed and not guarded and not switched_off(call, short, loading_helpers[short], modules):
            reported_helpers.add(("torch-load-without-map-location", _origin(loading_helpers[short])))
            add("torch-load-without-map-location", call,
                f"{short}() reads a checkpoint ({loading_helpers[short]}) " + ("on every rank: all of them onto that one GPU" if " onto " in
                loading_helpers[short] else "without map_location on every rank: tensors saved on cuda:0 load onto GPU 0 in every rank"),
                "Give that torch.load map_location='cpu' (then .to(device)), or map_location=f'cuda:{local_rank}'.")
        if short == "init_process_group":
            init = _init_method(call)
            # (or `f"tcp://{master_addr}:{master_port}"`, each name set once in the script, to a constant)
            joined = rendezvous.joined_text(init, lambda name: scan.constants.get(name) if len(re.findall(
                rf"(?<![\w.]){re.escape(name)}\s*(?::[^=\n]*)?=(?!=)", text)) == 1 else None)
            address = init.value if isinstance(init, ast.Constant) else joined
            if isinstance(address, str) and address.startswith("tcp://") and (joined is None or rendezvous._TCP_FIXED.match(joined)) \
                    and id(call) not in scan.env_fallback:
                add(
                    "hard-coded-rendezvous", init,  # (the line of the address itself, in a call over several lines)
                    f"init_method={address!r} is hard-coded: a second job on this machine fails with 'Address already in use'",
                    "Drop init_method (the default env:// reads MASTER_ADDR/MASTER_PORT set by torchrun) and start with "
                    "`gpurig launch`, which picks a free port.",
                )
            if "destroy_process_group" not in names and not destroys_in_modules and not any(f.id == "no-destroy-process-group" for f in findings) \
                    and not _one_process_group(call):  # (one per file, at its first start)
                add("no-destroy-process-group", call, "init_process_group with no destroy_process_group: the group is torn down at interpreter exit",
                    "End the script (every rank) with dist.barrier() then dist.destroy_process_group(), e.g. in a `finally:`.")
        setting = passed.get(id(call))
        if setting in fixed_settings and setting not in fixed_options and ("rendezvous", setting) not in reported_helpers:
            reported_helpers.add(("rendezvous", setting))  # (one mistake, at its first use)
            add("hard-coded-rendezvous", call,
                f"{'init_method' if short == 'init_process_group' else short + '()'} gets the project's {setting} setting, "
                f"fixed to {fixed_settings[setting]}: a second job on this machine fails with 'Address already in use'",
                "Default that setting to env:// and let the launcher choose the port (`gpurig launch` / torchrun).")
        fixed = rendezvous.fixed_option_default(call, scan, names, modules, text, here) if short == "add_argument" else None
        if fixed is not None:  # (--dist-url/--master-port/--init-method with a fixed default)
            add("hard-coded-rendezvous", fixed[0], fixed[1],
                "Default to env:// and let the launcher choose the port (`gpurig launch` / torchrun --master-port 0).")
        if (distributed or short in joins_group) and not guarded and id(call) not in scan.cache_fills:
            # Under a rank that goes first (`with main_process_first():`, or a fetch done first): the
            # others fetch from its cache after it, but what they write, every one of them writes
            # (unless they find it written: a cache filled where a load failed or a file is missing).
            goes_first = id(call) in scan.first or any(f in first_fns for f in scan.enclosing.get(id(call), ()))
            download = _kw(call, "download")
            pretrained = _kw(call, "pretrained")
            # `GPT.from_pretrained(...)` of a class of this file: its own body is judged, not its name.
            head = func.rpartition(".")[0]
            own = (head, short) in scan.own_methods or (head in ("self", "cls") and short in scan.defined)
            fetches = (short in _DOWNLOADERS and not own and func not in project_names
                       and (not _reads_local_files(call) or _set_to_hub_id(call, settings_with_launch(True)))
                       and not (short == "from_pretrained" and (_set_to_local_path(call, settings_with_launch(), settings_with_launch(True))
                                                                or bool(call.args) and _leaf_name(call.args[0]) in scan.offline_sources))) \
                or _named_fetch(call) or (mods._builds_dataset(func, dataset_classes) and short not in scan.defined and short not in parent_built) \
                or (short not in scan.defined and mods._fetches_by_library(call, lib_fetchers))
            # (`pretrained=pretrained` where the script only ever sets `pretrained = False`, or a model it built: off)
            on = lambda kw: kw is not None and not _is_const(kw.value, False) and not _is_const(kw.value, None) \
                and not (isinstance(kw.value, ast.Name) and scan.settings.get(kw.value.id, {True}) <= {False, None, BUILT})  # noqa: E731
            # `create_model_and_transforms(args.model, args.pretrained)`: the weights named by a
            # positional argument, as the `pretrained=` keyword names them.
            by_position = short not in scan.defined and not own and _MODEL_FACTORY.match(short) is not None and any(
                "pretrained" in (_leaf_name(a) or "").lower() for a in call.args)
            weights = short not in scan.defined and _pretrained_weights(call) is not None  # torchvision's weights=
            file_weights = on(pretrained) and _names_a_file(pretrained.value)  # `ram(pretrained=args.checkpoint)`
            # (the same class and source fetched before it on its path, in every rank: read from the cache)
            refetch, blocks = _refetch_key(call, scan.enclosing.get(id(call), ()), short == "from_pretrained" and settings_with_launch(True) or None), scan.blocks_of.get(id(call), ())
            cached = refetch is not None and any(blocks[:len(b)] == b for b in [*fetched.get(refetch, ()), *(
                fetched.get(("pipeline", refetch[2]), ()) if _kw(call, "subfolder") else ())])  # (a pipeline fetched every part)
            if (on(download) or ((on(pretrained) or by_position or weights) and not own) or fetches) and not never_run(call) \
                    and not goes_first and not file_weights and not cached:
                # (other parts of a source fetched before on its path, `AutoConfig` then `AutoModel` of one Hub id: one mistake)
                hub = ("source", refetch[0], refetch[2][0]) if refetch is not None and short == "from_pretrained" else None
                merged = hub is not None and hub in said and any(blocks[:len(b)] == b for b in fetched[hub])
                if merged:
                    said[hub].related.append(f"{here}:{call.lineno}")
                    again = ", ".join(r.rpartition(":")[2] for r in said[hub].related if r.startswith(f"{here}:"))
                    said[hub].title = said[hub].title.partition(" (and from the same source at line")[0] + \
                        f" (and from the same source at line{'s' if ', ' in again else ''} {again})"
                elif refetch is not None:
                    fetched.setdefault(hub, []).append(blocks)
                    fetched.setdefault(refetch, []).append(blocks)
                    if head.endswith("Pipeline") and not _kw(call, "subfolder"):
                        fetched.setdefault(("pipeline", refetch[2]), []).append(blocks)
                if not merged:
                    what = "download=True" if on(download) else "fetching pretrained weights" if on(pretrained) or by_position or weights \
                        else f"the download command of {func}()" if func in _SHELL_CALLS else f"{short}()"
                    # (`MyVLM.from_pretrained(...)` of the project's model class: building it fetches too, its vision tower)
                    also = f" (and building {head} downloads: {_listed(downloading_helpers[head])})" if head in downloading_helpers else ""
                    add("download-on-every-rank", call, f"{what} runs in every rank at once{also}: they race to write the same files",
                        "Download once before training: `if local_rank == 0: <download>` then dist.barrier(), and construct "
                        "with download=False in every rank (or download ahead of the run).", downloading_helpers.get(head, ""))
                    said.setdefault(refetch, findings[-1])
                    said.setdefault(hub, findings[-1])
            elif cached and on(download) and refetch in said:  # (the same dataset's files again, in every rank: one mistake)
                said[refetch].related.append(f"{here}:{call.lineno}")
                said[refetch].title += f" (and again at line {call.lineno}, the same files)"
            is_log = short in OUTPUT_LOG_METHODS and "." in func and any(
                w in func.split(".")[0].lower() for w in ("log", "logger", "logging"))
            # A message that names its rank, or goes to stderr, is meant to come from every rank.
            per_rank_message = (short == "print" or is_log) and (
                any(_mentions_rank(a) for a in call.args)
                or (_kw(call, "file") is not None and _dotted(_kw(call, "file").value) == "sys.stderr")
            )
            if (short == "print" and func == "print" or is_log) and not per_rank_message and not silenced:
                add(
                    "print-on-every-rank", call,
                    f"{'print' if short == 'print' else 'logging'} runs on every rank: duplicated output",
                    "Guard it with `if rank == 0:` (rank = dist.get_rank()), or use one helper that decides which rank speaks.",
                )
            # (A SummaryWriter per rank is no shared file: each process names its own event file.)
            if func == "torch.save":
                target = call.args[1] if func == "torch.save" and len(call.args) > 1 else (
                    _kw(call, "f").value if func == "torch.save" and _kw(call, "f") else (call.args[0] if call.args else None))
                in_buffer = in_private_file(target, scan.buffers)  # io.BytesIO(), a temporary file: no other rank's
                per_rank = target is not None and any(_mentions_rank_value(named_path(call, n)) for n in ast.walk(target)
                                                      if isinstance(n, ast.Name))
                if (target is None or not _mentions_rank_value(target)) and not per_rank and not in_buffer \
                        and not never_run(call):
                    kind = "torch.save"
                    fix = ("Save from one rank: `if rank == 0: torch.save(...)` then dist.barrier() before anyone reads it "
                           "(or put the rank in the file name when each rank saves its own shard).")
                    # In a save helper of this file (save_checkpoint), the mistake is where it is
                    # called on every rank: say so there. In any other function (a whole train()),
                    # the save itself is what to guard: say so at the save.
                    inside = scan.enclosing.get(id(call), ())
                    helper = inside[-1] if inside and _SAVE_HELPER.search(inside[-1]) else None
                    # Its call sites: as a function or a method of this file (`trainer.save_checkpoint(...)`
                    # on an object of a class defined here). All of them under a rank check: nothing to say.
                    method = helper is not None and any(m == helper for _, m in scan.own_methods)
                    every = [(c, g2) for c, f2, g2 in calls if helper and (
                        _calls_function(f2, helper) or (method and f2.rpartition(".")[2] == helper and "." in f2))]
                    sites = [c for c, g2 in every if not g2 and not gives_own_file(scan, c, helper, call, target)]
                    for site in sites or ([] if every else [call]):
                        where = f"{_name_of(_dotted(site.func))}() saves with {kind} (line {call.lineno})" if site is not call else kind
                        add("save-on-every-rank", site, f"{where} runs on every rank: they write the same file at once", fix,
                            f"{here}:{call.lineno}" if site is not call else "")
            # `model.save_pretrained(out)` / a dataset's save_to_disk(path) on every rank write the same files (Accelerate's form passes
            # is_main_process=, which decides); `model.push_to_hub(repo)`, the first of a block's pushes, uploads them (a Trainer's: its main process).
            receiver = _dotted(call.func.value).lower() if isinstance(call.func, ast.Attribute) else ""
            pushes = short == "push_to_hub" and receiver != "self" and "trainer" not in receiver and not pushed & set(scan.blocks_of.get(id(call), ()))
            if (short in ("save_pretrained", "save_to_disk") or pushes) and isinstance(call.func, ast.Attribute) and _kw(call, "is_main_process") is None \
                    and (not call.args or not _mentions_rank_value(call.args[0])):
                pushed.update(scan.blocks_of.get(id(call), ())[-1:] if pushes else ())
                add("save-on-every-rank", call, f"{ast.unparse(call.func)[:80]}() runs on every rank: they {'push' if pushes else 'write'} the same files at once",
                    "Push from one rank: `if rank == 0: model.push_to_hub(...)`." if pushes else "Save from one rank: `if rank == 0: model.save_pretrained(...)` (with Accelerate: "
                    "save_pretrained(..., is_main_process=accelerator.is_main_process, save_function=accelerator.save)).")
            names_a_file = not saving_helpers.get(short, "").startswith("open(") or any(
                any(isinstance(n, ast.Constant) and isinstance(n.value, str) for n in ast.walk(a)) and not _mentions_rank_value(a)
                for a in path_given(call, saving_helpers[short]))
            if helper in saving_helpers and short not in scan.defined and ("save-on-every-rank", short) not in reported_helpers \
                    and names_a_file:
                if not saving_helpers[short].startswith("open("):
                    reported_helpers.add(("save-on-every-rank", short))  # a file-writing helper: once per file it is given
                add("save-on-every-rank", call, *followups.helper_writes_said(short, saving_helpers[short]), saving_helpers[short])
            if helper in downloading_helpers and short not in scan.defined and not goes_first \
                    and (not _is_download_call(call) or file_weights) \
                    and ("download-on-every-rank", _origin(downloading_helpers[short])) not in reported_helpers:
                reported_helpers.add(("download-on-every-rank", _origin(downloading_helpers[short])))
                add("download-on-every-rank", call,  # naming what it fetches (a tokenizer and six datasets)
                    f"{short}() downloads ({_listed(downloading_helpers[short])}) in every rank at once: "
                    "they race to write the same files",
                    "Let one rank download first: `if rank == 0: <download>` then dist.barrier() (or "
                    "accelerator.main_process_first()), or download ahead of the run.", downloading_helpers[short])
            # A file named in the script (a literal name, alone or joined to a directory) and not per
            # rank; a path held in a variable or a parameter is not judged (its rank may be in it).
            # A name given one such path in the same function counts as that path (`log = os.path.join(out,
            # "log.csv")` ... `open(log, "a")`); opening only to create or empty a file writes nothing.
            if func == "open" and len(call.args) >= 2 and isinstance(call.args[1], ast.Constant) \
                    and str(call.args[1].value)[:1] in ("a", "w") and id(call) not in scan.touch_only and not never_run(call):
                written = named_path(call, call.args[0])
                inside = scan.enclosing.get(id(call)) or ("",)
                if isinstance(written, ast.Name) and written.id in scan.params.get(inside[-1], ()) and not never_run(call):
                    param_writes.append((inside[-1], written.id, call))  # judged where it is called, by the path given
                elif _path_root(written) in scan.params.get(inside[-1], ()) and inside[-1] in torch_saving_helpers:
                    pass  # (a file in the folder a save helper is given: part of the save reported where it is called)
                elif not _mentions_rank_value(written) and any(isinstance(n, ast.Constant) and isinstance(n.value, str) for n in ast.walk(written)) \
                        and (key := ("open", inside, ast.unparse(written))) not in reported_helpers:  # (emptied, then appended to: one file)
                    reported_helpers.add(key)
                    what = repr(written.value) if isinstance(written, ast.Constant) else ast.unparse(written)[:60]
                    add("save-on-every-rank", call, f"every rank writes {what} at once: lines interleave or the file is cut",
                        "Write from one rank (`if rank == 0:`), or put the rank in the file name.")
            # A file written (savefig, save_image, write_text): not in a save helper (its calls are the finding), not its caller's path
            target, inside = _written_file(call, func), scan.enclosing.get(id(call)) or ("",)
            if isinstance(target, ast.Name) and target.id in scan.params.get(inside[-1], ()) and not never_run(call):
                param_writes.append((inside[-1], target.id, call))  # `def plot(vals, save_path): plt.savefig(save_path)`
            if target is not None and not never_run(call) and not (_SAVE_HELPER.search(inside[-1]) and short != "write_text") \
                    and _path_root(target) not in scan.params.get(inside[-1], ()):
                written = named_path(call, target)
                # (a config dumped or copied into the run's folder, `cfg.dump(osp.join(cfg.work_dir, osp.basename(args.config)))`:
                # the same file for every rank, whatever it is called, unless the rank is in it)
                if (written is not target or short not in ("write_text", "write_bytes")) and not _mentions_rank_value(written) \
                        and (short == "dump" or any(isinstance(n, ast.Constant) and isinstance(n.value, str) or isinstance(n, ast.Call)
                                                    and _name_of(_dotted(n.func)) == "basename" for n in ast.walk(written))):
                    add("save-on-every-rank", call, f"every rank writes {ast.unparse(written)[:60]} at once: the file is cut",
                        "Write from one rank (`if rank == 0:`), or put the rank in the file name.")
            if short == "tqdm" and _kw(call, "disable") is None:
                add("tqdm-on-every-rank", call, "a tqdm bar on every rank: N bars in one terminal",
                    "tqdm(..., disable=rank != 0)")
        if short == "DataLoader" and uses_cuda and not any(k.arg is None for k in call.keywords):
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

    constants = scan.constants
    followups.report_param_writes(param_writes, scan, calls, add, named_path, never_run, here)
    # A project module whose own top-level code fetches (`train_dataset = MNIST(root, download=True)`
    # in utils.py) does so as the script imports it: in every rank at once.
    for node, sites in followups.import_time_fetches(modules, scan.imports) if distributed else ():
        add("download-on-every-rank", node, f"importing it runs the downloads of the module's top-level code in every rank at once "
            f"({_listed(sites)}): they race to write the same files",
            "Move the download into a function the script calls on one rank first (`if rank == 0:` then "
            "dist.barrier()), or download ahead of the run.", sites)
    fallbacks = guards.only_called(scan, lambda call, guarded: id(call) in scan.fallback_calls)  # (set-ups for a run nobody launched)
    for assign, _guarded in scan.assigns:
        if id(assign) in scan.env_fallback or scan.assigned_in.get(id(assign)) in fallbacks:
            continue  # `if "MASTER_PORT" not in os.environ:` a default where no launcher set it
        for target in assign.targets:
            name = _dotted(target).lower()
            if re.search(r"dist_url|init_method|master_port", name):
                literal = assign.value.value if isinstance(assign.value, ast.Constant) else (
                    "".join(v.value for v in assign.value.values if isinstance(v, ast.Constant))
                    if isinstance(assign.value, ast.JoinedStr) else None)
                if isinstance(literal, str) and re.search(r"tcp://[^\s]*:\d{3,5}$", literal):
                    add("hard-coded-rendezvous", assign, f"{_dotted(target)} gets a fixed port ({literal.rsplit(':', 1)[-1]}): two jobs on one machine collide",
                        "Take the port from the environment (MASTER_PORT set by the launcher) or pick a free one.")
                elif isinstance(literal, str) and (found := rendezvous.tcp_port_setting(assign.value, modules, calls, text, _dotted(target))):
                    add("hard-coded-rendezvous", assign, *found)
            if isinstance(target, ast.Subscript) and _dotted(target.value) == "os.environ":
                key = target.slice
                bare = _unwrapped(assign.value)  # (`str(2345)`: 2345; or a constant of the project's module it imports: `from config.setting import MASTER_PORT`)
                value = bare.value if isinstance(bare, ast.Constant) else (constants.get(bare.id) if isinstance(bare, ast.Name) else None)
                value, where = (value, "") if value is not None or not isinstance(bare, ast.Name) \
                    or bare.id not in project_names else rendezvous._module_constants(modules).get(bare.id, (None, ""))
                # The port is what collides; a fixed address comes with it and is one mistake, not two.
                if isinstance(key, ast.Constant) and key.value == "MASTER_PORT" and value is not None:
                    add(
                        "hard-coded-rendezvous", assign,
                        f"{key.value} is hard-coded to {value!r}{' at ' + where if where else ''}: a second job fails with "
                        "'Address already in use'",
                        "Let the launcher set MASTER_ADDR/MASTER_PORT (`gpurig launch` picks a free port); remove the assignment.",
                        where)
                elif isinstance(key, ast.Constant) and key.value == "MASTER_PORT" and _setting_name(assign.value):
                    setting = _setting_name(assign.value)  # `= hps.train.port`, `= str(config["port"])`
                    ports = {**rendezvous.port_settings(modules, configs, assign.value, rendezvous.script_options(calls)), **rendezvous.own_ports(calls, text, here)}
                    if setting in ports:
                        add("hard-coded-rendezvous", assign,
                            f"MASTER_PORT comes from the {setting} setting, fixed to {ports[setting]}: "
                            "a second job fails with 'Address already in use'",
                            "Let the launcher set MASTER_PORT (`gpurig launch` picks a free port), or leave the setting empty by default.")

    # MASTER_PORT from a parameter given a fixed port, or left at a fixed default (helpers: report_helpers)
    for assign, function, param, index, default in scan.port_params:
        fixed = rendezvous.fixed_port_sites(function, param, index, default, calls)
        if fixed is not None:
            add("hard-coded-rendezvous", assign, f"MASTER_PORT comes from {function}()'s {param}, fixed to {fixed[1]}: "
                "two jobs on one machine collide", "Take the port from the environment (MASTER_PORT set by the launcher) "
                "or pick a free one; drop the fixed port.")
    rendezvous.report_helpers(modules, configs, text, names, calls, scan.defined, add, scan.settings, here)

    # DistributedSampler whose epoch is never set: the same shuffle every epoch. A sampler that does not shuffle needs
    # none; a set_epoch under any name (loader.sampler.set_epoch, a helper given the sampler) counts. A script that
    # iterates its loader once (no loop in a loop, no 'epoch' anywhere, no endless iterator) has no next epoch.
    epochs = scan.nested_loop or "epoch" in text.lower() or any(_ENDLESS.fullmatch(n) for n in scan.short_names)
    # A sampler a helper of this file or the project builds (`data_sampler(ds, shuffle=True)`): at the call asking it to shuffle.
    module_samplers = _sampler_functions(modules) if not set_epoch_anywhere else {}
    # (Or none of its own, where the project's helper hands the sampler's loader to an endless iterator.)
    endless = set() if epochs or not module_samplers else followups.endless_samplers(modules)
    if not set_epoch_anywhere and (epochs or endless):
        for call, func, _ in calls:
            short = _name_of(func)
            if not epochs and short not in endless:
                continue
            # (A helper of this file that always shuffles is reported at its own DistributedSampler.)
            how, where = (scan.sampler_functions[short][0] or "no", f"{here}:{scan.sampler_functions[short][1]}") \
                if short in scan.sampler_functions and _calls_function(func, short) \
                else module_samplers.get(short, ("no", "")) if short not in scan.defined else ("no", "")
            if how != "no" and _shuffles_at(call, how) and ("sampler-without-set-epoch", where or short) not in reported_helpers:
                reported_helpers.add(("sampler-without-set-epoch", where or short))  # one sampler, one finding
                add("sampler-without-set-epoch", call, f"{short}() builds a shuffling DistributedSampler{' at ' + where if where else ''} "
                    "and nothing calls set_epoch(epoch): every epoch sees the same order",
                    "Call sampler.set_epoch(epoch) at the start of each epoch, before iterating the DataLoader.")
            if short == "DistributedSampler":
                shuffle = _kw(call, "shuffle")
                if shuffle is not None and not _is_const(shuffle.value, True):
                    continue
                # A sampler over evaluation data (`DistributedSampler(val_dataset)`, `(datasets["val"])`):
                # its order does not matter.
                data = call.args[0] if call.args else (_kw(call, "dataset").value if _kw(call, "dataset") else None)
                if isinstance(data, ast.Subscript) and isinstance(data.slice, ast.Constant) and isinstance(data.slice.value, str):
                    data = ast.Attribute(value=data.value, attr=data.slice.value)
                if data is not None and _EVAL_DATA.search(_dotted(data) or ""):
                    continue
                add("sampler-without-set-epoch", call, "DistributedSampler without set_epoch(epoch) in the loop: every epoch sees the same order",
                    "Call sampler.set_epoch(epoch) at the start of each epoch, before iterating the DataLoader.")

    followups.report_fixed_epochs(scan, calls, modules, add, reported_helpers)

    followups.report_group_left_open(scan, calls, names, modules, module_calls, text, destroys_in_modules, started, findings, add)

    findings.sort(key=lambda f: (f.line, f.id))
    unique: dict[tuple[str, int], LintFinding] = {}
    for f in findings:  # one finding per rule and line, however many ways it was reached
        unique.setdefault((f.id, f.line), f)
    return fold_alternatives(fold_uses(list(unique.values()), here), scan.chains, here)
