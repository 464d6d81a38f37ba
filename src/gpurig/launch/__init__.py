"""Build a `LaunchPlan` (argv + environment), hand it to `torch.distributed.run`, collect failures."""
