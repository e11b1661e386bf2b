/*
 * runtime_module.h - the kernels and device variables a program registers
 * (runtime_module.c), and their lazily loaded state per device context.
 * Internal to the guest library.
 *
 * Registration (before main) only fills a process-wide registry, keyed by
 * the host address nvcc gives each kernel stub and each variable's host
 * shadow.  Everything the backend must be asked for (module, function
 * handle and parameter layout, a variable's device address) is fetched on
 * first use in a device context and cached in a per-device slot of the
 * entry, which that device's backend lock guards: every wire operation for
 * the device holds it anyway (pvgpu_op_begin).  A slot is valid while its
 * gen equals the device's ctx_gen, so a cudaDeviceReset drops it.
 *
 * Entries live until __cudaUnregisterFatBinary (process exit, or dlclose of
 * a library that carries kernels); using a kernel of a library while
 * another thread unloads that library is as undefined here as natively.
 */
#ifndef PVGPU_RUNTIME_MODULE_H
#define PVGPU_RUNTIME_MODULE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "runtime.h"

/* The most parameter bytes launch_kernel carries (ops.spec, max=32764). */
#define PVGPU_MAX_PARAM_BYTES	32764u

/* One kernel in one device context. */
struct pvgpu_func_state {
	uint32_t gen;			/* valid while == device's ctx_gen */
	uint64_t func;			/* backend's handle */
	uint32_t nparams;
	uint32_t *param_offset;		/* nparams each, one allocation */
	uint32_t *param_size;
	uint32_t param_bytes;		/* end of the last parameter */
	int32_t max_threads;		/* per block for this kernel; -1: unknown */
	int32_t max_dyn_shared;		/* dynamic shared bytes allowed; -1: unknown */
	int attrs_valid;
	struct cudaFuncAttributes attrs;	/* cudaFuncGetAttributes, cached */
};

struct pvgpu_kernel {
	struct pvgpu_kernel *next;	/* in its fatbin */
	struct pvgpu_fatbin *bin;
	const void *host_fun;		/* the stub nvcc emitted: the key */
	char *name;			/* the device function's (mangled) name */
	_Atomic int cache_config;	/* cudaFuncSetCacheConfig: a hint, kept */
	struct pvgpu_func_state *st;	/* [ndevices], NULL until first use */
};

/* One __device__ or __constant__ variable in one device context. */
struct pvgpu_var_state {
	uint32_t gen;
	uint64_t dptr;
	uint64_t size;
};

struct pvgpu_var {
	struct pvgpu_var *next;		/* in its fatbin */
	struct pvgpu_fatbin *bin;
	const void *host;		/* the host shadow: the key */
	char *name;
	size_t size;			/* as registered */
	int constant;
	int managed;			/* __managed__: not supported (see .c) */
	struct pvgpu_var_state *st;	/* [ndevices], NULL until first use */
};

/* The registered kernel whose stub (or cudaKernel_t) this is; NULL: none. */
struct pvgpu_kernel *pvgpu_kernel_find(const void *host_fun);

/* The registered variable whose host shadow this is; NULL: none. */
struct pvgpu_var *pvgpu_var_find(const void *host_var);

/*
 * In the device context of op (pvgpu_op_begin with need_ctx): the kernel's
 * function, loading its module first if need be.  Returns the failure of
 * this resolution (a CUresult or client code), 0 on success; an earlier
 * asynchronous error that came back on one of the replies on the way goes
 * to *deferred (which the caller zeroes), for the caller to report after
 * doing its own work.
 */
int32_t pvgpu_kernel_resolve(struct pvgpu_op *op, struct pvgpu_kernel *k,
			     struct pvgpu_func_state **out, int32_t *deferred);

/* The same for a variable: its device address and size. */
int32_t pvgpu_var_resolve(struct pvgpu_op *op, struct pvgpu_var *v,
			  struct pvgpu_var_state **out, int32_t *deferred);

/*
 * A function's query through the generic driver call (annotations.py
 * GENERIC; the backend has no op of its own for it): fn's id, its
 * arguments one u64 each, results back in a[]; the wire status.
 */
int32_t pvgpu_func_call(struct pvgpu_op *op, uint32_t fn, uint64_t *a, uint32_t n);

#endif /* PVGPU_RUNTIME_MODULE_H */
