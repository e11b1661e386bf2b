/*
 * kernels.cu - the kernels the sim executor's unit test loads
 * (tests/unit/test_sim_module.py builds them as a cubin, fatbinaries and
 * PTX).  The sim never runs this code: it runs the CPU twins in
 * example_twins.c, so each kernel here and its twin must agree.
 * mixed, bounded and big have no twin on purpose.
 */
struct Pair {
	int a;
	double b;
};

struct Big {
	char x[4000];
};

__device__ int gcounter;
__device__ float gtable[4] = { 1.0f, 2.0f, 3.0f, 4.0f };
__constant__ float cscale[16];
__constant__ int cinit = 42;
namespace ns {
__device__ double nsvar[3] = { 1.5, 2.5, 3.5 };
}

extern "C" __global__ void vecadd(const float *a, const float *b, float *c,
				  int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		c[i] = a[i] + b[i];
}

/* x[i] = x[i] * cscale[0] + cinit: __constant__ memory. */
extern "C" __global__ void scale(float *x, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		x[i] = x[i] * cscale[0] + cinit;
}

/* One increment per thread of a __device__ variable. */
extern "C" __global__ void count(void)
{
	atomicAdd(&gcounter, 1);
}

/* Per-block sums with shared memory and barriers; blockDim.x == 256. */
extern "C" __global__ void reduce_sum(const float *in, float *out, int n)
{
	__shared__ float buf[256];
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	buf[threadIdx.x] = i < n ? in[i] : 0.0f;
	__syncthreads();
	for (int s = blockDim.x / 2; s > 0; s /= 2) {
		if (threadIdx.x < s)
			buf[threadIdx.x] += buf[threadIdx.x + s];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		out[blockIdx.x] = buf[0];
}

/* Writes through whatever pointer it is given: the faulting kernel. */
extern "C" __global__ void poke(int *p)
{
	*p = 1;
}

__global__ void mixed(char c, Pair s, long long *out)
{
	*out = c + s.a + (long long)s.b;
}

__global__ void __launch_bounds__(128) bounded(int4 v, short s, double d,
					       float2 f, char *p)
{
	p[threadIdx.x] = (char)(v.x + s + d + f.y);
}

__global__ void big(Big b, int *o)
{
	*o = b.x[3999] + ns::nsvar[1] + gtable[2];
}
