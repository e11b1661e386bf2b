/*
 * Kernels of the managed-memory driver program (managed.c), built as
 * managed_kernels.fatbin beside vecadd.fatbin.  Their CPU twins for the
 * sim are in tests/sim-twins/managed_twins.c.
 */

/* p[i] += 1 for i < n: the kernel reads and writes managed memory. */
extern "C" __global__ void managed_inc(int *p, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		p[i] += 1;
}

static __device__ unsigned long long now_ns(void)
{
	unsigned long long t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/*
 * Spin until the host sets flag[0] (memory of cuMemHostAlloc, given by
 * its host pointer), as p2pBandwidthLatencyTest's delay kernel does, then
 * say what was seen in flag[1]: 2 the host's flag, 1 timed out.
 */
extern "C" __global__ void flag_wait(volatile int *flag, unsigned long long timeout_ns)
{
	unsigned long long t0 = now_ns();

	while (flag[0] == 0 && now_ns() - t0 < timeout_ns)
		;
	flag[1] = flag[0] ? 2 : 1;
	__threadfence_system();
}
