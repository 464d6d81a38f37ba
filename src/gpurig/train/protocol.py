"""Line prefixes rank 0 prints for the parent process (kept torch-free so the parent stays light)."""

PROGRESS = "GPURIG_PROGRESS "  # followed by a JSON object with an "event" key
CHOICE = "GPURIG_CHOICE "  # followed by {"name", "value", "reason"}
