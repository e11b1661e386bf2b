"""The PyTorch features pvgpu supports beyond torch_check.py, one at a time,
each in its own process so that one failing cannot hide the others:
CUDA graphs (capture and replay), streams and events, the caching
allocator with expandable segments (virtual memory management),
torch.compile with Triton, memory statistics, a transformer trained with
mixed precision (bf16 autocast, GradScaler, AdamW), scaled dot-product
attention in fp16 (the flash-attention kernels). Prints one JSON line:
{feature: result} where a result is a number/list to compare with the
native run, or "error: ..." naming what failed."""
import json
import os
import subprocess
import sys

FEATURES = {
    "cuda_graph": r"""
import torch
s = torch.cuda.Stream()
x = torch.ones(1 << 16, device="cuda")
y = torch.empty_like(x)
with torch.cuda.stream(s):
    for _ in range(3):
        y.copy_(x * 2 + 1)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y.copy_(x * 2 + 1)
x.fill_(3.0)
g.replay(); g.replay()
torch.cuda.synchronize()
print(float(y.sum()))
""",
    "streams_events": r"""
import torch
s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
e = torch.cuda.Event(enable_timing=True)
a = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
with torch.cuda.stream(s1):
    b = a * 2
    e.record()
s2.wait_event(e)
with torch.cuda.stream(s2):
    c = b + 1
torch.cuda.synchronize()
print(float(c.sum()), e.query())
""",
    "expandable_segments": r"""
import os
os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
import torch
xs = [torch.full((1 << 20,), float(i), device="cuda") for i in range(40)]
del xs[::2]
ys = [torch.ones(3 << 20, device="cuda") for _ in range(4)]
torch.cuda.synchronize()
print(float(sum(x.sum() for x in xs)), float(sum(y.sum() for y in ys)))
""",
    "compile_triton": r"""
import torch
def f(x, y):
    return torch.relu(x * y + 1).sum(dim=1)
g = torch.compile(f)
x = torch.arange(4096, device="cuda", dtype=torch.float32).reshape(64, 64) / 100
print([round(v, 3) for v in g(x, x).tolist()[:8]])
""",
    "memory_stats": r"""
import torch
x = torch.ones(1 << 20, device="cuda")
st = torch.cuda.memory_stats()
free, total = torch.cuda.mem_get_info()
print(st["allocated_bytes.all.current"] >= 4 << 20, free <= total)
""",
    "transformer_amp": r"""
import torch
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(128, 4, 256, batch_first=True)
m = torch.nn.TransformerEncoder(layer, 2).cuda()
opt = torch.optim.AdamW(m.parameters(), 1e-3)
scaler = torch.amp.GradScaler()
x = torch.randn(16, 32, 128, device="cuda")
for _ in range(20):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = m(x).float().pow(2).mean()
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
print(round(loss.item(), 4))
""",
    "sdpa": r"""
import torch
torch.manual_seed(0)
q = torch.randn(4, 8, 256, 64, device="cuda", dtype=torch.float16)
o = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
print(round(o.float().abs().sum().item(), 1))
""",
}


def run(code):
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, env=os.environ)
    if res.returncode:
        lines = (res.stderr or res.stdout).strip().splitlines() or ["no output"]
        named = [line for line in lines if "Error" in line and ":" in line]
        return f"error: rc {res.returncode}: {(named or lines)[-1][:300]}"
    return res.stdout.strip()


print(json.dumps({name: run(code) for name, code in FEATURES.items()}))
