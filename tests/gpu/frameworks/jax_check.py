"""What a JAX user checks, printed as one JSON line: the devices, a jitted
matmul (XLA's Triton GEMMs and autotuning), a gradient, a convolution
(cuDNN), an FFT (cuFFT), a reduction, and a timed jitted step.  XLA talks
to the driver itself (virtual memory management for its pool, TMA
descriptors, its own modules).  Compared natively vs through pvgpu by
test_gpu_driver_api.py."""
import json
import sys
import time

import jax
import jax.numpy as jnp

out = {"devices": [d.platform for d in jax.devices()]}
x = jnp.arange(1024 * 1024, dtype=jnp.float32).reshape(1024, 1024) / 1e6
mm = jax.jit(lambda a: (a @ a).sum())
out["jit_matmul"] = float(mm(x))
print("step jit_matmul", file=sys.stderr, flush=True)
grad = jax.grad(lambda w: jnp.tanh(x @ w).sum())
out["grad"] = float(grad(jnp.ones((1024, 8))).sum())
print("step grad", file=sys.stderr, flush=True)
out["conv"] = float(jax.lax.conv(jnp.ones((1, 3, 32, 32)), jnp.ones((4, 3, 3, 3)),
                                 (1, 1), "SAME").sum())
print("step conv", file=sys.stderr, flush=True)
out["fft"] = float(jnp.abs(jnp.fft.fft(x[0])).sum())
out["reduce_max"] = float(jnp.max(jnp.sin(x)))
print("step reduce", file=sys.stderr, flush=True)
step = jax.jit(lambda a: jnp.tanh(a @ a.T) * 0.5 + a)
y = step(x)
y.block_until_ready()
t = time.perf_counter()
for _ in range(50):
    y = step(y)
y.block_until_ready()
out["step_s"] = time.perf_counter() - t
print(json.dumps(out))
