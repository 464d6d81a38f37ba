"""Read-only facts about the machine. Never initialises CUDA in the calling process."""
