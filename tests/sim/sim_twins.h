/*
 * sim_twins.h - CPU twins of CUDA kernels, for the "sim" executor.
 *
 * The sim executor cannot run GPU machine code.  A test that launches a
 * kernel under `pvgpud --executor sim` instead provides a "twin": a C
 * function that does on the CPU what the kernel does on the GPU, for the
 * whole grid.  Twins live in shared objects named, colon-separated, in the
 * environment variable PVGPU_SIM_TWINS; the sim dlopen()s each when it opens
 * and finds twins by the kernel's name as the module's ELF (or PTX) spells
 * it: the mangled C++ name, or the plain name of an extern "C" kernel.
 *
 * A plugin defines, with default visibility:
 *
 *	const uint32_t pvgpu_sim_twin_abi = PVGPU_SIM_TWIN_ABI;
 *	const struct pvgpu_sim_twin pvgpu_sim_twins[] = {
 *		{ "vecadd", vecadd_twin },
 *		{ "_Z6reducePKfPfi", reduce_twin },
 *		{ NULL, NULL },
 *	};
 *
 * Rules for a twin:
 *   - It runs the whole grid: loop over the blocks, and within a block over
 *     the threads.  Where the kernel has __syncthreads(), split the thread
 *     loop into phases (all threads run phase 1, then all run phase 2, ...);
 *     per-thread values that live across a barrier go into arrays.
 *   - Every device pointer goes through l->dev() before it is touched; it
 *     returns NULL for a range that is not wholly inside one live allocation
 *     of the launching context.  On NULL, return at once: the launch then
 *     fails with CUDA_ERROR_ILLEGAL_ADDRESS and, as on a GPU, the context is
 *     unusable from then on.  l->fault() does the same for other faults the
 *     twin wants to model (a trap, an out-of-bounds shared access).
 *   - __shared__ memory comes from l->shared(), once per block: it returns
 *     a buffer of the requested size, no larger than the kernel's static
 *     shared size plus the launch's dynamic shared size (else NULL, a
 *     fault), filled with garbage like uninitialised shared memory.
 *   - __device__ and __constant__ variables of the kernel's module come
 *     from l->global().
 *   - Twins run on the worker's thread, one launch at a time, and must not
 *     keep pointers from one launch to the next.
 */
#ifndef PVGPU_SIM_TWINS_H
#define PVGPU_SIM_TWINS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define PVGPU_SIM_TWIN_ABI	3

struct pvgpu_sim_dim3 {
	uint32_t x, y, z;
};

/* Where one kernel parameter lies in the packed parameter buffer. */
struct pvgpu_sim_param {
	uint32_t offset;
	uint32_t size;
};

struct pvgpu_sim_launch {
	const char *name;		/* the kernel's (mangled) name */
	struct pvgpu_sim_dim3 grid;	/* gridDim */
	struct pvgpu_sim_dim3 block;	/* blockDim */
	uint32_t static_shared;		/* __shared__ bytes the image declares */
	uint32_t dynamic_shared;	/* extern __shared__ bytes of the launch */

	/* Parameters as the kernel sees them, packed at the image's layout. */
	const unsigned char *params;
	uint32_t params_size;
	const struct pvgpu_sim_param *layout;
	uint32_t nparams;

	/* Host pointer for device range [addr, addr + len); NULL: faulted. */
	void *(*dev)(const struct pvgpu_sim_launch *l, uint64_t addr,
		     uint64_t len);
	/* A __device__/__constant__ variable of the module; NULL if none. */
	void *(*global)(const struct pvgpu_sim_launch *l, const char *name,
			uint64_t *size);
	/* This block's shared memory (see above); NULL: faulted. */
	void *(*shared)(const struct pvgpu_sim_launch *l, size_t bytes);
	/* Make the launch fail with CUDA_ERROR_ILLEGAL_ADDRESS. */
	void (*fault)(const struct pvgpu_sim_launch *l, const char *why);
	/* Non-zero once the launch has faulted. */
	int (*faulted)(const struct pvgpu_sim_launch *l);

	void *sim;			/* the executor's; do not touch */

	/* ---- ABI 2 ---- */
	/*
	 * Device printf: held in the context's printf buffer (1 MiB, the
	 * default cudaLimitPrintfFifoSize; what does not fit is lost, as on a
	 * GPU) and written to the worker's stdout when the program next
	 * synchronises; the worker delivers it to the guest.  Returns the
	 * characters printed, or -1 when they were lost.
	 */
	int (*dev_printf)(const struct pvgpu_sim_launch *l, const char *fmt, ...)
		__attribute__((format(printf, 2, 3)));
	/*
	 * A failed device assert: the driver's message on stderr at the next
	 * synchronisation, and the launch fails with CUDA_ERROR_ASSERT, which
	 * sticks to the context as on a GPU.  The twin returns at once.
	 */
	void (*assert_fail)(const struct pvgpu_sim_launch *l, const char *expr,
			    const char *file, unsigned int line,
			    const char *func, struct pvgpu_sim_dim3 block,
			    struct pvgpu_sim_dim3 thread);

	/* ---- ABI 3 ---- */
	/* Launch attributes (cuLaunchKernelEx): the cluster dimensions
	 * (1, 1, 1 without clusters) and whether the launch is cooperative
	 * (cuLaunchCooperativeKernel: the whole grid is resident, so a twin
	 * may model grid.sync() as a phase boundary). */
	struct pvgpu_sim_dim3 cluster;
	int cooperative;
};

struct pvgpu_sim_twin {
	const char *name;
	void (*run)(const struct pvgpu_sim_launch *l);
};

/* ---- helpers for twin authors ------------------------------------- */

/*
 * Copy parameter i into dst, which has room for exactly `size` bytes.  A
 * twin that disagrees with the image about a parameter is a bug in the
 * twin: it faults the launch rather than read garbage.
 */
static inline int pvgpu_sim_arg(const struct pvgpu_sim_launch *l, uint32_t i,
				void *dst, uint32_t size)
{
	if (i >= l->nparams || l->layout[i].size != size ||
	    l->layout[i].offset > l->params_size ||
	    size > l->params_size - l->layout[i].offset) {
		l->fault(l, "twin reads a parameter the kernel does not have");
		return -1;
	}
	memcpy(dst, l->params + l->layout[i].offset, size);
	return 0;
}

/* A device pointer parameter, or 0 after a fault. */
static inline uint64_t pvgpu_sim_arg_ptr(const struct pvgpu_sim_launch *l,
					 uint32_t i)
{
	uint64_t v = 0;

	return pvgpu_sim_arg(l, i, &v, sizeof(v)) ? 0 : v;
}

static inline uint64_t pvgpu_sim_nblocks(const struct pvgpu_sim_launch *l)
{
	return (uint64_t)l->grid.x * l->grid.y * l->grid.z;
}

static inline uint32_t pvgpu_sim_nthreads(const struct pvgpu_sim_launch *l)
{
	return l->block.x * l->block.y * l->block.z;
}

/* blockIdx for the linear block number b (x fastest, as on a GPU). */
static inline struct pvgpu_sim_dim3
pvgpu_sim_block_idx(const struct pvgpu_sim_launch *l, uint64_t b)
{
	struct pvgpu_sim_dim3 d;

	d.x = (uint32_t)(b % l->grid.x);
	d.y = (uint32_t)(b / l->grid.x % l->grid.y);
	d.z = (uint32_t)(b / l->grid.x / l->grid.y);
	return d;
}

/* threadIdx for the linear thread number t within a block. */
static inline struct pvgpu_sim_dim3
pvgpu_sim_thread_idx(const struct pvgpu_sim_launch *l, uint32_t t)
{
	struct pvgpu_sim_dim3 d;

	d.x = t % l->block.x;
	d.y = t / l->block.x % l->block.y;
	d.z = t / l->block.x / l->block.y;
	return d;
}

#endif /* PVGPU_SIM_TWINS_H */
