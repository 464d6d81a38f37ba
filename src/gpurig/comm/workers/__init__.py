"""Code that runs inside the processes torchrun starts for `gpurig verify` and `gpurig bench comm`
(`python -m gpurig.comm.workers.worker`): the correctness checks and the bandwidth measurements.
The parent side (planning the run, reading the results, judging them against the links) is in
`gpurig/comm/` above; nothing here is imported by it."""
