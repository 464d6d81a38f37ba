"""`gpurig burn`: burn-in and silent-data-corruption screening. `run.py` is the parent (NVML
watched, the verdict asked of `diagnose/burn.py`), `worker.py` runs on each GPU."""
