"""What `gpurig lint`'s scanner learns from the script's assignments: flags set from a rank check,
names given the global or local rank, a device, a path or a setting, and objects bound to a null
object off rank zero. A mixin of lint_scan._Scanner, whose state it reads and fills."""

from __future__ import annotations

import ast
import re

from gpurig.diagnose.lint_devices import _gpu_key, _names_a_gpu, global_rank_sum
from gpurig.diagnose.lint_guards import _all_but_one, _holds_global_rank, _mentions_rank, note_one_rank_value
from gpurig.diagnose.lint_nodes import (
    _LAUNCHER_KEYS,
    BUILT,
    _dotted,
    _local_path,
    _name_of,
    _path_like,
)
from gpurig.diagnose.lint_paths import private_names
from gpurig.diagnose.lint_rendezvous import _port_param

# A null object: a class whose methods do nothing (`NoOp()`, `DummyWriter()`, `NullLogger()`).
_NULL_OBJECT = re.compile(r"(?:NoOp|Noop|Null|Dummy)\w*")
_RENDEZVOUS_TARGET = re.compile(r"dist_url|init_method|master_port")
_RENDEZVOUS_KEYS = frozenset({"MASTER_ADDR", "MASTER_PORT"})
_FLAG_VALUES = (ast.Compare, ast.BoolOp, ast.UnaryOp, ast.Name, ast.Attribute, ast.IfExp)
_SETTING = re.compile(r"device|gpu|pretrained|download|model|path|ckpt|checkpoint|tokenizer|weight|init_method|dist_?url", re.IGNORECASE)
_VARIES = object()  # a setting assigned something other than a constant


class _AssignScan:
    """The assignment visitors of the scanner (see lint_scan._Scanner for the state they fill)."""

    def _setting(self, target: ast.AST, value: ast.AST | None) -> None:
        """Only settings that can name a device count (`devices`, `gpus`, `num_gpus`), switch a
        download (`pretrained = False`) or name where a model is (`model_name = "/data/llama"`)."""
        leaf = target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) else None
        if leaf is not None and _SETTING.search(leaf):
            built = value
            while isinstance(built, ast.Call) and isinstance(built.func, ast.Attribute) and built.func.attr in ("to", "cuda", "eval"):
                built = built.func.value  # (`AutoModel.from_pretrained(name).to(device)`)
            built = isinstance(built, ast.Call) and _name_of(_dotted(built.func)) == "from_pretrained"
            # (a name put under a folder of this machine, `'../pretrained_models/' + args.name`: that folder)
            head = value.values[0] if isinstance(value, ast.JoinedStr) and value.values else value
            while isinstance(head, ast.BinOp) and isinstance(head.op, ast.Add):
                head = head.left
            under = head.value if head is not value and isinstance(head, ast.Constant) and _local_path(head.value) else None
            self.settings.setdefault(leaf, set()).add(value.value if isinstance(value, ast.Constant) else under or (BUILT if built else _VARIES))

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._setting(node.target, node.value)
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        names = [_dotted(t) for t in node.targets]  # each target's dotted name, once
        first = names[0] if len(names) == 1 else ""
        # (a big file keeps only those the rules read: rendezvous settings, and `rank, device = setup()`)
        if not self.compact or any(_RENDEZVOUS_TARGET.search(n.lower()) or (
                isinstance(t, ast.Subscript) and _dotted(t.value) == "os.environ") for t, n in zip(node.targets, names, strict=True)) \
                or isinstance(node.targets[0], ast.Tuple) and isinstance(node.value, ast.Call) \
                or isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Call) and _name_of(_dotted(node.value.func))[:1].isupper():
            self.assigns.append((node, self._guard > 0))  # (and `exp = Exp(args)`: which class a method called on it is of)
        # (`ddp = int(os.environ.get("RANK", -1)) != -1` is true on every rank of a run: not a pick.)
        # (Only a test or a name can hold one: `y = x * 3 + 1` is no flag, and is not walked for one.)
        if len(node.targets) == 1 and isinstance(node.value, _FLAG_VALUES) and first and _mentions_rank(node.value) and not _all_but_one(node.value):
            self.flags.add(first)
        note_one_rank_value(self, node, first, self._guard > 0)
        if first and isinstance(node.value, ast.Call):
            if _NULL_OBJECT.fullmatch(_name_of(_dotted(node.value.func))):
                self.null_bound.add(first)
            elif self._guard > 0:
                self.guard_bound.add(first)
        if self.compact and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Call) \
                and _name_of(_dotted(node.value.func)) in self.local_names:
            self.local_names.add(first)  # (`logging = create_exp_dir(...)`: what the project's function returned, judged by it)
        if first and isinstance(node.value, ast.Call) and _name_of(_dotted(node.value.func)) in self.multi_device_classes:
            self.multi_device_models.add(first)
        if any(n in ("builtins.print", "__builtin__.print", "__builtins__.print") for n in names):
            self.silenced = True
        for t in node.targets:
            if isinstance(t, ast.Subscript) and _dotted(t.value).endswith("environ") and isinstance(t.slice, ast.Constant) \
                    and any(t.slice.value in keys or t.slice.value in _RENDEZVOUS_KEYS and keys & _LAUNCHER_KEYS
                            for keys in self._env_absent):
                self.env_fallback.add(id(node))  # (also `if "WORLD_SIZE" not in os.environ:`: a run nobody launched)
            elif isinstance(t, ast.Subscript) and _dotted(t.value).endswith("environ") and isinstance(t.slice, ast.Constant) \
                    and t.slice.value == "MASTER_PORT" and self._functions:
                self.assigned_in[id(node)] = self._functions[-1]
                found = _port_param(node.value, self._defaults[-1])
                if found is not None:
                    self.port_params.append((node, self._functions[-1], *found))
        value = node.value
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and isinstance(value, ast.Name):
            self.name_aliases.setdefault(node.targets[0].id, set()).add(value.id)  # `Exp = Exp_Long_Term_Forecast`
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and _path_like(value):
            key = (self._functions[-1] if self._functions else "", node.targets[0].id)
            self.path_vars[key] = None if key in self.path_vars else value
        elif len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute) and (_path_like(value) or isinstance(value, ast.Name)):
            attr = _dotted(node.targets[0])  # `args.output_train_file = os.path.join(args.output_dir, "train_results.txt")`
            self.path_attrs[attr] = None if attr in self.path_attrs else (value, self._functions[-1] if self._functions else "")
        if len(node.targets) == 1 and isinstance(value, (ast.Call, ast.JoinedStr, ast.BinOp)):
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in ("to", "cuda") \
                    and value.args and first:
                self.moves.append((first, value.args[0], tuple(self._blocks), node.lineno))
            elif first and _names_a_gpu(value) and not any(isinstance(n, ast.Constant) and str(n.value).startswith(
                    ("cpu", "npu", "xpu", "mps")) for n in ast.walk(value)):  # (not the other branch's CPU or NPU)
                self.device_vars[first] = value
                self.device_inside[first] = tuple(self._functions)
        if isinstance(value, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "" or _gpu_key(k) for k in value.keys):
            self.device_maps.append((value, tuple(self._functions)))  # {"": device}: a device_map; {"cuda:0": ...}: a map_location
        for t in node.targets:
            self._setting(t, value)
            self.buffers.update(private_names(t, node.value))
        if len(node.targets) == 1:
            name = first
            if isinstance(node.value, ast.Constant) and isinstance(node.targets[0], ast.Name):
                self.constants[name] = node.value.value
            elif name and _holds_global_rank(node.value):
                self.rank_names.add(name)
            elif name and _holds_global_rank(node.value, "LOCAL_RANK"):
                self.local_rank_names.add(name)
            elif name and isinstance(node.value, (ast.Name, ast.Attribute)) and _dotted(node.value) in self.rank_names:
                self.rank_names.add(name)  # `args.device_ids = device_ids`, once device_ids holds the global rank
            elif name and "rank" in name.lower() and "local" not in name.lower() and global_rank_sum(node.value):
                self.rank_names.add(name)
                self.summed_ranks.add(name)
        self.generic_visit(node)
