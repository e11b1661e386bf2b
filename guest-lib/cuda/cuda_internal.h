/*
 * cuda_internal.h - state of pvgpu's driver-API front-end (libcuda.so.1).
 *
 * Handles given to the program: CUcontext, CUmodule, CUfunction, CUlibrary,
 * CUkernel, CUstream and CUevent point at the structs below (never freed
 * while the process lives, where a stale handle could otherwise crash a
 * library that uses one after destroying it: destroyed ones are marked
 * dead).  CUdeviceptr values are the backend's device addresses.
 *
 * Locking, outermost first: a backend's lock (one device operation at a
 * time per connection, so a ctx_set and the operation that needs it reach
 * the backend together), then cu.table_lock (the guest's tables, never held
 * across a wire call), then the client's own mutex.
 */
#ifndef PVGPU_CUDA_INTERNAL_H
#define PVGPU_CUDA_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

/*
 * As NVIDIA's driver is built: every entry point under its own name (the
 * legacy unsuffixed ones with their legacy prototypes), no renaming macros.
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include "client.h"

#define CU_MAGIC_CTX	0x70637478u
#define CU_MAGIC_STREAM	0x70737472u
#define CU_MAGIC_EVENT	0x70657674u
#define CU_MAGIC_MOD	0x706d6f64u
#define CU_MAGIC_FUNC	0x7066756eu
#define CU_MAGIC_LIB	0x706c6962u
#define CU_MAGIC_ARRAY	0x70617272u

#define CU_ATTR_SLOTS	CU_DEVICE_ATTRIBUTE_MAX

struct cu_backend {
	char uri[256];
	struct pvgpu_client *client;
	pthread_mutex_t lock;
	uint64_t current_ctx;		/* made current on the wire; 0 none */
};

struct cu_ctx;

struct cu_device {
	struct cu_backend *be;
	int32_t remote;
	char name[256];
	uint8_t uuid[16];
	uint64_t total_mem;
	int32_t attr[CU_ATTR_SLOTS];
	struct cu_ctx *primary;		/* never freed */
	unsigned primary_flags;
	int primary_refs;		/* under cu.table_lock */
};

struct cu_ctx {
	uint32_t magic;
	int alive;
	int device;
	int is_primary;
	unsigned flags;
	unsigned long long id;
	uint64_t remote;		/* the backend's; 0 until first use */
};

struct cu_stream {
	uint32_t magic;
	int alive;
	struct cu_ctx *ctx;
	uint64_t remote;
	unsigned flags;
	int priority;
	unsigned long long id;
};

struct cu_event {
	uint32_t magic;
	int alive;
	struct cu_ctx *ctx;
	uint64_t remote;
	unsigned flags;
	/* Last recorded on (the backend's stream) after launch number
	 * rec_seq (cuda_capture.c's staged copies). */
	uint64_t rec_stream, rec_seq;
};

struct cu_module;

struct cu_func {
	uint32_t magic;
	struct cu_func *next;		/* module's list */
	struct cu_module *mod;		/* NULL for a CUkernel */
	struct cu_library *lib;		/* a CUkernel's library */
	char *name;
	uint64_t remote;		/* 0 until resolved */
	uint32_t nparams;
	uint32_t *param_offset, *param_size;
	uint32_t params_bytes;
	int32_t max_threads;		/* the kernel's bound; 0 unknown */
	int32_t max_dyn_smem;		/* its dynamic shared memory limit; -1 unknown */
	/*
	 * Attributes read from the backend (cuFuncGetAttribute): bit i of
	 * attr_known says attr[i] holds CUfunction_attribute i.  Libraries
	 * (CUB, cuSPARSE) read all of them before each launch; they change
	 * only by cuFuncSetAttribute, which forgets them.  Both atomic.
	 */
	uint32_t attr_known;
	int32_t attr[CU_FUNC_ATTRIBUTE_MAX];
	/*
	 * Occupancy answers (cuda_module.c): the same for the same question
	 * until an attribute is set.  PyTorch asks before many launches.
	 */
	struct cu_answer {
		uint64_t key[6];	/* key[0]: which query, 0 an empty slot */
		int64_t value;
	} answers[8];
	unsigned int next_answer;
	char answers_busy;		/* the lock of the three above */
};

/* A module: a library's image loaded into one context. */
struct cu_module {
	uint32_t magic;
	int alive;
	struct cu_ctx *ctx;
	uint64_t remote;
	struct cu_func *funcs;
	struct cu_library *lib;
};

/* A library: an image, loaded into each context that uses it (lazily). */
struct cu_library {
	uint32_t magic;
	int alive;
	void *image;			/* our copy */
	size_t size;
	struct cu_module *mods[64];	/* per device's primary context */
	struct cu_func *kernels;	/* CUkernel handles, by name */
	struct cu_library *next;	/* every library loaded (cuda_module.c) */
};

/* One device allocation (cuMemAlloc) or module variable. */
struct cu_alloc {
	uint64_t base, size;
	int device;
	int managed;			/* cuMemAllocManaged's (cuda_managed.c) */
	int mapped;			/* a cuMemMap mapping (cuda_vmm.c) */
	int graph;			/* a graph allocation node's range: its
					 * graph's for as long as the graph
					 * lives, freed or not (cuda_graphmem.c) */
};

/*
 * Managed memory (cuda_managed.c): a part of the window the backend maps
 * at our address, its advice and prefetches remembered (they move
 * nothing: it is host memory the GPU reaches), under cu.table_lock.
 */
struct cu_managed {
	uint64_t base, size;		/* size: as asked; the pin is whole pages */
	int device;
	int read_mostly;
	int preferred;			/* CU_DEVICE_CPU, a device, CU_DEVICE_INVALID */
	int last_prefetch;		/* the same */
	uint64_t accessed_by;		/* bit d: device d; bit 63: the CPU */
	struct pvgpu_window_map *win;
	struct pvgpu_client *client;
};

/* One host allocation (cuMemAllocHost/cuMemHostAlloc) or registration. */
struct cu_host {
	void *ptr;
	size_t size;
	unsigned flags;
	int registered;			/* cuMemHostRegister: not ours to free */
	struct pvgpu_window_map *win;	/* inside this window; NULL: own */
	struct pvgpu_client *client;
	/*
	 * Registered memory moved into the window (cuda_hostreg.c): the
	 * pages [alias_start, +alias_len) are also the window's at alias.
	 */
	uint8_t *alias;
	uintptr_t alias_start;
	size_t alias_len;
};

/* A CUDA array: the backend's (ops.spec array_*); the guest keeps its
 * descriptor. */
struct cu_array {
	uint32_t magic;
	int alive;
	struct cu_ctx *ctx;
	uint64_t remote;
	CUDA_ARRAY3D_DESCRIPTOR desc;
};

/* The flags an array may be made with (the rest: NOT_SUPPORTED). */
#define CU_ARRAY_FLAGS	(CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST | \
			 CUDA_ARRAY3D_CUBEMAP | CUDA_ARRAY3D_TEXTURE_GATHER)

/* The live array behind h, or NULL (cuda_mem.c). */
struct cu_array *cu_array_get(CUarray h);

/*
 * A texture or surface object (cuda_tex.c): value is the host driver's,
 * which kernels read; the guest keeps the descriptors it was made from.
 */
struct cu_texobj {
	uint64_t value;
	int surf;
	struct cu_ctx *ctx;
	CUDA_RESOURCE_DESC res;
	CUDA_TEXTURE_DESC tex;
};

struct cu_state {
	pthread_once_t once;
	CUresult init_error;
	int initialized;
	struct cu_backend *backends;
	int nbackends;
	struct cu_device *devices;
	int ndevices;
	pthread_mutex_t table_lock;
	struct cu_alloc *allocs;	/* sorted by base */
	size_t nallocs, allocs_cap;
	struct cu_host *hosts;
	size_t nhosts, hosts_cap;
	struct cu_texobj *texobjs;	/* under table_lock */
	size_t ntexobjs, texobjs_cap;
	struct cu_managed *managed;	/* under table_lock */
	size_t nmanaged, managed_cap;
};

extern struct cu_state cu;

/* Read PVGPU_DEVICES (else the default socket): the one place. */
const char *cu_config_devices(void);

/* Connect once; CUDA_SUCCESS or why not. */
CUresult cu_init(void);
CUresult cu_status(int32_t st);

/* The calling thread's current context (NULL: none). */
struct cu_ctx *cu_current(void);
void cu_set_current(struct cu_ctx *ctx);
struct cu_ctx *cu_ctx_check(CUcontext c);
/* ctx current for one call, then the previous one again (NULL: the
 * calling thread's stays); the call's error first, else the pop's. */
CUresult cu_ctx_enter(CUcontext ctx);
CUresult cu_ctx_leave(CUcontext ctx, CUresult r);
#define CU_WITH_CTX(ctx, call)	(cu_ctx_enter(ctx) ?: cu_ctx_leave((ctx), (call)))
struct cu_ctx *cu_primary(int device);

/* A device operation: the backend locked, ctx created and current. */
struct cu_op {
	struct cu_backend *be;
	struct pvgpu_client *client;
	struct cu_ctx *ctx;
};
CUresult cu_op_begin(struct cu_op *op, struct cu_ctx *ctx);
/* Another context of op's backend (peer access, peer copies): its handle
 * there, made on first use. */
CUresult cu_op_peer(struct cu_op *op, struct cu_ctx *peer, uint64_t *remote);
/* Same, in the current context (CUDA_ERROR_INVALID_CONTEXT without one). */
CUresult cu_op_current(struct cu_op *op);
void cu_op_end(struct cu_op *op);
/* For a call NVIDIA's driver takes without a context (cuMemCreate ...:
 * cuda_generic.c): the current context, else the primary one of device. */
CUresult cu_op_device(struct cu_op *op, int device);
/* Shareable handles of IPC (cuda_ipc.c): a file descriptor holding a token
 * of one kind, which the program may pass to another process of its VM
 * (SCM_RIGHTS); the token read back from one. */
#define CU_SHAREABLE_TOKEN	16
enum cu_shareable_kind { CU_SHAREABLE_VMM = 1, CU_SHAREABLE_POOL = 2 };
int cu_shareable_fd(uint32_t kind, const uint8_t token[CU_SHAREABLE_TOKEN]);
CUresult cu_shareable_read(int fd, uint32_t kind, uint8_t token[CU_SHAREABLE_TOKEN]);

/* CUstream -> backend stream, and its context (NULL stream: current). */
CUresult cu_stream_resolve(CUstream s, struct cu_ctx **ctx, uint64_t *remote);

/*
 * The generic driver call (cuda_generic.c; the entry points are generated
 * from protocol/api/annotations.py GENERIC).  a[n]: one u64 per argument,
 * results come back in their slots; ctx NULL: the current context.
 */
CUresult cu_generic_call(uint32_t id, const char *name, int async,
			 struct cu_ctx *ctx, uint64_t *a, uint32_t n);
/* The same on op, begun by the caller (hand-written entry points that
 * answer in the guest when they can): the wire status, results in a[]. */
int32_t cu_generic_op(struct cu_op *op, uint32_t id, uint64_t *a, uint32_t n);
int32_t cu_generic_op_async(struct cu_op *op, uint32_t id, const uint64_t *a,
			    uint32_t n);
/*
 * A handle argument of kind gh (PVGPU_GH_*): for the guest's own structs
 * (events, functions, modules, arrays) the backend's id, and their
 * context into *ctx unless an earlier argument named one; else the value
 * as it is.  CUDA_ERROR_INVALID_HANDLE for a handle that is not a live
 * one of ours.
 */
CUresult cu_generic_handle(uint32_t gh, const void *h, struct cu_ctx **ctx,
			   uint64_t *remote);
CUresult cu_event_remote(CUevent e, struct cu_ctx **ctx, uint64_t *remote);
CUresult cu_func_remote(CUfunction f, struct cu_ctx **ctx, uint64_t *remote);
CUresult cu_module_remote(CUmodule m, struct cu_ctx **ctx, uint64_t *remote);
/* Stream captures begun and not yet ended by this process;
 * cu_capture_begun: one more (cuStreamBeginCaptureToGraph). */
int cu_captures_active(void);
void cu_capture_begun(void);
/* cuLaunchHostFunc on a capturing stream: a host node (cuda_capture.c). */
int cu_capture_host(CUstream s, CUhostFn fn, void *data, CUresult *r);

/*
 * Copy nodes whose host end is guest memory the worker cannot see
 * (cuda_capture.c).  cu_staged_add: an explicit node of graph after deps,
 * or (graph 0) the copy captured on stream (the backend's); host, size
 * and the direction kept for the launches.  cu_staged_instantiate: exec
 * runs graph's staged nodes (at instantiation and after an update).
 * cu_staged_launch before a launch (sends the host-to-device bytes),
 * cu_staged_launched after it; cu_staged_sync after a synchronisation
 * of stream (all: of ctx) covering launches up to number seq
 * (cu_staged_seq: the latest), fetching their device-to-host bytes.
 */
CUresult cu_staged_add(struct cu_ctx *ctx, uint64_t graph,
		       const CUgraphNode *deps, size_t ndeps, uint64_t stream,
		       CUdeviceptr dptr, void *host, size_t size, int to_host,
		       CUgraphNode *out);
void cu_staged_forget(uint64_t graph, uint64_t node);
CUresult cu_staged_clone(uint64_t graph, uint64_t clone);
/* The node of clone that is node in it (graph_clone_node); *staging: its
 * own staging buffer when node is a staged copy, else 0 (cuda_graph.c). */
CUresult cu_graph_clone_node(uint64_t clone, uint64_t node, uint64_t *out,
			     uint64_t *staging);
size_t cu_staged_count(uint64_t graph);
CUresult cu_staged_instantiate(uint64_t exec, uint64_t graph);
void cu_staged_exec_gone(uint64_t exec);
CUresult cu_staged_launch(struct cu_ctx *ctx, uint64_t exec, void **pending);
void cu_staged_launched(void *pending, uint64_t stream, CUresult r);
uint64_t cu_staged_seq(void);
CUresult cu_staged_sync(struct cu_ctx *ctx, uint64_t stream, int all, uint64_t seq);

/* Graph memory (cuda_graphmem.c): cuGraphAddNode's allocation and free
 * nodes; cuMemAllocAsync (size) / cuMemFreeAsync (*dptr) on a stream
 * being captured, made a node of the capture (0: s is not capturing). */
CUresult cu_graph_add_mem_node(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
			       size_t ndeps, CUgraphNodeParams *p);
int cu_graph_mem_captured(CUstream s, size_t size, CUdeviceptr *dptr, CUresult *r);
/* Conditional nodes (cuda_graphcond.c): cuGraphAddNode's, and their body
 * arrays forgotten with their graph (or node). */
CUresult cu_graph_add_cond_node(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
				size_t ndeps, CUgraphNodeParams *p);
void cu_graph_cond_forget(uint64_t graph, uint64_t node);
/* The same with structures: in (nin bytes) sent, out (nout bytes) wanted
 * back (gen_generic.py's const_T* and out_T*). */
CUresult cu_generic_call_data(uint32_t id, const char *name, struct cu_ctx *ctx,
			      uint64_t *a, uint32_t n, const void *in,
			      uint32_t nin, void *out, uint32_t nout);
/* A stream argument: its context and backend handle (ptsz: NULL is the
 * per-thread default stream). */
CUresult cu_generic_stream(CUstream s, int ptsz, struct cu_ctx **ctx,
			   uint64_t *remote);

/* Allocation tracking. */
void cu_alloc_add(uint64_t base, uint64_t size, int device);
/* The same for any entry; -1 when out of memory. */
int cu_alloc_insert(const struct cu_alloc *a);
/* cuMemFree of managed memory (cuda_managed.c). */
CUresult cu_managed_free(const struct cu_alloc *a);
/* Can device's backend hold managed memory (a window at our address)? */
int cu_managed_window(int device);
/*
 * Does a launch's packed parameter block name memory of c's window that
 * the GPU reaches at our address (managed, cuMemHostAlloc'd)?  Such a
 * launch is sent at once rather than batched: the program may wait in a
 * loop on what the kernel writes there, or the kernel on what it writes.
 */
int cu_params_reach_window(struct pvgpu_client *c, const void *params, size_t len);
/* Is [ptr, ptr + n) managed memory? (n 0: ptr alone) */
int cu_managed_holds(uint64_t ptr, uint64_t n);
int cu_alloc_remove(uint64_t base);
int cu_alloc_find(uint64_t ptr, struct cu_alloc *out);
int cu_host_find(const void *ptr, struct cu_host *out);
/* Pin window memory [ptr, +size) for the GPU / forget the pin. */
void cu_window_pin(struct cu_ctx *ctx, struct pvgpu_window_map *win, void *ptr,
		   uint64_t size);
void cu_window_unpin(struct pvgpu_client *client, struct pvgpu_window_map *win,
		     void *ptr, uint64_t size);
/* cuda_hostreg.c: registered memory made window memory, and back. */
int cu_hostreg_alias(struct cu_host *h, struct cu_ctx *ctx);
void cu_hostreg_unalias(struct cu_host *h);
/* Where the window holds p of h (itself, or inside h's alias). */
void *cu_host_window_ptr(const struct cu_host *h, const void *p);
/* Whether win holds [p, +n), by its own address or a registration's
 * alias; *off is then its offset in the window (copies go zero-copy). */
int cu_window_offset(struct pvgpu_window_map *win, const void *p, uint64_t n,
		     uint64_t *off);

/* Module/kernel layer. */
/* cuModuleLoadDataEx: PTX with JIT options through the backend's linker
 * (cuda_link.c), anything else as cuModuleLoadData. */
/* A module of ctx that the backend loaded as remote (cuda_module.c). */
CUresult cu_module_adopt(struct cu_ctx *ctx, uint64_t remote, CUmodule *out);
CUresult cu_module_load_jit(CUmodule *module, const void *image, unsigned int n,
			    CUjit_option *options, void **values);
CUresult cu_library_load(const void *image, CUlibrary *out);
CUresult cu_read_file(const char *path, uint8_t **buf, size_t *size);
CUresult cu_module_functions(CUmodule hmod, CUfunction *fs, unsigned int max,
			     unsigned int *count);

/*
 * A kernel's function, shape and parameters (kernelParams or the `extra`
 * packed buffer) checked and packed as cuLaunchKernel does, for ctx
 * (cuda_module.c); buf: room for CU_MAX_PARAMS bytes, params may point
 * into it.
 */
#define CU_MAX_PARAMS	32764
struct cu_kernel_args {
	uint64_t func;			/* the backend's function */
	const void *params;
	uint32_t params_len;
};
CUresult cu_kernel_pack(CUfunction h, struct cu_ctx *ctx, const unsigned grid[3],
			const unsigned block[3], unsigned smem, void **params,
			void **extra, uint8_t *buf, struct cu_kernel_args *out);

/* Where a cu_ctx's remote lives, for modules: its device index. */
#define CU_MAX_DEVICES 64

#endif
