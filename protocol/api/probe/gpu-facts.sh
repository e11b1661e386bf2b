#!/usr/bin/env bash
# Run on the GPU machine: gather the facts protocol/api/ is generated from
# (the names NVIDIA's libcuda.so.1 exports, what its cuGetProcAddress_v2
# returns per version and flag) and how NVIDIA's runtime, libraries and
# frameworks reach the driver (LD_AUDIT log).  Writes into ${OUT:-facts}/.
set -uo pipefail
cd "$(dirname "$0")"
out=${OUT:-facts}
mkdir -p "$out"
tmp=$(mktemp -d)
cuda=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")
lib=$(ldconfig -p | awk '/libcuda\.so\.1 .*x86-64/ {print $NF; exit}')
echo "driver library: $lib ($(readlink -f "$lib"))"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nm -D --defined-only "$lib" | awk '$3 ~ /^cu/ {print $3}' | sort >"$out/libcuda580.nm"
echo "exported cu* names: $(wc -l <"$out/libcuda580.nm")"
gcc -O1 -I"$cuda/include" -o "$tmp/probe" procaddr_probe.c -lcuda -ldl &&
	awk '{print "0 T " $1}' "$out/libcuda580.nm" | "$tmp/probe" >"$out/procaddr.tsv"
echo "procaddr rows: $(wc -l <"$out/procaddr.tsv")"
gcc -O1 -shared -fPIC -I"$cuda/include" -o "$tmp/audit.so" cuda_audit.c
cat >"$tmp/k.cu" <<'CU'
#include <cstdio>
__global__ void k(int *p) { p[threadIdx.x] = threadIdx.x * 2; }
int main() {
	int *d, h[32];
	cudaMalloc(&d, sizeof(h));
	k<<<1, 32>>>(d);
	cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
	printf("k: %d %s\n", h[31], cudaGetErrorString(cudaGetLastError()));
	return 0;
}
CU
nvcc -arch=sm_90 -o "$tmp/k_static" "$tmp/k.cu" && nvcc -arch=sm_90 -cudart shared -o "$tmp/k_shared" "$tmp/k.cu"
for p in k_static k_shared; do
	CUDA_AUDIT_LOG="$out/audit-$p.log" LD_AUDIT="$tmp/audit.so" "$tmp/$p"
done
CUDA_AUDIT_LOG="$out/audit-torch.log" LD_AUDIT="$tmp/audit.so" timeout 300 python3 -c '
import torch
a = torch.randn(256, 256, device="cuda")
b = (a @ a).sum()
c = torch.nn.functional.conv2d(torch.randn(1, 3, 32, 32, device="cuda"), torch.randn(8, 3, 3, 3, device="cuda"))
torch.cuda.synchronize()
print("torch", b.item() != 0, c.shape)'
CUDA_AUDIT_LOG="$out/audit-cupy.log" LD_AUDIT="$tmp/audit.so" timeout 300 python3 -c '
import cupy as cp
x = cp.arange(1000, dtype=cp.float32)
print("cupy", float((x * 2).sum()), float((x.reshape(10, 100) @ x.reshape(100, 10)).sum()))'
rm -rf "$tmp"
