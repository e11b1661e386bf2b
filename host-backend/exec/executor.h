/*
 * executor.h - the interface between a session worker and the thing that
 * actually runs its work: a real GPU through the CUDA driver API ("cuda"),
 * or a simulated device in host memory ("sim", a CI fixture only).
 *
 * Every operation speaks driver-API semantics and returns a CUresult value
 * (CUDA_SUCCESS == 0).  The worker has already checked every guest-supplied
 * handle and pointer range against the session's own tables before an
 * executor sees it, but executors must still fail cleanly (an error code,
 * never a crash) on any value: defence in depth.
 *
 * Handles (contexts, streams, events, modules, functions) are opaque 64-bit
 * values chosen by the executor; 0 as a stream means the context's default
 * (legacy NULL) stream.  An executor instance lives in exactly one worker
 * process and serves one session; it is not shared between threads.
 */
#ifndef PVGPU_EXECUTOR_H
#define PVGPU_EXECUTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

struct pvgpu_generic_fn;		/* build/gen/pvgpu_generic.h */

struct pvgpu_exec;			/* private to each executor */

/* Where kernels are concerned, one parameter of a function. */
struct pvgpu_param_info {
	uint32_t offset;
	uint32_t size;
};

/*
 * One launch attribute of cuLaunchKernelEx, as the wire carries it
 * (ops.spec launch_kernel_ex): id is a CUlaunchAttributeID the session has
 * checked it knows; v: cluster dimensions x, y, z, a mem-sync domain map
 * default, remote, every other attribute its one value in v[0].
 */
struct pvgpu_launch_attr {
	uint32_t id;
	uint32_t v[3];
};

#define PVGPU_MAX_LAUNCH_ATTRS	16

struct pvgpu_launch {
	uint64_t func;
	uint32_t grid[3];
	uint32_t block[3];
	uint32_t shared_bytes;
	uint64_t stream;
	const void *params;		/* packed parameter buffer */
	uint32_t params_size;		/* bytes in params */
	const struct pvgpu_param_info *layout;
	uint32_t nparams;
	const struct pvgpu_launch_attr *attrs;	/* none: a plain launch */
	uint32_t nattrs;
	bool run;			/* PVGPU_LAUNCH_RUN of it (launch) */
};

/*
 * A run: identical plain launches the guest queued back to back while the
 * worker was behind (host-backend/session/runs.c), handed to the executor
 * PVGPU_LAUNCH_RUN at a time (launch below, run set); PVGPU_RUN_PARAMS_MAX
 * bytes of parameters at most.  A run's launches reach the GPU in one
 * driver call where native makes one each.
 */
#define PVGPU_LAUNCH_RUN	32
#define PVGPU_RUN_PARAMS_MAX	4096
/* An optional op's answer "not this one, do it another way" (never a CUresult). */
#define PVGPU_EXEC_DECLINED	(-1)

/*
 * One explicit graph node (cuGraphAdd*Node), checked by the worker
 * (host-backend/session/graphs.c).  type is a CUgraphNodeType: KERNEL
 * (kernel, its stream unused), MEMCPY (dst, src, width bytes: device to
 * device, or with host set from host memory to dst (to_host 0) or from src
 * to host memory (to_host 1), memory that stays mapped for the
 * session), MEMSET (dst, pitch, value, elem_size 1/2/4, width elements,
 * height rows) or EMPTY.
 */
struct pvgpu_graph_node {
	uint32_t type;
	struct pvgpu_launch kernel;
	uint64_t dst, src, pitch, width, height;
	uint32_t value, elem_size;
	void *host;
	int to_host;
	/* MEM_ALLOC: width bytes on the current context's device, the
	 * address written to *alloc; MEM_FREE: of dst. */
	uint64_t *alloc;
	/* CONDITIONAL: on handle cond, cond_type, cond_size body graphs,
	 * the executor's handles for them written to bodies[]. */
	uint64_t cond;
	uint32_t cond_type, cond_size;
	uint64_t *bodies;
};

/* A CUDA array (cuArray3DCreate); height 0: 1D, depth 0: not 3D. */
struct pvgpu_array_desc {
	uint64_t width, height, depth;
	uint32_t format, channels, flags;
};

/*
 * A texture object's resource and descriptor (cuTexObjectCreate), checked
 * by the worker: res_type CU_RESOURCE_TYPE_ARRAY (array: the executor's),
 * _LINEAR or _PITCH2D (dptr inside the session's memory).
 */
struct pvgpu_tex_desc {
	uint32_t res_type;
	uint64_t array, dptr;
	uint32_t format, channels;
	uint64_t width, height, pitch, size;
	uint32_t address[3], filter, flags, max_aniso, mip_filter;
	float mip_bias, mip_min, mip_max, border[4];
};

/* A box of an array and device memory, checked by the worker against both. */
struct pvgpu_array_copy {
	uint64_t array;
	uint64_t x, y, z;		/* x in bytes */
	uint64_t width, height, depth;	/* width in bytes */
	uint64_t dptr, pitch, rows;	/* the device side */
	int to_array;
	uint64_t stream;
};

/*
 * What the worker tells an executor when it opens one.  The supervisor keeps
 * per-session accounting in memory shared with every worker; the sim executor
 * needs the sum over all live sessions to report free memory and to run out
 * of it like one physical device shared by everybody.  The cuda executor
 * ignores it (the driver knows).
 */
struct pvgpu_exec_config {
	/* Bytes of device memory held on `dev` by all live sessions. */
	uint64_t (*device_mem_used)(void *arg, int32_t dev);
	void *arg;
	/*
	 * Where the executor's own diagnostics go (0: stderr).  A worker's
	 * stdout and stderr carry its guest's device output (output.c), so
	 * nothing meant for the operator may be written there.
	 */
	int log_fd;
	/*
	 * The "remote" executor: URIs of the pvgpud nodes whose GPUs it
	 * presents as its own, in device order (pvgpud --remote, or the
	 * policy file's [remote] section).  Other executors ignore them.
	 */
	const char *const *remotes;
	unsigned int nremotes;
	/* Who this node is to them, where the channel cannot say (tcp, verbs). */
	const char *remote_token;
	/*
	 * The supervisor's one open at start-up, to list the devices: where
	 * an executor may say once what it serves with (a session's open
	 * must not, or every session would repeat it).
	 */
	bool probe;
};

#define PVGPU_MAX_REMOTES	16

/* One JIT link (link_complete): inputs and options as the worker checked
 * them (link.c), results filled in by the executor. */
#define PVGPU_LINK_MAX_OPTS	32
#define PVGPU_LINK_LOG		4096
struct pvgpu_link {
	uint32_t nopts;
	uint32_t opt_key[PVGPU_LINK_MAX_OPTS];	/* scalar-valued CUjit_options */
	uint64_t opt_value[PVGPU_LINK_MAX_OPTS];	/* in; results written back */
	uint32_t ninputs;
	const uint32_t *input_type;		/* CUjitInputType */
	const uint64_t *input_size;
	const uint8_t *data;			/* the inputs, one after another */
	void *image;				/* out: malloc'd */
	size_t image_size;
	char info_log[PVGPU_LINK_LOG];		/* out, NUL-terminated */
	char error_log[PVGPU_LINK_LOG];
};

/* What a TMA descriptor describes (ops.spec tensor_map_encode). */
struct pvgpu_tensor_map {
	int im2col;
	uint32_t dtype, rank;
	uint64_t address;
	uint64_t dims[5], strides[4];	/* rank, rank - 1 entries */
	uint32_t box[5];		/* tiled: rank entries */
	int32_t lower[3], upper[3];	/* im2col: rank - 2 entries each */
	uint32_t channels, pixels;	/* im2col */
	uint32_t elem_strides[5];
	uint32_t interleave, swizzle, l2, oob;
};

/* What one worker shares with another of the same VM (share_get/open;
 * the registry of ipc_registry.c keeps the kind with each token). */
enum pvgpu_ipc_kind { PVGPU_IPC_MEM = 1, PVGPU_IPC_EVENT = 2, PVGPU_IPC_VMM = 3 };

/*
 * One copy (the executor's copy).  queued: ordered on stream, and for a
 * host end, that memory must stay valid until the stream reaches the copy
 * (the worker records events on its staging buffers to know when).  Not
 * queued: done when copy returns, as a program's cuMemcpyHtoD, DtoH or
 * Peer (on the current context's legacy default stream; a peer copy
 * ordered with the work of both contexts), in one driver call where it
 * has one.  PEER copies GPU to GPU (or, without peer access, however the
 * driver stages it), never through the caller.
 */
enum pvgpu_copy_kind {
	PVGPU_COPY_HTOD = 1,	/* host to dst */
	PVGPU_COPY_DTOH,	/* src to host */
	PVGPU_COPY_DTOD,	/* src to dst, in the current context */
	PVGPU_COPY_PEER,	/* src in src_ctx to dst in dst_ctx */
	PVGPU_COPY_ARRAY,	/* array: queued on its own stream */
};

/* What module_symbol looks up. */
enum pvgpu_symbol_kind { PVGPU_SYM_FUNCTION = 1, PVGPU_SYM_GLOBAL };

/* peer_attribute's cuDeviceCanAccessPeer (CUdevice_P2PAttribute from 1). */
#define PVGPU_PEER_CAN_ACCESS	0

struct pvgpu_exec_copy {
	enum pvgpu_copy_kind kind;
	bool queued;
	uint64_t stream;		/* queued: the executor's stream */
	uint64_t dst, src;		/* device addresses */
	void *host;			/* HTOD: read; DTOH: written */
	uint64_t dst_ctx, src_ctx;	/* PEER: the executor's contexts */
	uint64_t size;
	const struct pvgpu_array_copy *array;	/* ARRAY: all it needs */
};

/*
 * A device as cuDeviceGetName, cuDeviceGetUuid and cuDeviceTotalMem
 * describe it (the name NUL-terminated, cut to fit), and what one more
 * context on it, and one more stream in that, take of its memory: the
 * worker charges them to the VM's quota as it does allocations.  Those
 * two are measured only for the supervisor's start-up probe
 * (pvgpu_exec_config.probe: the executor may make and destroy objects
 * of its own for it), and objects_known says whether they were; not
 * known, they cost nothing the quota need count.
 */
struct pvgpu_exec_device {
	char name[256];
	uint8_t uuid[16];
	uint64_t total_mem;
	uint64_t ctx_bytes, stream_bytes;
	bool objects_known;
};

struct pvgpu_executor_ops {
	const char *name;
	bool takes_runs;		/* launch's runs (launch->run) */

	/*
	 * Create an instance in the calling (worker) process.  On failure
	 * return NULL and write one human-readable line into err, e.g.
	 * "libcuda.so.1 not found: no NVIDIA driver on this machine".
	 */
	struct pvgpu_exec *(*open)(const struct pvgpu_exec_config *cfg,
				   char *err, size_t errlen);
	/* Free everything the instance still holds; never fails. */
	void (*close)(struct pvgpu_exec *ex);

	/*
	 * The driver's version (cuDriverGetVersion) and how many devices it
	 * shows, either of them (the other NULL); each device's name, UUID
	 * and memory at once (device_info); its attributes one by one
	 * (cuDeviceGetAttribute's).
	 */
	int32_t (*driver_info)(struct pvgpu_exec *ex, int32_t *version,
			       int32_t *count);
	int32_t (*device_info)(struct pvgpu_exec *ex, int32_t dev,
			       struct pvgpu_exec_device *d);
	int32_t (*device_attribute)(struct pvgpu_exec *ex, int32_t dev,
				    int32_t attr, int32_t *value);

	/* Contexts: one per (session, device); made current by ctx_set. */
	int32_t (*ctx_create)(struct pvgpu_exec *ex, int32_t dev,
			      uint64_t *ctx);
	int32_t (*ctx_destroy)(struct pvgpu_exec *ex, uint64_t ctx);
	int32_t (*ctx_set)(struct pvgpu_exec *ex, uint64_t ctx);

	/* Memory (in the current context) */
	int32_t (*mem_alloc)(struct pvgpu_exec *ex, uint64_t size,
			     uint64_t *dptr);
	int32_t (*mem_free)(struct pvgpu_exec *ex, uint64_t dptr);
	int32_t (*mem_get_info)(struct pvgpu_exec *ex, uint64_t *free_bytes,
				uint64_t *total_bytes);
	/*
	 * Page-locked host memory the device can DMA from/to: new (staging,
	 * host_alloc), or an existing mapping pinned (a shared window,
	 * host_register).  host_release gives either back: host_alloc's
	 * freed, or with registered host_register's unpinned (the mapping
	 * stays the caller's).
	 */
	int32_t (*host_alloc)(struct pvgpu_exec *ex, size_t size, void **p);
	int32_t (*host_register)(struct pvgpu_exec *ex, void *p, size_t size);
	int32_t (*host_release)(struct pvgpu_exec *ex, void *p,
				bool registered);

	/*
	 * Every copy of device memory (struct pvgpu_exec_copy): from or to
	 * the host, device to device, between devices.  The helpers at the
	 * end of this file make one of each kind.
	 */
	int32_t (*copy)(struct pvgpu_exec *ex, const struct pvgpu_exec_copy *c);
	/* elem_size is 1, 2 or 4; count is in elements. */
	int32_t (*memset_async)(struct pvgpu_exec *ex, uint64_t dst,
				uint32_t value, uint32_t elem_size,
				uint64_t count, uint64_t stream);

	/* Streams */
	int32_t (*stream_create)(struct pvgpu_exec *ex, uint32_t flags,
				 int32_t priority, uint64_t *stream);
	int32_t (*stream_destroy)(struct pvgpu_exec *ex, uint64_t stream);
	/* Wait for stream's work, or with whole_ctx for all of the current
	 * context's (cuStreamSynchronize, cuCtxSynchronize). */
	int32_t (*synchronize)(struct pvgpu_exec *ex, bool whole_ctx,
			       uint64_t stream);
	/*
	 * Stream queries, stream waits, and events are generic driver calls
	 * (driver_call below, annotations.py GENERIC), the worker's own
	 * (pvgpu_exec_event_*() at the end of this file) as well as the
	 * guest's.
	 */

	/* Modules and kernels. */
	int32_t (*module_load)(struct pvgpu_exec *ex, const void *image,
			       size_t size, uint64_t *module);
	int32_t (*module_unload)(struct pvgpu_exec *ex, uint64_t module);
	/*
	 * A module's symbol by name: a kernel (PVGPU_SYM_FUNCTION, *value
	 * its function, as cuModuleGetFunction) or a __device__ variable
	 * (PVGPU_SYM_GLOBAL, *value its address and *size its bytes, as
	 * cuModuleGetGlobal; either may be NULL).
	 */
	int32_t (*module_symbol)(struct pvgpu_exec *ex, uint64_t module,
				 enum pvgpu_symbol_kind kind, const char *name,
				 uint64_t *value, uint64_t *size);
	/* The module's kernel names, NUL-terminated one after another in
	 * names (at most cap bytes: *len used); *count: how many the module
	 * has.  Optional: NULL says not supported. */
	int32_t (*module_function_names)(struct pvgpu_exec *ex, uint64_t module,
					 char *names, size_t cap, size_t *len,
					 uint32_t *count);
	/* Fills up to max entries; *count gets the real parameter count. */
	int32_t (*function_params)(struct pvgpu_exec *ex, uint64_t func,
				   struct pvgpu_param_info *layout,
				   uint32_t max, uint32_t *count);
	/*
	 * One launch; with launch->run, PVGPU_LAUNCH_RUN identical ones,
	 * one after another on its stream, as that many launches would make
	 * them, in fewer driver calls, where takes_runs says it makes
	 * them.  All of a run or none: an executor that will not take this
	 * one (not yet worth it) returns PVGPU_EXEC_DECLINED having launched
	 * nothing, and the session launches each.
	 */
	int32_t (*launch)(struct pvgpu_exec *ex,
			  const struct pvgpu_launch *launch);
	/* Clusters of this launch shape resident at once (cluster 0: the
	 * kernel's own dimensions). */
	int32_t (*max_clusters)(struct pvgpu_exec *ex, uint64_t func,
				const struct pvgpu_launch *shape,
				const uint32_t cluster[3], int32_t *clusters);

	/*
	 * Peers: several devices of this executor.  peer_attribute is
	 * cuDeviceGetP2PAttribute's attr of dev to peer, or with attr
	 * PVGPU_PEER_CAN_ACCESS cuDeviceCanAccessPeer's answer; peer_access
	 * is cuCtxEnablePeerAccess (enable) or cuCtxDisablePeerAccess of
	 * the current context to peer_ctx, the executor's own context.
	 * Their copies are PVGPU_COPY_PEER.
	 */
	int32_t (*peer_attribute)(struct pvgpu_exec *ex, int32_t attr,
				  int32_t dev, int32_t peer, int32_t *value);
	int32_t (*peer_access)(struct pvgpu_exec *ex, uint64_t peer_ctx,
			       bool enable, uint32_t flags);

	/*
	 * CUDA arrays (NULL: not supported).  Their copies are
	 * PVGPU_COPY_ARRAY; they are destroyed by the generic call
	 * (cuArrayDestroy).
	 */
	int32_t (*array_create)(struct pvgpu_exec *ex,
				const struct pvgpu_array_desc *d, uint64_t *array);

	/*
	 * Texture and surface objects (NULL: not supported): a texture
	 * object of d, or with surface a surface object of the array
	 * d->array (the rest of d unused).  obj is the driver's own value:
	 * kernels read it.  Destroyed with their context, or by the generic
	 * call (cuTexObjectDestroy, cuSurfObjectDestroy).
	 */
	int32_t (*tex_create)(struct pvgpu_exec *ex,
			      const struct pvgpu_tex_desc *d, bool surface,
			      uint64_t *obj);

	/*
	 * A TMA descriptor (cuTensorMapEncodeTiled/Im2col), checked by the
	 * worker: its 128 bytes in desc (NULL: not supported).
	 */
	int32_t (*tensor_map_encode)(struct pvgpu_exec *ex,
				     const struct pvgpu_tensor_map *m,
				     uint64_t desc[16]);

	/*
	 * The generic driver call (protocol/api/annotations.py GENERIC): f
	 * in the current context with a[], already checked by the worker
	 * (stream and handle arguments are the executor's own values, device
	 * ranges the session's, a result slot is non-zero when wanted).
	 * Results go back into their slots.  Every driver function whose
	 * work is only to look handles up and call the driver comes this way
	 * (events, stream queries, function attributes, occupancy, object
	 * destroys, ...), so an executor models them here by id.  A new
	 * handle (PVGPU_GA_HNEW) comes back as the executor's value in its
	 * slot.  NULL, or
	 * CUDA_ERROR_NOT_SUPPORTED for a function it cannot model: the guest
	 * gets that error.
	 */
	int32_t (*driver_call)(struct pvgpu_exec *ex,
			       const struct pvgpu_generic_fn *f, uint64_t *a);

	/*
	 * The driver's JIT in the current context, with the checked options
	 * in l, its logs filled on failure too (NULL: not supported).
	 * module NULL: link the inputs (cuLinkCreate ... cuLinkComplete);
	 * on success l->image is a malloc'd copy of the result.  Else
	 * cuModuleLoadDataEx of PTX: the image is l->data (one input of
	 * l->input_size[0] bytes, NUL-terminated), *module a module as
	 * module_load's.
	 */
	int32_t (*link)(struct pvgpu_exec *ex, struct pvgpu_link *l,
			uint64_t *module);

	/* The device address of registered host memory p (host_register).
	 * NULL: not supported. */
	int32_t (*host_device_pointer)(struct pvgpu_exec *ex, void *p,
				       uint64_t *dptr);

	/*
	 * Sharing with other sessions (workers) of the host, by kind:
	 * share_get gives the 64 bytes by which another worker reaches the
	 * object `value` names (MEM: the allocation at a device address, its
	 * CUDA IPC handle; EVENT: an event made CU_EVENT_INTERPROCESS; VMM:
	 * physical memory, a cuMemCreate handle); share_open reaches the
	 * object behind such bytes in the current context: MEM mapped there
	 * (flags: cuIpcOpenMemHandle's; ipc_close unmaps it), EVENT an event
	 * (cuEventDestroy frees it), VMM a handle and *size (cuMemRelease
	 * frees it).  NULL: not supported.
	 */
	int32_t (*share_get)(struct pvgpu_exec *ex, enum pvgpu_ipc_kind kind,
			     uint64_t value, uint8_t handle[64]);
	int32_t (*share_open)(struct pvgpu_exec *ex, enum pvgpu_ipc_kind kind,
			      const uint8_t handle[64], uint32_t flags,
			      uint64_t *value, uint64_t *size);
	int32_t (*ipc_close)(struct pvgpu_exec *ex, uint64_t dptr);

	/*
	 * Explicit graph nodes (NULL: not supported).  graph and exec are
	 * the executor's handles (driver_call made them), deps and nodes its
	 * node handles, every one checked by the worker to belong to graph.
	 * graph_kernel_node_set: in the graph (exec 0) or in an executable
	 * graph made from it.
	 */
	int32_t (*graph_add_node)(struct pvgpu_exec *ex, uint64_t graph,
				  const struct pvgpu_graph_node *n,
				  const uint64_t *deps, uint32_t ndeps,
				  uint64_t *node);
	int32_t (*graph_kernel_node_set)(struct pvgpu_exec *ex, uint64_t exec,
					 uint64_t node,
					 const struct pvgpu_launch *l);
	int32_t (*graph_add_deps)(struct pvgpu_exec *ex, uint64_t graph,
				  const uint64_t *from, const uint64_t *to,
				  uint32_t n);
	/* The graph's nodes (made any way: captured, cloned, added) and
	 * their CUgraphNodeTypes, the first max of them; *count: all. */
	int32_t (*graph_nodes)(struct pvgpu_exec *ex, uint64_t graph,
			       uint64_t *nodes, uint32_t *types, uint32_t max,
			       uint64_t *count);
	/* cuGraphExecUpdate: *result a CUgraphExecUpdateResult, *error_node
	 * the graph's node it names (0: none) and *error_type its type. */
	int32_t (*graph_exec_update)(struct pvgpu_exec *ex, uint64_t exec,
				     uint64_t graph, uint32_t *result,
				     uint64_t *error_node, uint32_t *error_type);
	/*
	 * Stream capture queries (NULL: not supported).  capture_info: the
	 * CUstreamCaptureStatus of stream; while a capture is under way its
	 * id, the executor's graph being built, and the nodes the next
	 * captured work depends on with their types and edge data (a
	 * CUgraphEdgeData as a little-endian u64), the first max of them
	 * (*count: all).  capture_deps: add to (flags 0) or replace (1)
	 * that set; edges NULL: default edges.
	 */
	int32_t (*capture_info)(struct pvgpu_exec *ex, uint64_t stream,
				uint32_t *status, uint64_t *id, uint64_t *graph,
				uint64_t *nodes, uint32_t *types, uint64_t *edges,
				uint32_t max, uint64_t *count);
	int32_t (*capture_deps)(struct pvgpu_exec *ex, uint64_t stream,
				const uint64_t *nodes, const uint64_t *edges,
				uint32_t n, uint32_t flags);
	/*
	 * capture_to_graph: cuStreamBeginCaptureToGraph of stream into the
	 * executor's graph, after nodes (edges NULL: default edges), mode a
	 * CUstreamCaptureMode.  clone_node: the node of clone that is node
	 * (of the graph clone was cloned from), as cuGraphNodeFindInClone;
	 * with n, a copy node whose host end becomes n's (a staged copy's
	 * own buffer).  NULL: not supported.
	 */
	int32_t (*capture_to_graph)(struct pvgpu_exec *ex, uint64_t stream,
				    uint64_t graph, const uint64_t *nodes,
				    const uint64_t *edges, uint32_t n,
				    uint32_t mode);
	int32_t (*clone_node)(struct pvgpu_exec *ex, uint64_t clone,
			      uint64_t node, const struct pvgpu_graph_node *n,
			      uint64_t *out);
	/*
	 * Graph memory (NULL: not supported): cuMemAllocAsync of size bytes
	 * (size 0: cuMemFreeAsync of dptr) on a capturing stream, *dptr the
	 * address.  Its attributes and trim are generic calls
	 * (cuDeviceGetGraphMemAttribute, ...).
	 */
	int32_t (*mem_async)(struct pvgpu_exec *ex, uint64_t stream,
			     uint64_t size, uint64_t *dptr);
	/* cuGraphConditionalHandleCreate in graph for the current context
	 * (NULL: not supported); *handle the driver's value. */
	int32_t (*cond_handle)(struct pvgpu_exec *ex, uint64_t graph,
			       uint32_t default_value, uint32_t flags,
			       uint64_t *handle);

	/*
	 * Suspend or resume a worker (NULL: this executor cannot).  It
	 * runs in a short-lived checkpointer process the supervisor forks,
	 * never in the worker nor the supervisor, and acts on the worker by
	 * its pid.  A checkpoint leaves it locked (its driver calls block),
	 * its device memory copied into its host memory and its GPU
	 * resources released, having waited at most timeout_ms for a call
	 * it was in to return; a restore puts it back and unlocks it.
	 * touched(arg) is called once the worker has been acted on: a
	 * checkpointer killed before that left the worker as it was, one
	 * killed after it left it in a state nobody knows.  0; -1 (a line
	 * in err) when it failed and the worker is as it was; -2 when it
	 * failed and nobody knows.
	 */
	int (*checkpoint)(pid_t pid, bool restore, uint64_t timeout_ms,
			  void (*touched)(void *arg), void *arg,
			  char *err, size_t errlen);
	/*
	 * In the worker, where it is idle (between calls, or waiting for a
	 * resume): do what a checkpointer asked of this process, for an
	 * executor that needs the worker's own hands for it (the sim).
	 * NULL: nothing to do.
	 */
	void (*idle_point)(struct pvgpu_exec *ex);
};

extern const struct pvgpu_executor_ops pvgpu_exec_cuda;

/* Where plugins (exec-NAME.so) are looked for when the daemon is installed. */
#ifndef PVGPU_EXECUTOR_DIR
#define PVGPU_EXECUTOR_DIR "/usr/lib/pvgpud"
#endif

/* The plugin directory next to the running binary (../lib/pvgpud), else
 * PVGPU_EXECUTOR_DIR. */
void pvgpu_executor_default_dir(char *dir, size_t len);

/*
 * An executor by its command-line name: built in, or DIR/exec-NAME.so.
 * NULL and one line in err when there is none.
 */
const struct pvgpu_executor_ops *pvgpu_executor_find(const char *name,
						     const char *dir,
						     char *err, size_t errlen);

/* One line per executor this build and DIR offer (--executor help). */
void pvgpu_executor_list(FILE *out, const char *dir);

/*
 * The worker's own events and stream queries (the scheduler's marks, the
 * window's slots, staging), made through the executor's driver_call with
 * the same generic functions the guest's calls use: an executor models
 * each once, by its id.  The values are the executor's own (not a
 * session's ids); CUDA_ERROR_NOT_SUPPORTED without driver_call.
 */
int32_t pvgpu_exec_event_create(const struct pvgpu_executor_ops *ops,
				struct pvgpu_exec *ex, uint32_t flags,
				uint64_t *event);
int32_t pvgpu_exec_event_destroy(const struct pvgpu_executor_ops *ops,
				 struct pvgpu_exec *ex, uint64_t event);
int32_t pvgpu_exec_event_record(const struct pvgpu_executor_ops *ops,
				struct pvgpu_exec *ex, uint64_t event,
				uint64_t stream);
int32_t pvgpu_exec_event_synchronize(const struct pvgpu_executor_ops *ops,
				     struct pvgpu_exec *ex, uint64_t event);
/* CUDA_SUCCESS when done, CUDA_ERROR_NOT_READY while not (both queries). */
int32_t pvgpu_exec_event_query(const struct pvgpu_executor_ops *ops,
			       struct pvgpu_exec *ex, uint64_t event);
int32_t pvgpu_exec_stream_query(const struct pvgpu_executor_ops *ops,
				struct pvgpu_exec *ex, uint64_t stream);
/*
 * Queue on stream, after its work, the device's 32-bit write of value at
 * dptr (4-byte aligned: registered host memory's device address,
 * host_device_pointer): cuStreamWriteValue32 with its default memory
 * barrier.
 */
int32_t pvgpu_exec_stream_write_value(const struct pvgpu_executor_ops *ops,
				      struct pvgpu_exec *ex, uint64_t stream,
				      uint64_t dptr, uint32_t value);

/* One copy of each kind through the executor's copy. */
static inline int32_t pvgpu_exec_host_copy(const struct pvgpu_executor_ops *ops,
					   struct pvgpu_exec *ex,
					   enum pvgpu_copy_kind kind,
					   uint64_t dptr, void *host,
					   uint64_t size, bool queued,
					   uint64_t stream)
{
	struct pvgpu_exec_copy c = {
		.kind = kind, .queued = queued, .stream = stream,
		.host = host, .size = size,
	};

	if (kind == PVGPU_COPY_HTOD)
		c.dst = dptr;
	else
		c.src = dptr;
	return ops->copy(ex, &c);
}

static inline int32_t pvgpu_exec_htod(const struct pvgpu_executor_ops *ops,
				      struct pvgpu_exec *ex, uint64_t dst,
				      const void *host, uint64_t size,
				      bool queued, uint64_t stream)
{
	return pvgpu_exec_host_copy(ops, ex, PVGPU_COPY_HTOD, dst, (void *)host,
				    size, queued, stream);
}

static inline int32_t pvgpu_exec_dtoh(const struct pvgpu_executor_ops *ops,
				      struct pvgpu_exec *ex, void *host,
				      uint64_t src, uint64_t size,
				      bool queued, uint64_t stream)
{
	return pvgpu_exec_host_copy(ops, ex, PVGPU_COPY_DTOH, src, host, size,
				    queued, stream);
}

static inline int32_t pvgpu_exec_dtod(const struct pvgpu_executor_ops *ops,
				      struct pvgpu_exec *ex, uint64_t dst,
				      uint64_t src, uint64_t size,
				      uint64_t stream)
{
	struct pvgpu_exec_copy c = {
		.kind = PVGPU_COPY_DTOD, .queued = true, .stream = stream,
		.dst = dst, .src = src, .size = size,
	};

	return ops->copy(ex, &c);
}

static inline int32_t pvgpu_exec_peer(const struct pvgpu_executor_ops *ops,
				      struct pvgpu_exec *ex, uint64_t dst,
				      uint64_t dst_ctx, uint64_t src,
				      uint64_t src_ctx, uint64_t size,
				      bool queued, uint64_t stream)
{
	struct pvgpu_exec_copy c = {
		.kind = PVGPU_COPY_PEER, .queued = queued, .stream = stream,
		.dst = dst, .src = src, .dst_ctx = dst_ctx, .src_ctx = src_ctx,
		.size = size,
	};

	return ops->copy(ex, &c);
}

#endif /* PVGPU_EXECUTOR_H */
