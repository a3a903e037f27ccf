"""Runs one kernel variant back to back for a few seconds while sampling SM clock and power, so that a
slowdown can be told apart from throttling. usage: clocks.py LIB [seconds]"""
import subprocess
import sys
import threading
import time

import torch

sys.path.insert(0, __file__.rsplit("/tools/", 1)[0])
sys.path.insert(0, __file__.rsplit("/", 1)[0])
import run_dev  # noqa: E402
from aiter.testing.mqa_logits import make_inputs, make_windows  # noqa: E402

run_dev.load(sys.argv[1])
run_dev.NUM_SMS = torch.cuda.get_device_properties(0).multi_processor_count
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
M, N, H = 4096, 32768, 32
q, kv, s, w = make_inputs(M, N, H, 128, "cuda", 1)
ks, ke = make_windows("causal", M, N, "cuda")
out = torch.empty(M, N, device="cuda")
samples = []


def poll():
    time.sleep(seconds / 3)
    for _ in range(4):
        r = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader"],
                           capture_output=True, text=True)
        samples.append(r.stdout.strip())
        time.sleep(seconds / 8)


t = threading.Thread(target=poll)
t.start()
end = time.time() + seconds
n = 0
while time.time() < end:
    for _ in range(20):
        run_dev.run(q, kv, s, w, ks, ke, True, out)
    torch.cuda.synchronize()
    n += 20
t.join()
print(f"{sys.argv[1]}: {n} launches; clocks/power: {' | '.join(samples)}")
