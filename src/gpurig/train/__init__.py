"""Training: the plan, the shared data readers and summary, and two backends (`torch/`, `tf/`).
`gpurig.train.fit` is `gpurig train --model/--data` from Python (loaded on first use)."""


def __getattr__(name: str):
    if name == "fit":
        from gpurig.train.fitting import fit

        return fit
    raise AttributeError(f"module 'gpurig.train' has no attribute {name!r}")
