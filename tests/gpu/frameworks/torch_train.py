"""A small deterministic training run, as a user's job: an MLP on fixed
random data with SGD and momentum, one line per step with its loss to the
last bit and its wall time:

    step N loss HEX REPR time SECONDS

With PAUSE_AT (argv[1]) it stops after that step, the device idle, prints
`paused at N reserved BYTES` and waits for a line on stdin: what
tests/gpu/test_gpu_oversub.py needs to suspend the session between two
steps.  A 1 GiB tensor of ones rides along and is checked at the end
(`ballast intact True`), so that a suspend has much to move and a loss
of it shows.

Run with CUBLAS_WORKSPACE_CONFIG=:4096:8 in the environment (cuBLAS reads
it when it starts): with it and torch.use_deterministic_algorithms, two
runs on the same GPU and libraries give the same losses bit for bit.
"""
import sys
import time

import torch

STEPS = 40
pause_at = int(sys.argv[1]) if len(sys.argv) > 1 else 0

torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = torch.device("cuda")

# Data and weights made on the CPU from fixed seeds: the same bytes reach
# the device however it is reached.
g = torch.Generator().manual_seed(1234)
X = torch.randn(4096, 256, generator=g).to(dev)
Y = torch.randint(0, 10, (4096,), generator=g).to(dev)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),
                            torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                            torch.nn.Linear(1024, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
ballast = torch.ones(256 << 20, device=dev)    # 1 GiB of float32

for step in range(1, STEPS + 1):
    t = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(X), Y)
    loss.backward()
    opt.step()
    v = loss.item()
    dt = time.perf_counter() - t
    print(f"step {step} loss {v.hex()} {v!r} time {dt:.6f}", flush=True)
    if step == pause_at:
        torch.cuda.synchronize()
        print(f"paused at {step} reserved {torch.cuda.memory_reserved()}", flush=True)
        sys.stdin.readline()

print(f"ballast intact {bool((ballast == 1.0).all())}", flush=True)
