"""An error nothing names, raised inside an installed library's own code: explain says which
package, where, and what to look for in its issues (the long tail of release bugs)."""

from __future__ import annotations

import json

from gpurig.diagnose.explain import explain_text
from gpurig.diagnose.loglines import raised_in

LIBRARY_TRACE = """Traceback (most recent call last):
  File "/home/u/project/train.py", line 88, in <module>
    trainer.train()
  File "/home/u/.venv/lib/python3.11/site-packages/peachtree/trainer.py", line 412, in train
    self._rebalance(step)
  File "/home/u/.venv/lib/python3.11/site-packages/peachtree/sched/balance.py", line 77, in _rebalance
    quota = self.quotas[step % len(self.quotas)]
            ~~~~~~~~~~~^^^^^^^^^^^^^^^^^^^^^^^^^
ZeroDivisionError: integer division or modulo by zero
"""


def test_the_package_the_file_and_the_message_are_named():
    where = raised_in(LIBRARY_TRACE)
    assert where == {"package": "peachtree", "pip": "peachtree", "file": "peachtree/sched/balance.py", "line": 77,
                     "function": "_rebalance", "message": "ZeroDivisionError: integer division or modulo by zero"}
    result = explain_text(LIBRARY_TRACE, index=None)
    assert result.matches == []
    step = result.next_steps[0]
    assert "inside peachtree (peachtree/sched/balance.py, line 77, in _rebalance)" in step
    assert '"ZeroDivisionError: integer division or modulo by zero"' in step and "pip show peachtree" in step
    assert result.to_dict()["raised_in"]["package"] == "peachtree"


def test_rank_prefixes_and_windows_paths_are_read():
    text = ('[rank1]:   File "C:\\Users\\u\\miniconda3\\envs\\sd\\Lib\\site-packages\\sklearn\\utils\\validation.py", '
            'line 1003, in check_array\n[rank1]:     raise ValueError(msg)\n[rank1]: ValueError: Found array with 0 sample(s)\n')
    where = raised_in(text)
    assert where is not None
    assert (where["package"], where["pip"], where["file"]) == ("sklearn", "scikit-learn", "sklearn/utils/validation.py")
    assert where["message"] == "ValueError: Found array with 0 sample(s)"


def test_the_users_code_the_framework_and_a_launcher_are_not_blamed():
    own = 'Traceback (most recent call last):\n  File "/home/u/train.py", line 3, in <module>\n    1 / 0\nZeroDivisionError: division by zero\n'
    framework = ('  File "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1688, in __getattr__\n'
                 "    raise AttributeError(\nAttributeError: 'DistributedDataParallel' object has no attribute 'generate'\n")
    launcher = ('  File "/usr/local/lib/python3.10/dist-packages/accelerate/commands/launch.py", line 1168, in launch_command\n'
                "    simple_launcher(args)\nsubprocess.CalledProcessError: Command '['/usr/bin/python', 'train.py']' "
                "returned non-zero exit status 1.\n")
    assert raised_in(own) is None and raised_in(framework) is None and raised_in(launcher) is None
    assert all(not s.startswith("The error is raised inside") for s in explain_text(own, index=None).next_steps)


def test_a_known_error_gets_its_answer_not_the_library_step():
    text = LIBRARY_TRACE.replace("ZeroDivisionError: integer division or modulo by zero",
                                 "RuntimeError: CUDA error: invalid device ordinal")
    result = explain_text(text, index=None)
    assert result.matches and result.matches[0].id == "invalid-device-ordinal"
    assert "raised_in" not in result.to_dict()


def test_the_cli_prints_the_step_and_json_carries_where(run_cli, tmp_path):
    log = tmp_path / "run.log"
    log.write_text(LIBRARY_TRACE)
    out = run_cli("explain", str(log))
    assert out.returncode == 0
    assert "No known error matched" in out.stdout and "inside peachtree" in out.stdout
    doc = json.loads(run_cli("explain", "--json", str(log)).stdout)
    assert doc["matches"] == [] and doc["raised_in"]["line"] == 77


def test_the_standard_library_under_a_library_frame_is_looked_through():
    # torchvision asked for weights it does not have: enum's __getitem__ raises, for torchvision.
    text = """Traceback (most recent call last):
  File "<string>", line 3, in <module>
  File "/env/lib/python3.11/site-packages/torchvision/models/resnet.py", line 761, in resnet50
    weights = ResNet50_Weights.verify(weights)
  File "/env/lib/python3.11/site-packages/torchvision/models/_api.py", line 83, in verify
    obj = cls[obj.replace(cls.__name__ + ".", "")]
          ~~~^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/enum.py", line 790, in __getitem__
    return cls._member_map_[name]
           ~~~~~~~~~~~~~~~~^^^^^^
KeyError: 'IMAGENET1K_V3'
"""
    where = raised_in(text)
    assert where is not None
    assert (where["file"], where["line"], where["message"]) == ("torchvision/models/_api.py", 83, "KeyError: 'IMAGENET1K_V3'")
    # a project folder called lib is the user's code, not the standard library
    own = text.replace("/root/.pyenv/versions/3.11.7/lib/python3.11/enum.py", "/home/u/proj/lib/registry.py")
    assert raised_in(own) is None
