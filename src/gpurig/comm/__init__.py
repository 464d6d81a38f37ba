"""Collective and peer-to-peer correctness and bandwidth.

Parent side (no torch import): `verify.run_verify`, `bench.run_bench_comm`, the NCCL log parser
(`nccl_log`), bandwidth arithmetic (`metrics`) and link capabilities (`links`).
Worker side (inside torchrun workers, imports torch): `worker`, `checks`, `benchmark`.
"""
