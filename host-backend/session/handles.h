/*
 * handles.h - what a session owns: handles for contexts, streams and
 * events, and ranges of device memory.  Every handle and pointer a guest
 * sends is looked up here before an executor sees it, so a session can never
 * name another session's objects (and, in one process per session, there
 * are none to name anyway: this is defence in depth and clear errors).
 */
#ifndef PVGPU_HANDLES_H
#define PVGPU_HANDLES_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

enum pvgpu_handle_kind { H_FREE, H_CTX, H_STREAM, H_EVENT, H_MODULE, H_FUNC,
			H_GRAPH, H_GRAPH_EXEC, H_ARRAY, H_TEX, H_SURF, H_GRAPH_NODE,
			H_LINK,		/* a linked image (data, ndata bytes) */
			H_MEM,		/* physical memory (vmm.c): charged bytes */
			H_VARANGE,	/* reserved addresses: base, size in charged */
			H_COND		/* a conditional handle: module its graph */ };

struct pvgpu_handle {
	enum pvgpu_handle_kind kind;
	uint32_t gen;			/* bumps on reuse: stale ids miss */
	uint64_t exec_handle;		/* the executor's own value */
	uint64_t ctx;			/* owning context's id (all but contexts) */
	uint64_t module;		/* owning module's id (functions); a
					 * graph node's graph id; H_MEM:
					 * PVGPU_MEM_IMPORTED (ipc.c) */
#define PVGPU_MEM_IMPORTED 1		/* another session's memory: its size in
					 * charged, but charged to the exporter */
	int32_t device;			/* contexts, modules; a graph
					 * node's CUgraphNodeType */
	uint64_t charged;		/* modules: bytes charged to the VM */
	uint32_t flags;			/* PVGPU_H_* */
#define PVGPU_H_QUIET 1u		/* modules and their functions: no
					 * kernel of it prints (output.c) */
	void *data;			/* owned extra state, freed with the handle */
	uint32_t ndata;			/* entries in data */
};

/*
 * Live handles a session may hold: the policy's handles, this by default;
 * at most what an id can index.  Each costs the worker an entry here and
 * the executor (the driver) what the object is.
 */
#define PVGPU_HANDLES_PER_SESSION	65536u
#define PVGPU_HANDLES_MAX		((1u << 24) - 1)

struct pvgpu_handles {
	struct pvgpu_handle *v;
	uint32_t n, cap;
	uint32_t live;			/* entries not H_FREE */
	/* The VM's handles (accounting.h), read at each add: a reload
	 * applies at once.  NULL: PVGPU_HANDLES_MAX. */
	const _Atomic uint32_t *max;
	uint64_t refused;		/* adds refused for max, not yet told */
};

/*
 * Room for n more handles under max: 0, else -1 (counted in refused).
 * A handler whose driver call makes objects asks before making them,
 * where a handle it then could not add would leave one behind.
 */
int pvgpu_handles_room(struct pvgpu_handles *t, uint32_t n);
/*
 * A new handle of kind; returns its id (never 0), or 0 when the session
 * holds max handles already (counted in refused) or out of memory.
 */
uint64_t pvgpu_handle_add(struct pvgpu_handles *t, enum pvgpu_handle_kind kind,
			  uint64_t exec_handle, uint64_t ctx, int32_t device);
/* The live handle with this id and kind, or NULL. */
struct pvgpu_handle *pvgpu_handle_get(struct pvgpu_handles *t, uint64_t id,
				      enum pvgpu_handle_kind kind);
/* The id of a live entry found by iterating t->v. */
uint64_t pvgpu_handle_id(const struct pvgpu_handles *t,
			 const struct pvgpu_handle *h);
void pvgpu_handle_del(struct pvgpu_handles *t, uint64_t id);
/* Free one entry found by iterating t->v. */
void pvgpu_handle_release(struct pvgpu_handles *t, struct pvgpu_handle *h);
void pvgpu_handles_free(struct pvgpu_handles *t);

struct pvgpu_alloc {
	uint64_t base, size;
	uint64_t ctx;
	uint64_t module;		/* a module's global: not for mem_free */
#define PVGPU_ALLOC_HOSTMAP UINT64_MAX	/* module: mapped window memory (hostmap.c) */
#define PVGPU_ALLOC_VMM (UINT64_MAX - 1) /* module: a cuMemMap mapping (vmm.c) */
#define PVGPU_ALLOC_IPC (UINT64_MAX - 2) /* module: another session's, opened (ipc.c) */
#define PVGPU_ALLOC_GRAPH (UINT64_MAX - 3) /* module: a graph allocation node's (capture.c) */
#define PVGPU_ALLOC_MANAGED (UINT64_MAX - 4) /* module: managed memory in the window (managed.c), charged */
	int32_t device;
	int32_t unmapped;		/* graph memory freed outside any graph:
					 * uncharged until a launch (capture.c) */
};

/* Do its bytes count against the VM's quota now?  cuMemAlloc's, managed
 * memory's and a graph allocation node's while mapped; not module
 * globals, mapped host memory, IPC imports, nor cuMemMap mappings (their
 * physical memory is charged instead, vmm.c). */
static inline int pvgpu_alloc_charged(const struct pvgpu_alloc *a)
{
	return !a->module || a->module == PVGPU_ALLOC_MANAGED ||
	       (a->module == PVGPU_ALLOC_GRAPH && !a->unmapped);
}

/* Sorted by base, so a lookup is a binary search. */
struct pvgpu_allocs {
	struct pvgpu_alloc *v;
	size_t n, cap;
	int graph_unmapped;		/* some may be unmapped: a launch looks */
};

int pvgpu_alloc_add(struct pvgpu_allocs *t, const struct pvgpu_alloc *a);
/* The allocation that starts exactly at base, or NULL. */
struct pvgpu_alloc *pvgpu_alloc_find(struct pvgpu_allocs *t, uint64_t base);
/* The allocation holding all of [ptr, ptr+len) (len >= 1), or NULL; for
 * cuMemMap mappings, the first of those that hold it without a gap. */
struct pvgpu_alloc *pvgpu_alloc_range(struct pvgpu_allocs *t, uint64_t ptr,
				      uint64_t len);
void pvgpu_alloc_del(struct pvgpu_allocs *t, struct pvgpu_alloc *a);
void pvgpu_allocs_free(struct pvgpu_allocs *t);

#endif /* PVGPU_HANDLES_H */
