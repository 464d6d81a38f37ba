"""The networks `gpurig train` builds: MLP, small CNN, torchvision ResNet-18/50, a GPT-style decoder.

`build_model(cfg, in_shape, num_classes)` returns the module; `flops_per_sample()` gives the
training FLOPs (forward + backward) used for model FLOPs utilisation.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from gpurig.train.config import TrainConfig

CONV_MODELS = ("cnn", "resnet18", "resnet50")


class MLP(nn.Module):
    """The common tutorial MNIST model: flatten, hidden Linear + ReLU layers, a Linear classifier."""

    def __init__(self, in_features: int, hidden: int, depth: int, num_classes: int, dropout: float) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = in_features
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            if dropout:
                layers.append(nn.Dropout(dropout))
            width = hidden
        layers.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class SmallCNN(nn.Module):
    """Two conv blocks (conv-BN-ReLU x2, max-pool), global average pool, a Linear classifier."""

    def __init__(self, channels: int, width: int, num_classes: int) -> None:
        super().__init__()

        def block(cin: int, cout: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                nn.MaxPool2d(2, ceil_mode=True),
            )

        self.features = nn.Sequential(block(channels, width), block(width, width * 2))
        self.head = nn.Linear(width * 2, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: causal self-attention (SDPA, flash where available) + MLP."""

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim, bias=False)
        self.fc_out = nn.Linear(4 * dim, dim, bias=False)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    """A GPT-2-style decoder (learned positions, tied input/output embeddings)."""

    def __init__(self, vocab: int, seq_len: int, dim: int, layers: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight  # weight tying, as GPT-2
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith(("proj.weight", "fc_out.weight")):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def build_model(cfg: TrainConfig, in_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """The network named by model.name for inputs of `in_shape` (one sample, without the batch)."""
    m = cfg.model
    if m.name == "mlp":
        return MLP(int(math.prod(in_shape)), m.hidden, m.depth, num_classes, m.dropout)
    if m.name == "cnn":
        return SmallCNN(in_shape[0], m.width, num_classes)
    if m.name in ("resnet18", "resnet50"):
        import torchvision

        net = getattr(torchvision.models, m.name)(weights=None, num_classes=num_classes)
        if in_shape[0] != 3:
            net.conv1 = nn.Conv2d(in_shape[0], 64, kernel_size=7, stride=2, padding=3, bias=False)
        return net
    if m.name == "gpt":
        return GPT(num_classes, cfg.data.seq_len, m.dim, m.layers, m.heads, m.dropout)
    raise ValueError(m.name)


def shard_units(model: nn.Module) -> list[nn.Module]:
    """The sub-modules FSDP shards one by one (each gathers its parameters just before use)."""
    if isinstance(model, GPT):
        return list(model.blocks)
    if hasattr(model, "layer1"):  # torchvision ResNet: every residual block
        return [blk for name in ("layer1", "layer2", "layer3", "layer4") for blk in getattr(model, name)]
    if isinstance(model, SmallCNN):
        return list(model.features)
    return []


def count_params(model: nn.Module) -> int:
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


def flops_per_sample(model: nn.Module, cfg: TrainConfig, in_shape: tuple[int, ...]) -> float | None:
    """Training FLOPs per sample (forward + backward = 3x forward).

    GPT: 6 x parameters (without the position embedding) + 12 x layers x dim x seq_len per token,
    times seq_len tokens (PaLM appendix B). Conv nets: counted by a forward pass on the meta device
    with FlopCounterMode. None when it cannot be counted.
    """
    if isinstance(model, GPT):
        n = count_params(model) - model.pos.weight.numel()
        t = cfg.data.seq_len
        per_token = 6 * n + 12 * cfg.model.layers * cfg.model.dim * t
        return float(per_token * t)
    if isinstance(model, MLP):
        # 2 FLOPs per weight of every Linear layer, forward; counted directly (the FLOP counter's
        # import alone costs seconds of start-up).
        return float(3 * sum(2 * m.in_features * m.out_features for m in model.modules() if isinstance(m, nn.Linear)))
    try:
        from torch.utils.flop_counter import FlopCounterMode

        probe = build_model(cfg, in_shape, _out_features(model))
        probe = probe.to("meta").eval()  # eval: BatchNorm accepts a 1x1 feature map of one sample
        x = torch.empty((1, *in_shape), device="meta")
        with FlopCounterMode(display=False) as fc:
            probe(x)
        return float(fc.get_total_flops()) * 3
    except Exception:  # a counter that cannot trace the model only loses the MFU figure
        return None


def _out_features(model: nn.Module) -> int:
    last = [m for m in model.modules() if isinstance(m, nn.Linear)]
    return last[-1].out_features if last else 10
