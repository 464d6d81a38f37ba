"""gpurig: make the GPUs of one machine train together, correctly and fast."""

__version__ = "0.1.0"
