"""TrainConfig: strict loading, typed --set overrides, arithmetic checks, presets (pure logic)."""

from __future__ import annotations

import os
import re

import pytest
import torch
import torch._dynamo  # imported once here: its import sets TORCHINDUCTOR_CACHE_DIR

from gpurig.errors import BadInput
from gpurig.train.config import (
    CANNOT_HONOUR,
    PRESETS,
    TrainConfig,
    check_data_path,
    describe_fields,
    from_dict,
    load_config,
    parse_override,
    preset,
    to_toml,
    validate,
)


def test_demo_preset_is_digits_mlp():
    cfg = preset("demo")
    assert cfg.data.dataset == "digits" and cfg.model.name == "mlp" and cfg.framework == "torch"


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_loads_and_round_trips_through_toml(name, tmp_path):
    cfg = preset(name)
    path = tmp_path / "run.toml"
    path.write_text(to_toml(cfg))
    assert load_config(path=path) == cfg


def test_file_then_overrides_apply_in_order(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('seed = 7\n[optim]\nname = "sgd"\nlr = 0.5\n[data]\nbatch_size = 128\n')
    cfg = load_config(path=path, overrides=["optim.lr=0.1", "data.workers=6", "train.precision=fp32",
                                            "checkpoint.enabled=false", "data.workers=auto"])
    assert (cfg.seed, cfg.optim.lr, cfg.data.batch_size) == (7, 0.1, 128)
    assert cfg.train.precision == "fp32" and cfg.checkpoint.enabled is False and cfg.data.workers == "auto"


def test_override_types_follow_the_field():
    assert parse_override("optim.lr=1e-3") == ("optim.lr", 0.001)
    assert parse_override("data.batch_size=256") == ("data.batch_size", 256)
    assert parse_override("data.path=123") == ("data.path", "123")  # a string field keeps the text
    assert parse_override("eval.enabled=off") == ("eval.enabled", False)


@pytest.mark.parametrize(
    "override, key",
    [
        ("optim.lrr=0.1", "optim.lrr"),
        ("nonsense=1", "nonsense"),
        ("optim.lr=fast", "optim.lr"),
        ("data.batch_size=1.5", "data.batch_size"),
        ("train.precision=fp8", "train.precision"),
        ("data.batch_size=0", "data.batch_size"),
        ("data.workers=-2", "data.workers"),
        ("tf.loop=keras", "tf.loop"),
        ("train.compile_ddp=overlap", "train.compile_ddp"),
    ],
)
def test_bad_overrides_name_the_key(override, key):
    with pytest.raises(BadInput, match=key.replace(".", r"\.")):
        load_config(overrides=[override])


def test_bad_file_names_the_key(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[optim]\nlr = "high"\n')
    with pytest.raises(BadInput, match=r"optim\.lr: expected number"):
        load_config(path=path)
    path.write_text("[train]\nepoch = 3\n")
    with pytest.raises(BadInput, match=r"train\.epoch: unknown key"):
        load_config(path=path)
    path.write_text("[train\n")
    with pytest.raises(BadInput, match="not valid TOML"):
        load_config(path=path)


def test_global_batch_must_divide_and_sets_accumulation():
    cfg = load_config(overrides=["data.batch_size=32", "data.global_batch_size=100"])
    with pytest.raises(BadInput, match=r"data\.global_batch_size: 100 is not divisible by data\.batch_size 32 x 3 processes = 96"):
        validate(cfg, 3)
    cfg = load_config(overrides=["data.batch_size=32", "data.global_batch_size=256"])
    assert validate(cfg, 2).train.grad_accum == 4


def test_missing_data_path_names_the_key(tmp_path):
    with pytest.raises(BadInput, match=r"data\.path: dataset 'mnist' reads files"):
        check_data_path(load_config(overrides=["data.dataset=mnist"]))
    with pytest.raises(BadInput, match=r"data\.path: .*does not exist"):
        check_data_path(load_config(overrides=["data.dataset=cifar10", f"data.path={tmp_path / 'nope'}"]))


def test_model_and_data_must_fit():
    with pytest.raises(BadInput, match=r"model\.name"):
        from_dict({"model": {"name": "gpt"}, "data": {"dataset": "digits"}})


def test_tf_table_is_defined_and_strict():
    cfg = load_config(overrides=["framework=tf", "tf.loop=fit", "tf.cross_device_ops=hierarchical"])
    assert (cfg.framework, cfg.tf.loop, cfg.tf.cross_device_ops) == ("tf", "fit", "hierarchical")
    with pytest.raises(BadInput, match=r"tf\.strategy"):
        from_dict({"tf": {"strategy": "mirrored"}})


def _another_value(key: str):
    """A valid value of `key` other than its default (to set a key the framework cannot honour)."""
    row = next(r for r in describe_fields() if r["key"] == key)
    default = row["default"]
    if row.get("choices"):
        return next(c for c in row["choices"] if c != default)
    if isinstance(default, bool):
        return not default
    if isinstance(default, int) or "integer" in row["type"]:
        return default + 1 if isinstance(default, int) else 2
    return "host-a,host-b"


_REFUSED = [(fw, key) for fw, table in CANNOT_HONOUR.items() for key in table]


@pytest.mark.parametrize("framework, key", _REFUSED, ids=[f"{fw}:{k}" for fw, k in _REFUSED])
def test_every_setting_a_framework_cannot_honour_is_refused_naming_the_key(framework, key):
    refused, _ = CANNOT_HONOUR[framework][key]
    value = sorted(refused)[0] if refused else _another_value(key)
    text = str(value).lower() if isinstance(value, bool) else str(value)
    with pytest.raises(BadInput, match=rf"^{re.escape(key)}: .* is not available with framework={framework}"):
        load_config(overrides=[f"framework={framework}", f"{key}={text}"])
    # the same setting is honoured by the other framework (where the rest of the config allows it)
    other = "torch" if framework == "tf" else "tf"
    if key not in CANNOT_HONOUR[other] and key not in ("model.name", "data.dataset"):
        assert load_config(overrides=[f"framework={other}", f"{key}={text}"]).framework == other


def test_compile_on_with_tensorflow_exits_2_before_anything_starts(run_cli, tmp_path):
    proc = run_cli("train", "--framework", "tf", "--out", str(tmp_path / "r"), "--set", "train.compile=on",
                   timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "train.compile: 'on' is not available with framework=tf" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "r").exists()


def test_every_field_is_documented():
    rows = describe_fields()
    assert {r["key"] for r in rows} >= {"model.name", "data.path", "optim.lr", "train.precision", "tf.loop"}
    assert all(r["doc"] for r in rows), [r["key"] for r in rows if not r["doc"]]
    assert TrainConfig().to_dict()["train"]["strategy"] == "ddp"


R50_GRAD_BYTES = 25_557_032 * 4  # ResNet-50's fp32 gradients
GPT_GRAD_BYTES = 1_500_000_000 * 4  # a 1.5B-parameter decoder


@pytest.mark.parametrize("asked, grad_bytes, world, mode", [
    ("auto", R50_GRAD_BYTES, 2, "no_optimization"),  # small gradients: one graph, all-reduce after the backward
    ("auto", R50_GRAD_BYTES, 8, "no_optimization"),
    ("auto", GPT_GRAD_BYTES, 2, "ddp_optimizer"),  # large ones: split the graph to overlap the all-reduce
    ("no_optimization", GPT_GRAD_BYTES, 2, "no_optimization"),  # what the config asks for wins
    ("ddp_optimizer", R50_GRAD_BYTES, 2, "ddp_optimizer"),
])
def test_compile_ddp_sets_dynamos_mode_and_says_why(asked, grad_bytes, world, mode):
    from gpurig.train.torch.choices import apply_compile_ddp

    with torch._dynamo.config.patch(optimize_ddp=True, compiled_autograd=False):
        choice = apply_compile_ddp(load_config(overrides=[f"train.compile_ddp={asked}"]), grad_bytes, world)
        assert choice.value == mode and torch._dynamo.config.optimize_ddp == mode
    if asked == "auto":
        assert f"{grad_bytes / 1e6:,.0f} MB of gradients" in choice.reason
    else:
        assert "asked for in the config" in choice.reason


def test_only_batchnorm_statistics_tells_which_models_can_skip_the_per_forward_broadcast():
    import torchvision
    from torch import nn

    from gpurig.train.torch.choices import only_batchnorm_statistics

    assert only_batchnorm_statistics(torchvision.models.resnet18())
    assert only_batchnorm_statistics(nn.Linear(2, 2))  # no buffers at all

    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(2)
            self.register_buffer("seen", torch.zeros(()))  # used in training: must stay in step

    assert not only_batchnorm_statistics(Counter())


def test_compiled_autograd_backward_compiles_the_backward_and_gives_eager_gradients(monkeypatch):
    from torch import nn

    # inductor passes an address to the modules it loads through this variable; put it back after.
    var = "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR"
    monkeypatch.setenv(var, os.environ.get(var, ""))
    monkeypatch.delenv(var)

    from gpurig.train.torch.choices import compiled_autograd_backward

    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), torch.randn(5, 4)
    model(x).square().sum().backward()
    eager = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    torch._dynamo.utils.counters.clear()
    with compiled_autograd_backward():
        model(x).square().sum().backward()
    assert torch._dynamo.utils.counters["compiled_autograd"]["compiles"] >= 1
    for p, g in zip(model.parameters(), eager, strict=True):
        torch.testing.assert_close(p.grad, g)


@pytest.fixture
def one_rank_group(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("name", ["sgd", "adamw", "adam"])
def test_the_dtensor_probe_says_which_fused_optimizers_run_on_fsdp_parameters(name, one_rank_group):
    """FSDP's parameters are DTensors: the probe must agree with what a fused step on one does."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import distribute_tensor

    from gpurig.train.torch.choices import fused_runs_on_dtensor
    from gpurig.train.torch.optim import build_optimizer

    param = torch.nn.Parameter(distribute_tensor(torch.ones(4), init_device_mesh("cpu", (1,))))
    param.grad = distribute_tensor(torch.ones(4), param.device_mesh)
    opt = build_optimizer(load_config(overrides=[f"optim.name={name}"]), [param], fused=True)
    try:
        opt.step()
        ran = True
    except NotImplementedError as exc:
        assert "sharding strategy" in str(exc)
        ran = False
    assert fused_runs_on_dtensor(name) is ran
    if name == "adamw":
        assert ran  # registered since torch 2.4: the probe is not simply "never"


def test_fsdp_on_cuda_falls_back_to_foreach_where_the_fused_kernel_cannot_run():
    from gpurig.train.torch.choices import choose_fused, fused_runs_on_dtensor

    cuda = torch.device("cuda", 0)
    for name in ("sgd", "adamw"):
        cfg = load_config(overrides=[f"optim.name={name}", "train.strategy=fsdp"])
        choice = choose_fused(cfg, cuda, fsdp=True)
        assert choice.value is fused_runs_on_dtensor(name)
        if not choice.value:
            assert "foreach" in choice.reason and "FSDP" in choice.reason and name in choice.reason
        assert choose_fused(cfg, cuda, fsdp=False).value is True  # DDP keeps the fused kernel


def test_fused_on_with_fsdp_and_no_dtensor_kernel_exits_2_before_anything_starts(run_cli, tmp_path):
    from gpurig.train.torch.choices import fused_runs_on_dtensor

    if fused_runs_on_dtensor("sgd"):
        pytest.skip("this torch runs fused SGD on DTensor parameters")
    proc = run_cli("train", "--device", "cpu", "--out", str(tmp_path / "r"), "--set", "train.strategy=fsdp",
                   "--set", "optim.name=sgd", "--set", "optim.fused=on", timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "optim.fused" in proc.stderr and "optim.name=adamw" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("over, on, why", [
    ([], True, "long enough"),  # ResNet-50 on CUDA, a long run: compiled
    (["train.strategy=fsdp"], False, "FSDP"),  # eager: compiled FSDP was host-bound on the H200s
    (["train.strategy=fsdp", "train.compile=on"], True, "asked for"),
])
def test_compile_auto_leaves_fsdp_eager(over, on, why):
    from gpurig.train.torch.choices import choose_compile

    cfg = load_config(overrides=["model.name=resnet50", "data.dataset=synthetic-image", *over])
    choice = choose_compile(cfg, torch.device("cuda", 0), total_steps=10_000)
    assert choice.value is on and why in choice.reason


def test_fsdp_on_a_model_that_fits_one_gpu_points_to_ddp(monkeypatch):
    from torch import nn

    from gpurig.train.torch.choices import fsdp_fits_note

    cfg = load_config(overrides=["train.strategy=fsdp", "optim.name=adamw"])
    model = nn.Linear(1024, 1024)  # 4 MiB of fp32 weights: x4 with gradients and AdamW's two states
    props = type("Props", (), {"total_memory": 80 * 2**30})
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: props)
    note = fsdp_fits_note(cfg, model, torch.device("cuda", 0))
    assert "DDP is faster" in note and "train.strategy=ddp" in note and "(16 MiB)" in note
    props.total_memory = 40 * 2**20  # a 40 MiB GPU: 16 MiB of state is over a quarter, sharding is the point
    assert fsdp_fits_note(cfg, model, torch.device("cuda", 0)) == ""
    assert fsdp_fits_note(cfg, model, torch.device("cpu")) == ""  # no device memory to compare with
