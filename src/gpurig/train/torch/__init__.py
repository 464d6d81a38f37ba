"""The PyTorch backend of `gpurig train`: what runs inside each torchrun worker.

Same outline as `train/tf/`: `choices` (the decisions, each with its reason), `data` (the input
pipeline), `models`, `optim`, `wrap` (DDP/FSDP and compile, in one commented order), `trainer`
(the step, evaluation, checkpoints, the summary) and `worker` (the entry point). Importing this
package imports nothing; its modules import torch.
"""
