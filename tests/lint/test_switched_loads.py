"""A helper's checkpoint load under a switch that defaults to off, judged at each call: the
Time-Series-Library family's `def test(self, setting, test=0): if test: torch.load(...)`, called
as `exp.test(setting)` after training (no load there) and as `exp.test(setting, test=1)` on the
test-only path (a load without map_location on every rank)."""

from __future__ import annotations

import textwrap

import pytest

from gpurig.diagnose.lint import lint_file

EXP = """
import torch

class Exp:
    def __init__(self, args):
        self.args = args
    def test(self, setting, test=0, strict=False):
        if test:
            self.model.load_state_dict(torch.load(setting + "/checkpoint.pth"))
        return self.model
"""


@pytest.mark.parametrize("call, found", [("exp.test(setting)", []), ("exp.test(setting, test=0)", []),
                                         ("exp.test(setting, 0)", []), ("exp.test(setting, test=1)", [8]),
                                         ("exp.test(setting, 1)", [8]), ("exp.test(setting, *rest)", [8]),
                                         ("exp.test(setting, **options)", [8])])
def test_a_load_switched_off_by_default_runs_only_where_the_call_turns_it_on(tmp_path, call, found):
    (tmp_path / "exp.py").write_text(EXP)
    (tmp_path / "train.py").write_text(textwrap.dedent(f"""\
        import torch
        import torch.distributed as dist
        from exp import Exp
        dist.init_process_group("nccl")
        torch.cuda.set_device(0)
        exp = Exp(None)
        setting, rest, options = "run", [], {{}}
        {call}
        dist.destroy_process_group()
        """))
    assert [f.line for f in lint_file(str(tmp_path / "train.py"), select={"torch-load-without-map-location"})] == found
