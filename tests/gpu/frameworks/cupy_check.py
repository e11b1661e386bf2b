"""What a CuPy user checks, printed as one JSON line: arrays, elementwise
and reduction kernels, a RawKernel (NVRTC in the process; only the cubin
crosses), cuBLAS and cuFFT through CuPy, a stream, the memory pool, and a
timed mix. Compared natively vs through pvgpu by test_gpu_driver_api.py."""
import json
import sys
import time

import cupy as cp

out = {"count": cp.cuda.runtime.getDeviceCount()}
rng = cp.random.default_rng(0)
x = rng.standard_normal(1 << 20, dtype=cp.float32)
out["elementwise"] = float((x * 2 + 1).astype(cp.float64).sum())
print("step elementwise", file=sys.stderr, flush=True)
out["reduce_max"] = float(x.max())
print("step reduce_max", file=sys.stderr, flush=True)
m = rng.standard_normal((512, 512), dtype=cp.float32)
out["matmul"] = float((m @ m).astype(cp.float64).sum())
print("step matmul", file=sys.stderr, flush=True)
out["fft"] = float(cp.abs(cp.fft.fft(x[:4096])).astype(cp.float64).sum())
print("step fft", file=sys.stderr, flush=True)
k = cp.RawKernel(r'''
extern "C" __global__ void twice(const float *a, float *b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) b[i] = 2.0f * a[i];
}''', "twice")
y = cp.empty_like(x)
k(((x.size + 255) // 256,), (256,), (x, y, cp.int32(x.size)))
out["rawkernel"] = float(y.astype(cp.float64).sum())
print("step rawkernel", file=sys.stderr, flush=True)
s = cp.cuda.Stream()
with s:
    out["stream"] = float((x + 1).astype(cp.float64).sum())
s.synchronize()
out["pool_used"] = cp.get_default_memory_pool().used_bytes()
print("step pool_used", file=sys.stderr, flush=True)
# Warm first: CuPy compiles each new kernel with NVRTC and caches it on
# disk, so whichever run came first would pay for both.
r = float((m @ m).sum() + (x * 3).max())
cp.cuda.Device().synchronize()
t = time.perf_counter()
for _ in range(100):
    r = float((m @ m).sum() + (x * 3).max())
out["mix_s"] = time.perf_counter() - t
print("step mix_s", file=sys.stderr, flush=True)
print(json.dumps(out))
