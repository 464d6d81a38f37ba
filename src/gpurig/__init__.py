"""gpurig: make the GPUs of one machine train together, correctly and fast.

From Python: `gpurig.doctor()`, `gpurig.verify()`, `gpurig.check()` and `gpurig.fit(...)` (see
`gpurig.api`); they are loaded on first use, so `import gpurig` costs nothing.
"""

__version__ = "0.1.0"
__all__ = ["check", "doctor", "fit", "verify"]


def __getattr__(name: str):
    if name in __all__:
        from gpurig import api  # the package's face: the one import that points up the layers

        return getattr(api, name)
    raise AttributeError(f"module 'gpurig' has no attribute {name!r}")


def __dir__() -> list[str]:
    return [*__all__, "__version__"]
