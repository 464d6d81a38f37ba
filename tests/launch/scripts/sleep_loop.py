"""Sleeps in a loop until it is stopped, like a training script at work; each rank writes its pid
into PID_DIR so a test can stop `gpurig launch` once the workers are up and check none is left."""
import os
import time

with open(os.path.join(os.environ["PID_DIR"], f"rank{os.environ['RANK']}.pid"), "w") as f:
    f.write(str(os.getpid()))
while True:
    time.sleep(0.2)
