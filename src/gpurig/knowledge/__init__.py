"""Data files with their sources (version matrices, link speeds, error catalogue) and typed loaders."""
