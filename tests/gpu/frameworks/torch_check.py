"""What a PyTorch user checks, printed as one JSON line: device
properties, elementwise ops, reductions and sorts (CUB), matmul
(cuBLAS/cuBLASLt), convolution (cuDNN), a small training loop, the memory
the device reports, and a loop of tiny additions (timed). Run natively and
through pvgpu by tests/gpu/test_gpu_driver_api.py, which compares them."""
import json
import sys
import time

import torch

torch.manual_seed(0)
torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False
dev = torch.device("cuda")
out = {"count": torch.cuda.device_count(),
       "name": torch.cuda.get_device_name(0),
       "capability": list(torch.cuda.get_device_capability(0))}
a = torch.randn(1024, 1024, device=dev)
b = torch.randn(1024, 1024, device=dev)
out["add"] = float((a + b).double().sum())
print("step add", file=sys.stderr, flush=True)
out["softmax"] = float(torch.softmax(a, 1).double().sum())
print("step softmax", file=sys.stderr, flush=True)
out["sort"] = torch.sort(torch.randn(100000, device=dev)).values[::10000].tolist()
print("step sort", file=sys.stderr, flush=True)
out["matmul"] = float((a @ b).double().sum())
print("step matmul", file=sys.stderr, flush=True)
out["matmul_bf16"] = float((a.bfloat16() @ b.bfloat16()).double().sum())
print("step matmul_bf16", file=sys.stderr, flush=True)
x = torch.randn(8, 3, 32, 32, device=dev)
w = torch.randn(16, 3, 3, 3, device=dev)
out["conv"] = float(torch.nn.functional.conv2d(x, w, padding=1).double().sum())
print("step conv", file=sys.stderr, flush=True)

model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                            torch.nn.Linear(128, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
X = torch.randn(256, 64, device=dev)
Y = torch.randint(0, 10, (256,), device=dev)


def train(net, optim, inputs, labels, steps):
    for _ in range(steps):
        optim.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(inputs), labels)
        loss.backward()
        optim.step()
    return loss


def timed(fn, *args):
    """Wall time of fn(*args) once warm, the device synchronized around it."""
    torch.cuda.synchronize()
    t = time.perf_counter()
    r = fn(*args)
    torch.cuda.synchronize()
    return r, time.perf_counter() - t


loss = train(model, opt, X, Y, 20)
out["mlp_loss"] = float(loss)
loss, out["mlp_train_s"] = timed(train, model, opt, X, Y, 200)
print("step mlp_loss", file=sys.stderr, flush=True)

cnn = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                          torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                          torch.nn.Linear(8 * 16 * 16, 10)).to(dev)
opt = torch.optim.SGD(cnn.parameters(), lr=0.01)
Xc = torch.randn(32, 3, 32, 32, device=dev)
Yc = torch.randint(0, 10, (32,), device=dev)
loss = train(cnn, opt, Xc, Yc, 10)
out["cnn_loss"] = float(loss)
loss, out["cnn_train_s"] = timed(train, cnn, opt, Xc, Yc, 100)
print("step cnn_loss", file=sys.stderr, flush=True)

free, total = torch.cuda.mem_get_info()
out["mem_total"] = total
print("step mem_total", file=sys.stderr, flush=True)

z = torch.zeros(1, device=dev)
torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(1000):
    z += 1
torch.cuda.synchronize()
out["tiny_loop_s"] = time.perf_counter() - t
print("step tiny_loop_s", file=sys.stderr, flush=True)
out["z"] = float(z)
print("step z", file=sys.stderr, flush=True)
big = torch.randn(4096, 4096, device=dev)
torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(10):
    c = big @ big
torch.cuda.synchronize()
out["matmul4096_s"] = time.perf_counter() - t
print("step matmul4096_s", file=sys.stderr, flush=True)
stack = torch.nn.Sequential(*[m for _ in range(4) for m in (
    torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU())]).to(dev)
xs = torch.randn(16, 32, 64, 64, device=dev)
with torch.no_grad():
    out["conv_stack"] = float(stack(xs).double().sum())
    for _ in range(5):      # warm: cuDNN's kernels loaded and chosen
        stack(xs)
    _, out["conv_stack_s"] = timed(lambda: [stack(xs) for _ in range(50)])
print("step conv_stack_s", file=sys.stderr, flush=True)
print(json.dumps(out))
