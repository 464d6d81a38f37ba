"""What the compact scan of a big script keeps (`_stream_scan`): only the calls some rule judges, and
the names the script takes from its own project's modules, whose calls are judged against what those
modules do."""

from __future__ import annotations

import ast

from gpurig.diagnose.lint_modules import LIBRARY_FETCH_NAMES, _project_import
from gpurig.diagnose.lint_nodes import _RULE_CALLS, NAMED_FETCHES, _dotted, _leaf_name, _pretrained_weights

_JUDGED_CALLS = _RULE_CALLS | LIBRARY_FETCH_NAMES  # (and the library calls that download)


class _CompactScan:
    """The scanner's part that decides what a compact scan keeps (its attributes are the scanner's)."""

    def _judged(self, node: ast.Call, func: str, short: str) -> bool:
        """Whether some rule looks at this call (compact mode keeps only those)."""
        return (short in _JUDGED_CALLS and short not in self.unjudged or short in self.keep_names or short in self.aliases or short in self.name_aliases
                or (self.keep_plain and isinstance(node.func, ast.Name))
                # a method of an object the project's own classes may have built (`runner.sample()`)
                or (bool(self.local_roots) and isinstance(node.func, ast.Attribute))
                or short in self.local_names or func.split(".")[0] in self.local_roots
                or bool(node.keywords) and (any(k.arg in ("download", "pretrained", "stream") for k in node.keywords)  # (requests.get(url, stream=True))
                                            or _pretrained_weights(node) is not None)
                or func in NAMED_FETCHES  # (gdown.download, wget.download: by what they are)
                or isinstance(node.func, ast.Call) and _dotted(node.func.func) == "getattr"  # (a function picked by its name)
                or bool(node.args) and any("pretrained" in (_leaf_name(a) or "").lower() for a in node.args))

    def _note_local(self, node: ast.Import | ast.ImportFrom) -> None:
        """Compact mode: remember the names the script takes from its own project's modules (their
        calls are judged against what those modules do)."""
        if self.script_dir is not None:
            names, roots, star = _project_import(node, self.script_dir, self.import_tops)
            self.local_names |= names
            self.local_roots |= roots
            self.keep_plain = self.keep_plain or star  # `from utils import *`: any plain call may be one of its functions
