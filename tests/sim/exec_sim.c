/*
 * exec_sim.c - the "sim" executor: a simulated device in host memory.
 *
 * A CI fixture for machines without a GPU.  It keeps the driver's
 * bookkeeping honest (address ranges, contexts, streams, events, capacity,
 * error codes) so that a worker bug shows up here the way it would on a
 * real GPU, but it runs every operation at once, on the calling thread.
 *
 * Device memory is calloc'd host memory behind fake device addresses.  Each
 * allocation sits in its own address range with an unmapped guard gap after
 * it, and addresses are not reused until the device's address window wraps,
 * so off-by-one overruns and use-after-free show up as
 * CUDA_ERROR_INVALID_VALUE instead of silently touching a neighbour.
 *
 * Modules are parsed by sim_module.c; a launch runs the kernel's CPU twin,
 * found by name in the plugins PVGPU_SIM_TWINS names (see sim_twins.h).  A
 * twin that touches memory outside the launching context's allocations
 * poisons the context as a GPU fault would: every later call in it returns
 * CUDA_ERROR_ILLEGAL_ADDRESS until it is destroyed.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#include "clock.h"
#include "exec_sim.h"
#include "sim_module.h"
#include "sim_twins.h"
#include "pvgpu_generic.h"

#define SIM_MAX_DEVICES		8
#define SIM_DEFAULT_MEMORY_MB	16384
#define SIM_MAX_MEMORY_MB	131072		/* half a device window */
#define SIM_DRIVER_VERSION	13000
#define SIM_DEVICE_NAME		"pvgpu simulated device"
#define SIM_MAX_PEERS		8	/* CUDA_ERROR_TOO_MANY_PEERS past it */

/* Kernel launch limits of an sm_90 part. */
#define SIM_MAX_BLOCK_THREADS	1024u
#define SIM_MAX_BLOCK_XY	1024u
#define SIM_MAX_BLOCK_Z		64u
#define SIM_MAX_GRID_X		2147483647u
#define SIM_MAX_GRID_YZ		65535u
#define SIM_DEFAULT_SHARED	49152		/* without opting in */
#define SIM_MAX_SHARED_OPTIN	232448		/* 227 KiB */
#define SIM_DEFAULT_NUM_REGS	32
#define SIM_SHARED_GARBAGE	0xcd		/* uninitialised shared memory */

/* Fake device addresses: one 256 GiB window per device. */
#define SIM_ADDR_BASE		0x7e0000000000ULL
#define SIM_ADDR_WINDOW		(1ULL << 38)
#define SIM_MAX_NODES		16	/* PVGPU_SIM_NODE 0..15, below SIM_ADDR_BASE */
#define SIM_MAX_OBJECT_BYTES	(1l << 40)	/* PVGPU_SIM_CONTEXT/STREAM_BYTES */
#define SIM_ALLOC_ALIGN		256ULL
#define SIM_GUARD_GAP		4096ULL

/* Handles carry their kind in the top bits so they never look alike. */
#define SIM_HANDLE_KIND_SHIFT	48
#define SIM_HANDLE_SERIAL_MASK	((1ULL << SIM_HANDLE_KIND_SHIFT) - 1)

enum sim_kind {
	SIM_CTX = 1,
	SIM_STREAM,
	SIM_EVENT,
	SIM_MODULE,
	SIM_FUNCTION,
	SIM_GRAPH,
	SIM_GRAPH_EXEC,
	SIM_ARRAY,
	SIM_TEX,	/* texture and surface objects: opaque values, no fetches */
	SIM_SURF,
	SIM_GRAPH_NODE,		/* not an object: a handle inside a graph */
};

#define SIM_CAP_DEPS	64	/* a capture's dependency set, at most */

/*
 * A graph as the sim records it: the launches captured from a stream, or
 * the nodes added one by one (cuGraphAdd*Node), each with the nodes before
 * it.  An executable graph holds them in the order they run.
 */
struct sim_graph_launch {
	uint32_t type;			/* CUgraphNodeType */
	uint64_t node;			/* its handle; 0: captured */
	struct pvgpu_graph_node n;	/* memset and memcpy fields */
	uint64_t *deps;			/* node handles before it */
	size_t ndeps;
	struct pvgpu_launch l;		/* params, attrs point into these */
	unsigned char *params;
	struct pvgpu_launch_attr attrs[PVGPU_MAX_LAUNCH_ATTRS];
};

/* Everything that has a handle: contexts, streams, events, modules, ... */
struct sim_module;

struct sim_obj {
	uint64_t handle;
	enum sim_kind kind;
	struct sim_obj *ctx;		/* owning context; itself for a context */
	union {
		struct {
			int32_t dev;
			bool poisoned;	/* a kernel faulted in it */
			int32_t fault;	/* what it reports from then on */
			/* Contexts whose memory its kernels may reach. */
			struct sim_obj *peers[SIM_MAX_PEERS];
			unsigned int npeers;
		} ctx;
		struct {
			struct sim_module *m;
		} module;
		struct {
			struct sim_obj *module;
			const struct sim_kernel *k;	/* in the module's image */
			const struct pvgpu_sim_twin *twin;	/* NULL: none */
			int32_t max_dyn_shared;
			int32_t carveout;
			int32_t cluster[3];
			int32_t cluster_nonportable;
			int32_t cluster_policy;
			bool warned;	/* "no CPU twin" said once */
		} func;
		struct {
			uint32_t flags;
			int32_t priority;
			struct sim_obj *capture;	/* graph being captured */
			/* What the next captured node depends on. */
			uint64_t cap_deps[SIM_CAP_DEPS];
			size_t ncap;
			bool to_graph;	/* cuStreamBeginCaptureToGraph's */
			CUaccessPolicyWindow window;	/* cuStreamSetAttribute */
			uint32_t sync_policy;
		} stream;
		struct {
			struct sim_graph_launch *v;
			size_t n, cap;
			uint64_t origin;	/* cloned from (cuGraphClone) */
		} graph;			/* SIM_GRAPH and SIM_GRAPH_EXEC */
		struct {
			unsigned char *data;
			uint64_t row;	/* bytes per row */
			uint64_t rows, slices;
			uint32_t flags;
		} array;
		struct {
			uint32_t flags;
			bool recorded;
			uint64_t ns;	/* CLOCK_MONOTONIC at the last record */
		} event;
	} u;
};

struct sim_alloc {
	uint64_t addr;
	uint64_t size;
	unsigned char *data;
	struct sim_obj *ctx;
	int32_t dev;
	bool module;			/* a module's variable: not mem_free'able */
	uint64_t phys;			/* a cuMemMap mapping of this physical
					 * memory (its data is the phys's); 0 none */
	/* IPC: data is a shared mapping of a memfd, not malloc'd, and ipc
	 * the handle naming it ("": none).  The exporter (ipc_owner) keeps
	 * the memfd open in ipc_fd; sim_ipc_open says why a memfd. */
	char ipc[48];
	bool ipc_owner;
	int ipc_fd;
	unsigned char *saved;		/* checkpointed: data's host copy */
	/* A graph allocation node's: freed outside any graph (or by a free
	 * node's run) it is unmapped, and a launch of a graph with its
	 * allocation node maps it again; the sim keeps its bytes meanwhile. */
	bool graph, unmapped;
};

/* Physical memory of cuMemCreate, and address ranges of cuMemAddressReserve. */
struct sim_phys {
	uint64_t handle;
	uint64_t size;
	unsigned char *data;		/* malloc'd, or mmap'd where shared */
	int32_t dev;
	unsigned int refs, maps;	/* handles held, mappings made */
	bool shared;			/* data in a memfd (sim_vmm_export/import) */
	int fd;				/* exported: the memfd, else -1 */
	unsigned char *saved;		/* checkpointed: data's host copy */
};

struct sim_range {
	uint64_t base, size;
};

/* A loaded module: its parsed image and where its variables live. */
struct sim_module {
	struct sim_image *img;
	uint64_t *var_addr;		/* per img->vars[i] */
	uint64_t *funcs;		/* per img->kernels[i]; 0 until asked */
};

/* Page-locked host memory, as the executor's caller sees it. */
struct sim_host {
	void *p;
	size_t size;
	struct sim_obj *ctx;
	bool registered;		/* host_register, not host_alloc */
};

struct pvgpu_exec {
	struct pvgpu_exec_config cfg;
	/* The last run of launches seen (launch_run): function, stream. */
	uint64_t run_func, run_stream;
	bool have_cfg;
	int32_t ndev;
	uint64_t total_bytes;		/* per device */
	uint64_t own_used[SIM_MAX_DEVICES];
	uint64_t next_addr[SIM_MAX_DEVICES];
	/* PVGPU_SIM_NO_PEER: pairs of devices without peer access. */
	bool no_peer[SIM_MAX_DEVICES][SIM_MAX_DEVICES];
	uint32_t node;			/* PVGPU_SIM_NODE */
	/* PVGPU_SIM_CONTEXT_BYTES, PVGPU_SIM_STREAM_BYTES (device_info). */
	uint64_t ctx_bytes, stream_bytes;
	/* Graph memory: allocation nodes' bytes (made at once, kept). */
	uint64_t graph_mem, graph_mem_high;
	uint64_t addr_base;		/* where this node's device windows start */

	/* Live objects, sorted by handle. */
	struct sim_obj **objs;
	size_t nobjs, objs_cap;
	uint64_t serial;

	/* Live device allocations, sorted by address. */
	struct sim_alloc *allocs;
	size_t nallocs, allocs_cap;

	struct sim_host *hosts;
	size_t nhosts, hosts_cap;

	/* Virtual memory management (sim_vmm_call). */
	struct sim_phys *phys;
	size_t nphys, phys_cap;
	uint64_t next_phys;
	unsigned int ipc_serial;	/* IPC exports made: their memfds' names */
	struct sim_range *ranges;
	size_t nranges, ranges_cap;

	struct sim_obj *cur;		/* current context, or NULL */

	/* Decompressors for fatbinary entries, loaded on first need. */
	struct sim_codecs codecs;

	/* CPU twins from the PVGPU_SIM_TWINS plugins. */
	void **twin_libs;
	size_t ntwin_libs, twin_libs_cap;
	const struct pvgpu_sim_twin **twins;
	size_t ntwins, twins_cap;

	/*
	 * Device printf and assert messages of the twins, held until the
	 * program synchronises, as the driver holds its printf FIFO; then
	 * written to this process's stdout and stderr, which the worker
	 * delivers to the guest.  What does not fit is lost, as on a GPU.
	 */
	struct {
		char *buf;
		size_t len;
	} out[2];			/* [0] stdout, [1] stderr */

	/* What the generic driver call models (cuCtxSetLimit, ...). */
	uint64_t limits[CU_LIMIT_MAX];
	int32_t cache_config;

	/* Checkpointed (sim_idle_point): device memory in host copies. */
	bool locked;
};

/* cudaLimitPrintfFifoSize's default. */
#define SIM_PRINTF_FIFO		(1u << 20)

/* ------------------------------------------------------------------ */
/* helpers */

/* A line for the operator: the daemon's log, never the guest's stderr. */
static void sim_diag(const struct pvgpu_exec *ex, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void sim_diag(const struct pvgpu_exec *ex, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	n = snprintf(line, sizeof(line), "pvgpud sim: ");
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	n = (int)strlen(line);
	line[n++] = '\n';
	if (write(ex->cfg.log_fd > 0 ? ex->cfg.log_fd : 2, line, (size_t)n) < 0) {
		/* Nowhere else to say it. */
	}
}

/* Write what the twins printed to stdout/stderr: a synchronisation point. */
static void sim_output_flush(struct pvgpu_exec *ex)
{
	FILE *to[2] = { stdout, stderr };

	for (int i = 0; i < 2; i++) {
		if (!ex->out[i].len)
			continue;
		fwrite(ex->out[i].buf, 1, ex->out[i].len, to[i]);
		fflush(to[i]);
		ex->out[i].len = 0;
	}
}

/* Append to a device output buffer; -1 when it is full (lost). */
static int sim_output_vadd(struct pvgpu_exec *ex, int which, const char *fmt,
			   va_list ap)
{
	char line[4096];
	int n = vsnprintf(line, sizeof(line), fmt, ap);

	if (n < 0)
		return -1;
	if ((size_t)n >= sizeof(line))
		n = (int)sizeof(line) - 1;
	if (!ex->out[which].buf) {
		ex->out[which].buf = malloc(SIM_PRINTF_FIFO);
		if (!ex->out[which].buf)
			return -1;
	}
	if ((size_t)n > SIM_PRINTF_FIFO - ex->out[which].len)
		return -1;
	memcpy(ex->out[which].buf + ex->out[which].len, line, (size_t)n);
	ex->out[which].len += (size_t)n;
	return n;
}

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
	size_t ncap;
	void *p;

	if (need <= *cap)
		return 0;
	ncap = *cap ? *cap * 2 : 16;
	while (ncap < need)
		ncap *= 2;
	p = realloc(*arr, ncap * elem);
	if (!p)
		return -1;
	*arr = p;
	*cap = ncap;
	return 0;
}

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

/* Parse an integer environment variable in [min, max]; -1 if malformed. */
static int env_long(const char *name, long def, long min, long max,
		    long *out, char *err, size_t errlen)
{
	const char *s = getenv(name);
	char *end;
	long v;

	if (!s || !*s) {
		*out = def;
		return 0;
	}
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < min || v > max) {
		snprintf(err, errlen, "%s=%s: expected a number from %ld to %ld",
			 name, s, min, max);
		return -1;
	}
	*out = v;
	return 0;
}

/*
 * PVGPU_SIM_NO_PEER: device pairs that cannot reach each other, as
 * "0-1,2-3" (each pair both ways), the way two GPUs on different PCIe root
 * complexes without NVLink behave: no peer access, copies between them
 * still work (staged by the driver).
 */
static int parse_no_peer(struct pvgpu_exec *ex, char *err, size_t errlen)
{
	const char *s = getenv("PVGPU_SIM_NO_PEER");
	const char *p = s;

	if (!s || !*s)
		return 0;
	for (;;) {
		char *end;
		long a, b;

		errno = 0;
		a = strtol(p, &end, 10);
		if (errno || end == p || *end != '-' || a < 0 || a >= SIM_MAX_DEVICES)
			break;
		p = end + 1;
		b = strtol(p, &end, 10);
		if (errno || end == p || b < 0 || b >= SIM_MAX_DEVICES)
			break;
		ex->no_peer[a][b] = ex->no_peer[b][a] = true;
		if (!*end)
			return 0;
		if (*end != ',')
			break;
		p = end + 1;
	}
	snprintf(err, errlen, "PVGPU_SIM_NO_PEER=%s: expected device pairs "
		 "like 0-1,2-3 (devices 0..%d)", s, SIM_MAX_DEVICES - 1);
	return -1;
}

/* ------------------------------------------------------------------ */
/* handle table */

/* Index of the first object whose handle is >= h. */
static size_t obj_lower_bound(struct pvgpu_exec *ex, uint64_t h)
{
	size_t lo = 0, hi = ex->nobjs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (ex->objs[mid]->handle < h)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static struct sim_obj *obj_find(struct pvgpu_exec *ex, uint64_t h,
				enum sim_kind kind)
{
	size_t i;

	if (h >> SIM_HANDLE_KIND_SHIFT != (uint64_t)kind)
		return NULL;
	i = obj_lower_bound(ex, h);
	if (i < ex->nobjs && ex->objs[i]->handle == h)
		return ex->objs[i];
	return NULL;
}

static struct sim_obj *obj_new(struct pvgpu_exec *ex, enum sim_kind kind,
			       struct sim_obj *ctx)
{
	struct sim_obj *o;
	size_t i;

	if (ex->serial >= SIM_HANDLE_SERIAL_MASK)
		return NULL;
	if (grow((void **)&ex->objs, &ex->objs_cap, ex->nobjs + 1,
		 sizeof(*ex->objs)))
		return NULL;
	o = calloc(1, sizeof(*o));
	if (!o)
		return NULL;
	o->handle = ((uint64_t)kind << SIM_HANDLE_KIND_SHIFT) | ++ex->serial;
	o->kind = kind;
	o->ctx = ctx ? ctx : o;

	i = obj_lower_bound(ex, o->handle);
	memmove(&ex->objs[i + 1], &ex->objs[i],
		(ex->nobjs - i) * sizeof(*ex->objs));
	ex->objs[i] = o;
	ex->nobjs++;
	return o;
}

/* Host memory an object owns besides itself (device memory is apart). */
static void obj_release(struct sim_obj *o)
{
	struct sim_module *m;

	if (o->kind == SIM_GRAPH || o->kind == SIM_GRAPH_EXEC) {
		for (size_t i = 0; i < o->u.graph.n; i++) {
			free(o->u.graph.v[i].params);
			free(o->u.graph.v[i].deps);
		}
		free(o->u.graph.v);
		o->u.graph.v = NULL;
		o->u.graph.n = 0;
		return;
	}
	if (o->kind == SIM_ARRAY) {
		free(o->u.array.data);
		o->u.array.data = NULL;
		return;
	}
	if (o->kind != SIM_MODULE || !o->u.module.m)
		return;
	m = o->u.module.m;
	sim_image_free(m->img);
	free(m->var_addr);
	free(m->funcs);
	free(m);
	o->u.module.m = NULL;
}

static void obj_free(struct pvgpu_exec *ex, struct sim_obj *o)
{
	size_t i = obj_lower_bound(ex, o->handle);

	if (i < ex->nobjs && ex->objs[i] == o) {
		memmove(&ex->objs[i], &ex->objs[i + 1],
			(ex->nobjs - i - 1) * sizeof(*ex->objs));
		ex->nobjs--;
	}
	obj_release(o);
	free(o);
}

/* The current context, usable: CUDA_SUCCESS or why not (no executor:
 * an invalid value, as every call says). */
static void sim_wait_unlocked(struct pvgpu_exec *ex);

static int32_t ctx_check(struct pvgpu_exec *ex)
{
	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	sim_wait_unlocked(ex);	/* checkpointed: calls block */
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	/* A fault is sticky: the context is good for nothing but destroy. */
	if (ex->cur->u.ctx.poisoned)
		return ex->cur->u.ctx.fault;
	return CUDA_SUCCESS;
}

/*
 * What a call on one object checks first, in this order: the executor and
 * the call's own arguments (bad: they are not fine), the current context,
 * then the object get finds for handle.  NULL, with *rc saying why, when
 * one of them fails.
 */
static struct sim_obj *ctx_obj(struct pvgpu_exec *ex, bool bad, uint64_t handle,
			       struct sim_obj *(*get)(struct pvgpu_exec *,
						      uint64_t),
			       int32_t *rc)
{
	struct sim_obj *o;

	*rc = bad ? CUDA_ERROR_INVALID_VALUE : ctx_check(ex);
	if (*rc)
		return NULL;
	o = get(ex, handle);
	if (!o)
		*rc = CUDA_ERROR_INVALID_HANDLE;
	return o;
}

/* A stream of the current context; NULL if the handle is not one. */
static struct sim_obj *stream_get(struct pvgpu_exec *ex, uint64_t stream)
{
	struct sim_obj *s = obj_find(ex, stream, SIM_STREAM);

	return s && s->ctx == ex->cur ? s : NULL;
}

/* A stream argument: 0 is the current context's default stream. */
static int32_t check_stream(struct pvgpu_exec *ex, uint64_t stream)
{
	struct sim_obj *s;
	int32_t rc;

	if (!stream)
		return ctx_check(ex);
	s = ctx_obj(ex, false, stream, stream_get, &rc);
	if (!s)
		return rc;
	/* The sim records launches only; anything else cannot be captured. */
	if (s->u.stream.capture)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	return CUDA_SUCCESS;
}

/* The graph a stream is capturing into, or NULL. */
static struct sim_obj *capturing(struct pvgpu_exec *ex, uint64_t stream)
{
	struct sim_obj *s = stream ? obj_find(ex, stream, SIM_STREAM) : NULL;

	return s && s->ctx == ex->cur ? s->u.stream.capture : NULL;
}

/* Append a copy of a launch to a graph. */
static int32_t graph_add(struct sim_obj *g, const struct pvgpu_launch *l)
{
	struct sim_graph_launch *e;

	if (g->u.graph.n == g->u.graph.cap) {
		size_t cap = g->u.graph.cap ? 2 * g->u.graph.cap : 8;
		void *v = realloc(g->u.graph.v, cap * sizeof(*g->u.graph.v));

		if (!v)
			return CUDA_ERROR_OUT_OF_MEMORY;
		g->u.graph.v = v;
		g->u.graph.cap = cap;
	}
	e = &g->u.graph.v[g->u.graph.n];
	memset(e, 0, sizeof(*e));
	e->type = CU_GRAPH_NODE_TYPE_KERNEL;
	e->params = malloc(l->params_size ? l->params_size : 1);
	if (!e->params)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (l->params_size)
		memcpy(e->params, l->params, l->params_size);
	if (l->nattrs > PVGPU_MAX_LAUNCH_ATTRS) {
		free(e->params);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (l->nattrs)
		memcpy(e->attrs, l->attrs, l->nattrs * sizeof(*l->attrs));
	e->l = *l;
	e->l.params = e->params;
	e->l.attrs = e->attrs;
	e->l.layout = NULL;
	e->l.nparams = 0;
	g->u.graph.n++;
	return CUDA_SUCCESS;
}

/* A new node handle (0: out of them). */
static uint64_t node_new(struct pvgpu_exec *ex)
{
	if (ex->serial >= SIM_HANDLE_SERIAL_MASK)
		return 0;
	return ((uint64_t)SIM_GRAPH_NODE << SIM_HANDLE_KIND_SHIFT) | ++ex->serial;
}

/*
 * Captured work on stream s: a node of its own (a launch l, else the copy
 * c), after the capture's dependency set, which is then that node alone.
 */
static int32_t graph_capture(struct pvgpu_exec *ex, struct sim_obj *s,
			     const struct pvgpu_launch *l,
			     const struct pvgpu_graph_node *c)
{
	struct pvgpu_launch empty = { 0 };
	struct sim_obj *g = s->u.stream.capture;
	struct sim_graph_launch *e;
	uint64_t node = node_new(ex);
	int32_t rc;

	if (!node)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = graph_add(g, l ? l : &empty);
	if (rc)
		return rc;
	e = &g->u.graph.v[g->u.graph.n - 1];
	e->node = node;
	if (c) {
		e->type = c->type;
		e->n = *c;
	}
	if (s->u.stream.ncap) {
		e->deps = malloc(s->u.stream.ncap * sizeof(*e->deps));
		if (!e->deps) {
			free(e->params);
			g->u.graph.n--;
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		memcpy(e->deps, s->u.stream.cap_deps,
		       s->u.stream.ncap * sizeof(*e->deps));
		e->ndeps = s->u.stream.ncap;
	}
	s->u.stream.cap_deps[0] = node;
	s->u.stream.ncap = 1;
	return CUDA_SUCCESS;
}

static unsigned char *dev_bytes(struct pvgpu_exec *ex, uint64_t ptr,
				uint64_t len);

/* A host copy on a capturing stream: a copy node (host stays valid: the
 * worker's staging buffer); 1 when stream is not capturing. */
static int32_t capture_copy(struct pvgpu_exec *ex, uint64_t stream,
			    uint64_t dst, uint64_t src, void *host, int to_host,
			    uint64_t size)
{
	struct sim_obj *s = stream && !ctx_check(ex) ?
			    obj_find(ex, stream, SIM_STREAM) : NULL;
	struct pvgpu_graph_node c = {
		.type = CU_GRAPH_NODE_TYPE_MEMCPY, .dst = dst, .src = src,
		.width = size, .host = host, .to_host = to_host,
	};

	if (!s || s->ctx != ex->cur || !s->u.stream.capture)
		return 1;
	if (!size || !host || !dev_bytes(ex, to_host ? src : dst, size))
		return CUDA_ERROR_INVALID_VALUE;
	return graph_capture(ex, s, NULL, &c);
}

/* ------------------------------------------------------------------ */
/* device allocations */

static size_t alloc_upper_bound(struct pvgpu_exec *ex, uint64_t addr)
{
	size_t lo = 0, hi = ex->nallocs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (ex->allocs[mid].addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The allocation holding all of [ptr, ptr + size), size > 0; else NULL. */
static struct sim_alloc *alloc_range(struct pvgpu_exec *ex, uint64_t ptr,
				     uint64_t size)
{
	struct sim_alloc *a;
	size_t i;

	if (!size || ptr + size < ptr)
		return NULL;
	i = alloc_upper_bound(ex, ptr);
	if (!i)
		return NULL;
	a = &ex->allocs[i - 1];
	if (ptr - a->addr >= a->size || size > a->size - (ptr - a->addr))
		return NULL;
	return a;
}

static struct sim_host *host_mapped(struct pvgpu_exec *ex, uint64_t ptr,
				    uint64_t size);

static unsigned char *dev_bytes(struct pvgpu_exec *ex, uint64_t ptr,
				uint64_t size)
{
	struct sim_alloc *a = alloc_range(ex, ptr, size);

	if (!a && host_mapped(ex, ptr, size))
		return (unsigned char *)(uintptr_t)ptr;	/* mapped host memory */
	return a ? a->data + (ptr - a->addr) : NULL;
}

/*
 * Bytes that run on from one cuMemMap mapping into the ones that follow
 * it without a gap (virtual memory mapped piece by piece into one range):
 * as the driver, the sim copies across them, never across allocations.  span_io moves size bytes
 * between buf and the span from ptr (to_dev: into it); -1 where the span
 * breaks.  Each piece's data is its own buffer, so piece by piece.
 */
static int span_io(struct pvgpu_exec *ex, uint64_t ptr, void *buf, uint64_t size,
		   int to_dev)
{
	unsigned char *b = buf;

	if (ptr + size < ptr)
		return -1;
	while (size) {
		size_t i = alloc_upper_bound(ex, ptr);
		struct sim_alloc *a = i ? &ex->allocs[i - 1] : NULL;
		uint64_t n;

		if (!a || ptr - a->addr >= a->size || !a->phys)
			return -1;	/* only cuMemMap mappings run on */
		n = a->size - (ptr - a->addr);
		if (n > size)
			n = size;
		if (buf) {
			if (to_dev)
				memcpy(a->data + (ptr - a->addr), b, (size_t)n);
			else
				memcpy(b, a->data + (ptr - a->addr), (size_t)n);
			b += n;
		}
		ptr += n;
		size -= n;
	}
	return 0;
}

static uint64_t dev_used(struct pvgpu_exec *ex, int32_t dev)
{
	uint64_t used = ex->own_used[dev];

	/* The shared total includes ours; it may lag behind it, never lead. */
	if (ex->have_cfg) {
		uint64_t all = ex->cfg.device_mem_used(ex->cfg.arg, dev);

		if (all > used)
			used = all;
	}
	return used;
}

/*
 * Pick an address for `size` bytes on `dev`: bump the device's cursor so
 * freed ranges stay unmapped for as long as possible, and fall back to the
 * first hole big enough (with guard gaps) once the window is used up.
 */
static int place_alloc(struct pvgpu_exec *ex, int32_t dev, uint64_t size,
		       uint64_t *addr)
{
	uint64_t base = ex->addr_base + (uint64_t)dev * SIM_ADDR_WINDOW;
	uint64_t end = base + SIM_ADDR_WINDOW;
	uint64_t span = align_up(size, SIM_ALLOC_ALIGN) + SIM_GUARD_GAP;
	uint64_t cand;
	size_t i;

	if (span > SIM_ADDR_WINDOW - SIM_GUARD_GAP)
		return -1;
	cand = ex->next_addr[dev];
	if (cand <= end - span) {
		ex->next_addr[dev] = cand + span;
		*addr = cand;
		return 0;
	}

	cand = base + SIM_GUARD_GAP;
	for (i = alloc_upper_bound(ex, base); i < ex->nallocs; i++) {
		struct sim_alloc *a = &ex->allocs[i];

		if (a->addr >= end)
			break;
		if (a->addr >= cand && a->addr - cand >= span)
			break;
		cand = align_up(a->addr + a->size, SIM_ALLOC_ALIGN) +
		       SIM_GUARD_GAP;
	}
	if (cand > end - span)
		return -1;
	/* Keep the cursor above every live allocation. */
	if (cand + span > ex->next_addr[dev])
		ex->next_addr[dev] = cand + span;
	*addr = cand;
	return 0;
}

static struct sim_phys *phys_find(struct pvgpu_exec *ex, uint64_t handle)
{
	for (size_t i = 0; i < ex->nphys; i++)
		if (ex->phys[i].handle == handle)
			return &ex->phys[i];
	return NULL;
}

static void phys_free_data(struct sim_phys *p)
{
	if (p->shared)
		munmap(p->data, p->size);
	else
		free(p->data);
	if (p->fd >= 0)
		close(p->fd);
}

/* Free physical memory no handle and no mapping holds any more. */
static void phys_put(struct pvgpu_exec *ex, struct sim_phys *p)
{
	if (p->refs || p->maps)
		return;
	if (!p->shared || p->fd >= 0)	/* an import is the exporter's */
		ex->own_used[p->dev] -= p->size;
	phys_free_data(p);
	*p = ex->phys[--ex->nphys];
}

static void alloc_remove(struct pvgpu_exec *ex, size_t i)
{
	struct sim_alloc *a = &ex->allocs[i];
	struct sim_phys *p = a->phys ? phys_find(ex, a->phys) : NULL;

	if (a->phys) {
		if (p) {
			p->maps--;
			phys_put(ex, p);
		}
	} else if (a->ipc[0]) {
		if (a->ipc_owner) {
			ex->own_used[a->dev] -= a->size;
			close(a->ipc_fd);
		}
		munmap(a->data, a->size);
	} else {
		ex->own_used[a->dev] -= a->size;
		free(a->data);
	}
	memmove(a, a + 1, (ex->nallocs - i - 1) * sizeof(*a));
	ex->nallocs--;
}

/* ------------------------------------------------------------------ */
/* open / close */

static void sim_close(struct pvgpu_exec *ex);

static const struct pvgpu_sim_twin *twin_find(struct pvgpu_exec *ex,
					      const char *name)
{
	size_t i;

	for (i = 0; i < ex->ntwins; i++)
		if (!strcmp(ex->twins[i]->name, name))
			return ex->twins[i];
	return NULL;
}

/* dlopen one plugin and take its twins. */
static int load_twin_plugin(struct pvgpu_exec *ex, const char *path,
			    char *err, size_t errlen)
{
	const struct pvgpu_sim_twin *t;
	const uint32_t *abi;
	void *lib;

	if (grow((void **)&ex->twin_libs, &ex->twin_libs_cap,
		 ex->ntwin_libs + 1, sizeof(*ex->twin_libs)))
		goto err_nomem;
	lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		snprintf(err, errlen, "PVGPU_SIM_TWINS: %s", dlerror());
		return -1;
	}
	ex->twin_libs[ex->ntwin_libs++] = lib;	/* closed by sim_close */

	abi = dlsym(lib, "pvgpu_sim_twin_abi");
	t = dlsym(lib, "pvgpu_sim_twins");
	if (!abi || !t) {
		snprintf(err, errlen, "PVGPU_SIM_TWINS: %s exports no "
			 "pvgpu_sim_twin_abi/pvgpu_sim_twins (see sim_twins.h)",
			 path);
		return -1;
	}
	if (*abi < 1 || *abi > PVGPU_SIM_TWIN_ABI) {
		snprintf(err, errlen, "PVGPU_SIM_TWINS: %s has twin ABI %u, "
			 "pvgpud speaks %u", path, *abi, PVGPU_SIM_TWIN_ABI);
		return -1;
	}
	for (; t->name; t++) {
		if (!t->run) {
			snprintf(err, errlen, "PVGPU_SIM_TWINS: %s: twin %s has "
				 "no run function", path, t->name);
			return -1;
		}
		/* Two twins for one kernel: which one a test ran is a guess. */
		if (twin_find(ex, t->name)) {
			snprintf(err, errlen, "PVGPU_SIM_TWINS: kernel %s has "
				 "two CPU twins (the second in %s)", t->name,
				 path);
			return -1;
		}
		if (grow((void **)&ex->twins, &ex->twins_cap, ex->ntwins + 1,
			 sizeof(*ex->twins)))
			goto err_nomem;
		ex->twins[ex->ntwins++] = t;
	}
	return 0;

err_nomem:
	snprintf(err, errlen, "sim executor: out of host memory");
	return -1;
}

/*
 * The folder of twins that come with the sim: "sim-twins/" beside this
 * plugin (build/lib/pvgpud/sim-twins, /usr/lib/pvgpud/sim-twins), so that
 * `pvgpud --executor sim` runs the project's programs and benchmarks with
 * nothing set.  False where the sim is linked into a test binary instead.
 */
static bool default_twin_dir(char *dir, size_t len)
{
	Dl_info info;
	const char *slash;
	struct stat st;

	if (!dladdr((void *)default_twin_dir, &info) || !info.dli_fname)
		return false;
	slash = strrchr(info.dli_fname, '/');
	if (!slash)
		return false;
	if (snprintf(dir, len, "%.*s/sim-twins",
		     (int)(slash - info.dli_fname), info.dli_fname) >= (int)len)
		return false;
	return !stat(dir, &st) && S_ISDIR(st.st_mode);
}

static int twin_so_filter(const struct dirent *d)
{
	size_t n = strlen(d->d_name);

	return d->d_name[0] != '.' && n > 3 && !strcmp(d->d_name + n - 3, ".so");
}

/* Every plugin of the default folder, in name order. */
static int load_default_twins(struct pvgpu_exec *ex, const char *dir,
			      char *err, size_t errlen)
{
	struct dirent **names;
	char path[PATH_MAX];
	int i, n, rc = 0;

	n = scandir(dir, &names, twin_so_filter, alphasort);
	if (n < 0)
		return 0;
	for (i = 0; i < n; i++) {
		if (!rc && snprintf(path, sizeof(path), "%s/%s", dir,
				    names[i]->d_name) >= (int)sizeof(path)) {
			snprintf(err, errlen, "sim executor: a path in %s "
				 "is too long", dir);
			rc = -1;
		} else if (!rc) {
			rc = load_twin_plugin(ex, path, err, errlen);
		}
		free(names[i]);
	}
	free(names);
	return rc;
}

/*
 * Every plugin PVGPU_SIM_TWINS names (colon-separated paths; set and empty:
 * none), else those of the default folder.  The supervisor's probe at
 * start-up says in one line which were taken.
 */
static int load_twins(struct pvgpu_exec *ex, bool probe, char *err,
		      size_t errlen)
{
	const char *list = getenv("PVGPU_SIM_TWINS");
	char dir[PATH_MAX], *copy, *path, *save = NULL;
	int rc = 0;

	if (!list) {
		if (!default_twin_dir(dir, sizeof(dir))) {
			if (probe)
				sim_diag(ex, "no CPU twins of kernels: kernels "
					 "will not launch (PVGPU_SIM_TWINS "
					 "names plugins, see tests/sim/sim_twins.h)");
			return 0;
		}
		rc = load_default_twins(ex, dir, err, errlen);
		if (!rc && probe)
			sim_diag(ex, "CPU twins of %zu kernels from %s "
				 "(PVGPU_SIM_TWINS names others)", ex->ntwins,
				 dir);
		return rc;
	}
	if (!*list)
		return 0;
	copy = strdup(list);
	if (!copy) {
		snprintf(err, errlen, "sim executor: out of host memory");
		return -1;
	}
	for (path = strtok_r(copy, ":", &save); path && !rc;
	     path = strtok_r(NULL, ":", &save))
		rc = load_twin_plugin(ex, path, err, errlen);
	free(copy);
	if (!rc && probe)
		sim_diag(ex, "CPU twins of %zu kernels from PVGPU_SIM_TWINS",
			 ex->ntwins);
	return rc;
}

/* ------------------------------------------------------------------ */
/*
 * Suspend and resume: the sim's model, not the driver's behaviour.  The
 * driver locks, checkpoints and restores a process from another one; the
 * sim, being memory of the worker's own, needs the worker's hands for it.
 * The checkpointer (sim_checkpoint: in the checkpointer
 * process) sends the worker SIM_CKPT_SIGNAL, again every SIM_CKPT_RESEND_MS
 * until answered (a signal that comes just before the worker blocks is
 * seen only at the next one); the worker's handler only notes it, and
 * the move happens at the worker's next idle point (between calls, or
 * waiting for a resume: sim_idle_point), which answers with SIM_CKPT_ACK.
 * A checkpoint copies each device allocation to a host copy and releases
 * its device bytes (and its buffer: a touch while locked would crash, as
 * a bug should); a restore puts the bytes back at the same addresses.
 * Calls while locked block until the restore, as the driver's do
 * (ctx_check, which every call on a context passes).  IPC allocations and
 * shared physical memory stay where they are: other processes map them.
 */
#define SIM_CKPT_SIGNAL		(SIGRTMIN + 3)	/* value: SIM_CKPT_* */
#define SIM_CKPT_ACK		(SIGRTMIN + 4)	/* value: 0, or failed */
#define SIM_CKPT_RESEND_MS	20
enum { SIM_CKPT_CHECKPOINT = 1, SIM_CKPT_RESTORE = 2 };

/* What a handler may touch: the one request noted, and who asked. */
static volatile sig_atomic_t sim_ckpt_asked;
static volatile sig_atomic_t sim_ckpt_from;

static void sim_ckpt_handler(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	sim_ckpt_asked = si->si_value.sival_int;
	sim_ckpt_from = si->si_pid;
}

/* No SA_RESTART: the worker's blocking read must return to its idle point. */
static int sim_ckpt_listen(char *err, size_t errlen)
{
	struct sigaction sa = { .sa_sigaction = sim_ckpt_handler,
				.sa_flags = SA_SIGINFO };

	sigemptyset(&sa.sa_mask);
	if (sigaction(SIM_CKPT_SIGNAL, &sa, NULL)) {
		snprintf(err, errlen, "sim executor: sigaction: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* Move size bytes from the device buffer to a host copy (to_host) or back. */
static int sim_ckpt_move(unsigned char **data, unsigned char **saved,
			 uint64_t size, bool to_host)
{
	unsigned char *to = malloc(size ? size : 1);

	if (!to)
		return -1;
	memcpy(to, to_host ? *data : *saved, size);
	if (to_host) {
		free(*data);
		*data = NULL;
		*saved = to;
	} else {
		free(*saved);
		*saved = NULL;
		*data = to;
	}
	return 0;
}

static void sim_ckpt_count(struct pvgpu_exec *ex, int32_t dev, uint64_t size,
			   bool to_host)
{
	if (to_host)
		ex->own_used[dev] -= size;
	else
		ex->own_used[dev] += size;
}

/* Checkpoint (to_host) or restore the device memory: 0, or -1 (as it was). */
static int sim_ckpt_all(struct pvgpu_exec *ex, bool to_host)
{
	size_t i, j;

	for (i = 0; i < ex->nallocs; i++) {
		struct sim_alloc *a = &ex->allocs[i];

		if (a->phys || a->ipc[0])
			continue;
		if (sim_ckpt_move(&a->data, &a->saved, a->size, to_host))
			goto err_allocs;
		sim_ckpt_count(ex, a->dev, a->size, to_host);
	}
	for (j = 0; j < ex->nphys; j++) {
		struct sim_phys *p = &ex->phys[j];

		if (p->shared)
			continue;
		if (sim_ckpt_move(&p->data, &p->saved, p->size, to_host))
			goto err_phys;
		sim_ckpt_count(ex, p->dev, p->size, to_host);
	}
	ex->locked = to_host;
	return 0;

err_phys:
	while (j-- > 0) {
		struct sim_phys *p = &ex->phys[j];

		if (!p->shared && !sim_ckpt_move(&p->data, &p->saved, p->size, !to_host))
			sim_ckpt_count(ex, p->dev, p->size, !to_host);
	}
err_allocs:
	while (i-- > 0) {
		struct sim_alloc *a = &ex->allocs[i];

		if (!a->phys && !a->ipc[0] &&
		    !sim_ckpt_move(&a->data, &a->saved, a->size, !to_host))
			sim_ckpt_count(ex, a->dev, a->size, !to_host);
	}
	return -1;
}

static void sim_idle_point(struct pvgpu_exec *ex)
{
	int op = sim_ckpt_asked;
	pid_t from = sim_ckpt_from;
	int rc;

	if (!op || !ex)
		return;
	sim_ckpt_asked = 0;
	/* A resent request already done: its answer went with the first. */
	if ((op == SIM_CKPT_CHECKPOINT) == ex->locked)
		return;
	rc = sim_ckpt_all(ex, op == SIM_CKPT_CHECKPOINT);
	sigqueue(from, SIM_CKPT_ACK, (union sigval){ .sival_int = rc ? 1 : 0 });
}

static void sim_wait_unlocked(struct pvgpu_exec *ex)
{
	while (ex->locked) {
		struct timespec tick = { 0, SIM_CKPT_RESEND_MS * 1000000L };

		nanosleep(&tick, NULL);
		sim_idle_point(ex);
	}
}

/* In the checkpointer: ask the worker, wait for its answer. */
static int sim_ckpt_ask(pid_t pid, int op, uint64_t timeout_ms,
			void (*touched)(void *), void *arg, char *err,
			size_t errlen)
{
	uint64_t deadline;
	long hang_ms = 0;
	sigset_t acks;
	bool said = false;

	/*
	 * PVGPU_SIM_CHECKPOINT_HANG_MS: a checkpointer that hangs this long
	 * before it acts, for tests of the supervisor's deadline.
	 */
	if (op == SIM_CKPT_CHECKPOINT &&
	    env_long("PVGPU_SIM_CHECKPOINT_HANG_MS", 0, 0, 3600 * 1000,
		     &hang_ms, err, errlen))
		return -1;
	if (hang_ms) {
		struct timespec t = { hang_ms / 1000, (hang_ms % 1000) * 1000000L };

		nanosleep(&t, NULL);
	}
	sigemptyset(&acks);
	sigaddset(&acks, SIM_CKPT_ACK);
	sigprocmask(SIG_BLOCK, &acks, NULL);
	deadline = pvgpu_now_ns() + timeout_ms * 1000000ull;
	for (;;) {
		struct timespec wait = { 0, SIM_CKPT_RESEND_MS * 1000000L };
		siginfo_t si;

		if (sigqueue(pid, SIM_CKPT_SIGNAL, (union sigval){ .sival_int = op })) {
			snprintf(err, errlen, "signal to the worker: %s", strerror(errno));
			return said ? -2 : -1;
		}
		if (!said) {
			touched(arg);
			said = true;
		}
		if (sigtimedwait(&acks, &si, &wait) == SIM_CKPT_ACK &&
		    si.si_pid == pid) {
			if (!si.si_value.sival_int)
				return 0;
			snprintf(err, errlen, "the sim worker could not move its memory");
			return -1;	/* it put back what it had moved */
		}
		if (pvgpu_now_ns() >= deadline) {
			snprintf(err, errlen, "the sim worker did not answer within %llu ms",
				 (unsigned long long)timeout_ms);
			return -2;
		}
	}
}

static int sim_checkpoint(pid_t pid, bool restore, uint64_t timeout_ms,
			  void (*touched)(void *), void *arg, char *err,
			  size_t errlen)
{
	return sim_ckpt_ask(pid, restore ? SIM_CKPT_RESTORE : SIM_CKPT_CHECKPOINT,
			    timeout_ms, touched, arg, err, errlen);
}

static struct pvgpu_exec *sim_open(const struct pvgpu_exec_config *cfg,
				   char *err, size_t errlen)
{
	struct pvgpu_exec *ex;
	long ndev, mb, node, ctx_bytes, stream_bytes;
	int32_t d;

	if (env_long("PVGPU_SIM_DEVICES", 1, 0, SIM_MAX_DEVICES, &ndev,
		     err, errlen))
		return NULL;
	if (env_long("PVGPU_SIM_MEMORY_MB", SIM_DEFAULT_MEMORY_MB, 1,
		     SIM_MAX_MEMORY_MB, &mb, err, errlen))
		return NULL;
	/*
	 * PVGPU_SIM_NODE: which simulated machine this is (tests of the remote
	 * executor run several): its devices get their own UUIDs and address
	 * ranges, as two real machines' GPUs would.
	 */
	if (env_long("PVGPU_SIM_NODE", 0, 0, SIM_MAX_NODES - 1, &node,
		     err, errlen))
		return NULL;
	/*
	 * PVGPU_SIM_CONTEXT_BYTES, PVGPU_SIM_STREAM_BYTES: what the device
	 * says a context and a stream take of its memory (device_info),
	 * for tests of how the worker charges them; 0 unless set.  The
	 * simulated device itself takes nothing for them.
	 */
	if (env_long("PVGPU_SIM_CONTEXT_BYTES", 0, 0, SIM_MAX_OBJECT_BYTES,
		     &ctx_bytes, err, errlen) ||
	    env_long("PVGPU_SIM_STREAM_BYTES", 0, 0, SIM_MAX_OBJECT_BYTES,
		     &stream_bytes, err, errlen))
		return NULL;

	ex = calloc(1, sizeof(*ex));
	if (!ex) {
		snprintf(err, errlen, "sim executor: out of host memory");
		return NULL;
	}
	if (cfg && cfg->device_mem_used) {
		ex->cfg = *cfg;
		ex->have_cfg = true;
	}
	ex->ndev = (int32_t)ndev;
	ex->total_bytes = (uint64_t)mb << 20;
	ex->node = (uint32_t)node;
	ex->ctx_bytes = (uint64_t)ctx_bytes;
	ex->stream_bytes = (uint64_t)stream_bytes;
	ex->addr_base = SIM_ADDR_BASE -
			(uint64_t)node * SIM_MAX_DEVICES * SIM_ADDR_WINDOW;
	for (d = 0; d < SIM_MAX_DEVICES; d++)
		ex->next_addr[d] = ex->addr_base + (uint64_t)d * SIM_ADDR_WINDOW +
				   SIM_GUARD_GAP;
	if (parse_no_peer(ex, err, errlen) ||
	    load_twins(ex, cfg && cfg->probe, err, errlen) ||
	    (!(cfg && cfg->probe) && sim_ckpt_listen(err, errlen))) {
		sim_close(ex);
		return NULL;
	}
	/*
	 * What a CUDA driver would take to reach an MPS server (mps.h): said
	 * once per session, so that tests see what the worker was given.
	 */
	if (getenv("CUDA_MPS_PIPE_DIRECTORY") && !(cfg && cfg->probe))
		sim_diag(ex, "MPS client: CUDA_MPS_PIPE_DIRECTORY=%s CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%s CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%s",
			 getenv("CUDA_MPS_PIPE_DIRECTORY"),
			 getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") ?: "-",
			 getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") ?: "-");
	return ex;
}

static void sim_close(struct pvgpu_exec *ex)
{
	size_t i;

	if (!ex)
		return;
	sim_output_flush(ex);
	free(ex->out[0].buf);
	free(ex->out[1].buf);
	for (i = ex->nallocs; i-- > 0;)
		if (ex->allocs[i].ipc[0])
			alloc_remove(ex, i);
	for (i = 0; i < ex->nallocs; i++) {
		free(ex->allocs[i].saved);
		if (!ex->allocs[i].phys)
			free(ex->allocs[i].data);
	}
	for (i = 0; i < ex->nphys; i++) {
		free(ex->phys[i].saved);
		phys_free_data(&ex->phys[i]);
	}
	free(ex->phys);
	free(ex->ranges);
	for (i = 0; i < ex->nhosts; i++)
		if (!ex->hosts[i].registered)
			free(ex->hosts[i].p);
	for (i = 0; i < ex->nobjs; i++) {
		obj_release(ex->objs[i]);
		free(ex->objs[i]);
	}
	free(ex->allocs);
	free(ex->hosts);
	free(ex->objs);
	sim_codecs_release(&ex->codecs);
	/* After every object: twins' names live in the plugins. */
	free(ex->twins);
	for (i = 0; i < ex->ntwin_libs; i++)
		dlclose(ex->twin_libs[i]);
	free(ex->twin_libs);
	free(ex);
}

/* ------------------------------------------------------------------ */
/* devices */

static bool bad_dev(struct pvgpu_exec *ex, int32_t dev)
{
	return dev < 0 || dev >= ex->ndev;
}

static int32_t sim_driver_info(struct pvgpu_exec *ex, int32_t *version,
			       int32_t *count)
{
	if (!ex || (!version && !count))
		return CUDA_ERROR_INVALID_VALUE;
	if (version)
		*version = SIM_DRIVER_VERSION;
	if (count)
		*count = ex->ndev;
	return CUDA_SUCCESS;
}

/* An H100 SXM5-like sm_90 part; -1 means "not an attribute we know". */
static int64_t sim_attr_value(int32_t dev, int32_t attr)
{
	switch (attr) {
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:		return 1024;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:		return 1024;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:		return 1024;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:		return 64;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:		return 2147483647;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:		return 65535;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:		return 65535;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:	return 49152;
	case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:		return 65536;
	case CU_DEVICE_ATTRIBUTE_WARP_SIZE:			return 32;
	case CU_DEVICE_ATTRIBUTE_MAX_PITCH:			return 2147483647;
	case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:	return 65536;
	case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:			return 1980000;
	case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:		return 512;
	case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:			return 1;
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:		return 132;
	case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT:		return 0;
	case CU_DEVICE_ATTRIBUTE_INTEGRATED:			return 0;
	case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:		return 1;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE:			return CU_COMPUTEMODE_DEFAULT;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH:	return 131072;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH:	return 131072;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT:	return 65536;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH:	return 16384;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT:	return 16384;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH:	return 16384;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS: return 2048;
	case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT:		return 512;
	case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:		return 1;
	case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:			return 1;
	case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:			return 0x18 + dev;
	case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:			return 0;
	case CU_DEVICE_ATTRIBUTE_TCC_DRIVER:			return 0;
	case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:		return 2619000;
	case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:	return 5120;
	case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:			return 52428800;
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
	case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:		return 2;
	case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:		return 1;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS: return 2048;
	case CU_DEVICE_ATTRIBUTE_CAN_TEX2D_GATHER:		return 1;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_HEIGHT: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE: return 8192;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE: return 8192;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE: return 32768;
	case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:			return 0;
	case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT:	return 32;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH:	return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS: return 2046;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_WIDTH:	return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_WIDTH:	return 131072;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_HEIGHT:	return 65536;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_WIDTH:	return 16384;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_HEIGHT:	return 16384;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_DEPTH:	return 16384;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_LAYERS: return 2048;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_HEIGHT: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_LAYERS: return 2048;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_WIDTH:	return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS: return 2046;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH: return 268435456;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH: return 131072;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT: return 65000;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH: return 2097120;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT: return 32768;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:	return 9;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:	return 0;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:	return 1;
	case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:	return 1;
	case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:	return 1;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return 233472;
	case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
	case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:		return 1;
	case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD:		return 0;
	case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID:	return dev;
	case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED:	return 0;
	case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO: return 2;
	case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS:	return 0;
	case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:	return 1;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED:	return 1;
	case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: return 1;
	case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1:	return 0;
	case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1: return 0;
	case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1: return 0;
	case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:		return 1;
	case CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH: return 0;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return 232448;
	case CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES:	return 0;
	case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:	return 1;
	case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES: return 0;
	case CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST: return 0;
	case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED: return 0;
	case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED: return 0;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:	return 32;
	case CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED:	return 1;
	case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE:	return 39321600;
	case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE:	return 134213632;
	case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: return 1024;
	case CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED:	return 1;
	case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:	return 1;
	case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED:	return 1;
	case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS: return CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST;
	case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING: return CU_GPU_DIRECT_RDMA_WRITES_ORDERING_OWNER;
	case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES: return CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH:		return 1;
	case CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS:	return 1;
	case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR:	return 1;
	case CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED:		return 1;
	case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED:		return 1;
	case CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT:		return 4;
	case CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED:	return 1;
	case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED:	return 0;
	case CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS:	return 0;
	case CU_DEVICE_ATTRIBUTE_NUMA_CONFIG:			return CU_DEVICE_NUMA_CONFIG_NONE;
	case CU_DEVICE_ATTRIBUTE_NUMA_ID:			return -1;
	case CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED:		return 0;
	case CU_DEVICE_ATTRIBUTE_MPS_ENABLED:			return 0;
	case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID:			return 0;
	case CU_DEVICE_ATTRIBUTE_D3D12_CIG_SUPPORTED:		return 0;
	case CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK:	return 0;
	case CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_MAXIMUM_LENGTH:	return 0;
	case CU_DEVICE_ATTRIBUTE_VULKAN_CIG_SUPPORTED:		return 0;
	/* (device id << 16) | vendor id, as the driver reports it */
	case CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID:		return 0x233010deLL;
	case CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID:		return 0x16c110deLL;
	case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 0;
	case CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED: return 0;
	case CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED: return 0;
	case CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED:	return 0;
	case CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 0;
	case CU_DEVICE_ATTRIBUTE_HOST_ALLOC_DMA_BUF_SUPPORTED:	return 0;
	case CU_DEVICE_ATTRIBUTE_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED: return 0;
	default:
		return INT64_MIN;
	}
}

static int32_t sim_device_attribute(struct pvgpu_exec *ex, int32_t dev,
				    int32_t attr, int32_t *value)
{
	int64_t v;

	if (!ex || !value)
		return CUDA_ERROR_INVALID_VALUE;
	if (bad_dev(ex, dev))
		return CUDA_ERROR_INVALID_DEVICE;
	v = sim_attr_value(dev, attr);
	if (v == INT64_MIN)
		return CUDA_ERROR_INVALID_VALUE;
	*value = (int32_t)v;
	return CUDA_SUCCESS;
}

static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* Same index, same UUID, on every host and every run. */
static void sim_uuid(const struct pvgpu_exec *ex, int32_t dev, uint8_t uuid[16])
{
	uint64_t hi, lo;
	int i;

	hi = mix64(0x70766770752d7369ULL ^ (uint64_t)dev ^	/* "pvgpu-si" */
		   ((uint64_t)ex->node << 32));
	lo = mix64(hi ^ 0x6d2d6465762d6964ULL);
	for (i = 0; i < 8; i++) {
		uuid[i] = (uint8_t)(hi >> (56 - 8 * i));
		uuid[8 + i] = (uint8_t)(lo >> (56 - 8 * i));
	}
	uuid[6] = (uuid[6] & 0x0f) | 0x40;	/* RFC 4122 version 4 */
	uuid[8] = (uuid[8] & 0x3f) | 0x80;	/* RFC 4122 variant */
}

static int32_t sim_device_info(struct pvgpu_exec *ex, int32_t dev,
			       struct pvgpu_exec_device *d)
{
	if (!ex || !d)
		return CUDA_ERROR_INVALID_VALUE;
	if (bad_dev(ex, dev))
		return CUDA_ERROR_INVALID_DEVICE;
	snprintf(d->name, sizeof(d->name), "%s", SIM_DEVICE_NAME);
	sim_uuid(ex, dev, d->uuid);
	d->total_mem = ex->total_bytes;
	/* Told, not measured (PVGPU_SIM_CONTEXT_BYTES, ..._STREAM_BYTES). */
	d->ctx_bytes = ex->ctx_bytes;
	d->stream_bytes = ex->stream_bytes;
	d->objects_known = true;
	return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* contexts */

static int32_t sim_ctx_create(struct pvgpu_exec *ex, int32_t dev,
			      uint64_t *ctx)
{
	struct sim_obj *c;

	if (!ex || !ctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (bad_dev(ex, dev))
		return CUDA_ERROR_INVALID_DEVICE;
	c = obj_new(ex, SIM_CTX, NULL);
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	c->u.ctx.dev = dev;
	*ctx = c->handle;
	return CUDA_SUCCESS;
}

static int32_t sim_ctx_destroy(struct pvgpu_exec *ex, uint64_t ctx)
{
	struct sim_obj *c;
	size_t i, j;

	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	sim_output_flush(ex);
	c = obj_find(ex, ctx, SIM_CTX);
	if (!c)
		return CUDA_ERROR_INVALID_CONTEXT;

	for (i = ex->nallocs; i-- > 0;)
		if (ex->allocs[i].ctx == c)
			alloc_remove(ex, i);

	for (i = 0, j = 0; i < ex->nhosts; i++) {
		struct sim_host *h = &ex->hosts[i];

		if (h->ctx != c) {
			ex->hosts[j++] = *h;
			continue;
		}
		if (!h->registered)
			free(h->p);
	}
	ex->nhosts = j;

	/* Drop streams, events, ... of the context, then the context. */
	for (i = 0, j = 0; i < ex->nobjs; i++) {
		struct sim_obj *o = ex->objs[i];

		if (o->ctx == c && o != c) {
			obj_release(o);
			free(o);
		} else
			ex->objs[j++] = o;
	}
	ex->nobjs = j;

	/* Whoever had access to its memory has it no more. */
	for (i = 0; i < ex->nobjs; i++) {
		struct sim_obj *o = ex->objs[i];

		if (o->kind != SIM_CTX)
			continue;
		for (j = 0; j < o->u.ctx.npeers;) {
			if (o->u.ctx.peers[j] == c)
				o->u.ctx.peers[j] =
					o->u.ctx.peers[--o->u.ctx.npeers];
			else
				j++;
		}
	}
	if (ex->cur == c)
		ex->cur = NULL;
	obj_free(ex, c);
	return CUDA_SUCCESS;
}

static int32_t sim_ctx_set(struct pvgpu_exec *ex, uint64_t ctx)
{
	struct sim_obj *c;

	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ctx) {
		ex->cur = NULL;
		return CUDA_SUCCESS;
	}
	c = obj_find(ex, ctx, SIM_CTX);
	if (!c)
		return CUDA_ERROR_INVALID_CONTEXT;
	ex->cur = c;
	return CUDA_SUCCESS;
}

static int32_t ctx_synchronize(struct pvgpu_exec *ex)
{
	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	sim_output_flush(ex);
	return ctx_check(ex);
}

/* ------------------------------------------------------------------ */
/* memory */

/* Place `size` bytes in the current context's device; size > 0. */
static int32_t dev_alloc(struct pvgpu_exec *ex, uint64_t size, bool module,
			 uint64_t *dptr)
{
	int32_t dev = ex->cur->u.ctx.dev;
	uint64_t addr, used;
	unsigned char *data;
	size_t i;

	used = dev_used(ex, dev);
	if (used >= ex->total_bytes || size > ex->total_bytes - used)
		return CUDA_ERROR_OUT_OF_MEMORY;
#if SIZE_MAX < UINT64_MAX
	if (size > SIZE_MAX)
		return CUDA_ERROR_OUT_OF_MEMORY;
#endif
	if (grow((void **)&ex->allocs, &ex->allocs_cap, ex->nallocs + 1,
		 sizeof(*ex->allocs)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (place_alloc(ex, dev, size, &addr))
		return CUDA_ERROR_OUT_OF_MEMORY;
	data = calloc(1, (size_t)size);
	if (!data)
		return CUDA_ERROR_OUT_OF_MEMORY;

	i = alloc_upper_bound(ex, addr);
	memmove(&ex->allocs[i + 1], &ex->allocs[i],
		(ex->nallocs - i) * sizeof(*ex->allocs));
	ex->allocs[i] = (struct sim_alloc){
		.addr = addr, .size = size, .data = data, .ctx = ex->cur,
		.dev = dev, .module = module, .ipc_fd = -1,
	};
	ex->nallocs++;
	ex->own_used[dev] += size;
	*dptr = addr;
	return CUDA_SUCCESS;
}

static int32_t sim_mem_alloc(struct pvgpu_exec *ex, uint64_t size,
			     uint64_t *dptr)
{
	int32_t rc;

	if (!ex || !dptr)
		return CUDA_ERROR_INVALID_VALUE;
	rc = ctx_check(ex);
	if (rc)
		return rc;
	if (!size)
		return CUDA_ERROR_INVALID_VALUE;
	return dev_alloc(ex, size, false, dptr);
}

static int32_t sim_mem_free(struct pvgpu_exec *ex, uint64_t dptr)
{
	size_t i;
	int32_t rc;

	rc = ctx_check(ex);
	if (rc)
		return rc;
	/* Only the start of a live allocation; any context (unified VA). */
	i = alloc_upper_bound(ex, dptr);
	if (!i || ex->allocs[i - 1].addr != dptr || ex->allocs[i - 1].module ||
	    ex->allocs[i - 1].phys || ex->allocs[i - 1].unmapped)
		return CUDA_ERROR_INVALID_VALUE;
	if (ex->allocs[i - 1].graph)
		ex->allocs[i - 1].unmapped = true;
	else
		alloc_remove(ex, i - 1);
	return CUDA_SUCCESS;
}

static int32_t sim_mem_get_info(struct pvgpu_exec *ex, uint64_t *free_bytes,
				uint64_t *total_bytes)
{
	uint64_t used;
	int32_t rc;

	if (!ex || !free_bytes || !total_bytes)
		return CUDA_ERROR_INVALID_VALUE;
	rc = ctx_check(ex);
	if (rc)
		return rc;
	used = dev_used(ex, ex->cur->u.ctx.dev);
	*total_bytes = ex->total_bytes;
	*free_bytes = used < ex->total_bytes ? ex->total_bytes - used : 0;
	return CUDA_SUCCESS;
}

static struct sim_host *host_find(struct pvgpu_exec *ex, const void *p,
				  bool registered)
{
	size_t i;

	for (i = 0; i < ex->nhosts; i++)
		if (ex->hosts[i].p == p && ex->hosts[i].registered == registered)
			return &ex->hosts[i];
	return NULL;
}

static void host_remove(struct pvgpu_exec *ex, struct sim_host *h)
{
	size_t i = (size_t)(h - ex->hosts);

	memmove(h, h + 1, (ex->nhosts - i - 1) * sizeof(*h));
	ex->nhosts--;
}

static int32_t sim_host_alloc(struct pvgpu_exec *ex, size_t size, void **p)
{
	struct sim_host *h;
	size_t rounded;
	void *mem;
	int32_t rc;

	if (!ex || !p)
		return CUDA_ERROR_INVALID_VALUE;
	rc = ctx_check(ex);
	if (rc)
		return rc;
	if (!size)
		return CUDA_ERROR_INVALID_VALUE;
	if (grow((void **)&ex->hosts, &ex->hosts_cap, ex->nhosts + 1,
		 sizeof(*ex->hosts)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	rounded = (size + 4095) & ~(size_t)4095;
	if (rounded < size)
		return CUDA_ERROR_OUT_OF_MEMORY;
	mem = aligned_alloc(4096, rounded);
	if (!mem)
		return CUDA_ERROR_OUT_OF_MEMORY;

	h = &ex->hosts[ex->nhosts++];
	h->p = mem;
	h->size = size;
	h->ctx = ex->cur;
	h->registered = false;
	*p = mem;
	return CUDA_SUCCESS;
}

static int32_t host_free(struct pvgpu_exec *ex, void *p)
{
	struct sim_host *h;

	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	h = host_find(ex, p, false);
	if (!h)
		return CUDA_ERROR_INVALID_VALUE;
	free(h->p);
	host_remove(ex, h);
	return CUDA_SUCCESS;
}

static int32_t sim_host_register(struct pvgpu_exec *ex, void *p, size_t size)
{
	uintptr_t start = (uintptr_t)p;
	struct sim_host *h;
	size_t i;
	int32_t rc;

	if (!ex || !p || !size || start + size < start)
		return CUDA_ERROR_INVALID_VALUE;
	rc = ctx_check(ex);
	if (rc)
		return rc;
	/* Like the driver: no page may be registered twice. */
	for (i = 0; i < ex->nhosts; i++) {
		uintptr_t s = (uintptr_t)ex->hosts[i].p;

		if (ex->hosts[i].registered &&
		    start < s + ex->hosts[i].size && s < start + size)
			return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	}
	if (grow((void **)&ex->hosts, &ex->hosts_cap, ex->nhosts + 1,
		 sizeof(*ex->hosts)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	h = &ex->hosts[ex->nhosts++];
	h->p = p;
	h->size = size;
	h->ctx = ex->cur;
	h->registered = true;
	return CUDA_SUCCESS;
}

/*
 * Registered host memory is mapped for the device at its own address, as
 * the driver does with unified addressing: host_device_pointer gives it
 * out, and device accesses there reach the host bytes.
 */
static struct sim_host *host_mapped(struct pvgpu_exec *ex, uint64_t ptr,
				    uint64_t size)
{
	for (size_t i = 0; i < ex->nhosts; i++) {
		uint64_t s = (uintptr_t)ex->hosts[i].p;

		if (ex->hosts[i].registered && ptr >= s && size &&
		    size <= ex->hosts[i].size && ptr - s <= ex->hosts[i].size - size)
			return &ex->hosts[i];
	}
	return NULL;
}

static int32_t sim_host_device_pointer(struct pvgpu_exec *ex, void *p, uint64_t *dptr)
{
	if (!ex || !dptr || !host_mapped(ex, (uintptr_t)p, 1))
		return CUDA_ERROR_INVALID_VALUE;
	*dptr = (uintptr_t)p;
	return CUDA_SUCCESS;
}

static int32_t host_unregister(struct pvgpu_exec *ex, void *p)
{
	struct sim_host *h;

	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	h = host_find(ex, p, true);
	if (!h)
		return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	host_remove(ex, h);
	return CUDA_SUCCESS;
}

static int32_t sim_host_release(struct pvgpu_exec *ex, void *p,
				bool registered)
{
	return registered ? host_unregister(ex, p) : host_free(ex, p);
}

/* ------------------------------------------------------------------ */
/* copies and memsets: done at once, so the host buffer is free on return */

static int32_t sim_htod(struct pvgpu_exec *ex, uint64_t dst,
			const void *host, uint64_t size, uint64_t stream)
{
	unsigned char *d;
	int32_t rc;

	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	rc = capture_copy(ex, stream, dst, 0, (void *)(uintptr_t)host, 0, size);
	if (rc != 1)
		return rc;
	rc = check_stream(ex, stream);
	if (rc)
		return rc;
	if (!size)
		return CUDA_SUCCESS;
	d = dev_bytes(ex, dst, size);
	if (!host)
		return CUDA_ERROR_INVALID_VALUE;
	if (!d)
		return span_io(ex, dst, (void *)host, size, 1) ? CUDA_ERROR_INVALID_VALUE :
								 CUDA_SUCCESS;
	memcpy(d, host, (size_t)size);
	return CUDA_SUCCESS;
}

static int32_t sim_dtoh(struct pvgpu_exec *ex, void *host, uint64_t src,
			uint64_t size, uint64_t stream)
{
	unsigned char *s;
	int32_t rc;

	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	rc = capture_copy(ex, stream, 0, src, host, 1, size);
	if (rc != 1)
		return rc;
	/* The sim copies at once: it waits for the kernels before it. */
	sim_output_flush(ex);
	rc = check_stream(ex, stream);
	if (rc)
		return rc;
	if (!size)
		return CUDA_SUCCESS;
	s = dev_bytes(ex, src, size);
	if (!host)
		return CUDA_ERROR_INVALID_VALUE;
	if (!s)
		return span_io(ex, src, host, size, 0) ? CUDA_ERROR_INVALID_VALUE :
							 CUDA_SUCCESS;
	memcpy(host, s, (size_t)size);
	return CUDA_SUCCESS;
}

static int32_t sim_dtod(struct pvgpu_exec *ex, uint64_t dst, uint64_t src,
			uint64_t size, uint64_t stream)
{
	unsigned char *d, *s;
	int32_t rc;

	rc = check_stream(ex, stream);
	if (rc)
		return rc;
	if (!size)
		return CUDA_SUCCESS;
	d = dev_bytes(ex, dst, size);
	s = dev_bytes(ex, src, size);
	if (!d || !s) {
		void *tmp;

		if (span_io(ex, dst, NULL, size, 1) || span_io(ex, src, NULL, size, 0) ||
		    size > SIZE_MAX || !(tmp = malloc((size_t)size)))
			return CUDA_ERROR_INVALID_VALUE;
		span_io(ex, src, tmp, size, 0);
		span_io(ex, dst, tmp, size, 1);
		free(tmp);
		return CUDA_SUCCESS;
	}
	memmove(d, s, (size_t)size);
	return CUDA_SUCCESS;
}

static int32_t sim_memset_async(struct pvgpu_exec *ex, uint64_t dst,
				uint32_t value, uint32_t elem_size,
				uint64_t count, uint64_t stream)
{
	unsigned char *d;
	uint64_t i;
	int32_t rc;

	rc = check_stream(ex, stream);
	if (rc)
		return rc;
	if (elem_size != 1 && elem_size != 2 && elem_size != 4)
		return CUDA_ERROR_INVALID_VALUE;
	/* cuMemsetD16/D32 want a naturally aligned destination. */
	if (dst % elem_size)
		return CUDA_ERROR_INVALID_VALUE;
	if (count > UINT64_MAX / elem_size)
		return CUDA_ERROR_INVALID_VALUE;
	if (!count)
		return CUDA_SUCCESS;
	d = dev_bytes(ex, dst, count * elem_size);
	if (!d)
		return CUDA_ERROR_INVALID_VALUE;

	switch (elem_size) {
	case 1:
		memset(d, (int)(value & 0xff), (size_t)count);
		break;
	case 2: {
		uint16_t v = (uint16_t)value;

		for (i = 0; i < count; i++)
			memcpy(d + i * 2, &v, 2);
		break;
	}
	case 4:
		for (i = 0; i < count; i++)
			memcpy(d + i * 4, &value, 4);
		break;
	}
	return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* streams: nothing is ever pending, but handles are checked */

static int32_t sim_stream_create(struct pvgpu_exec *ex, uint32_t flags,
				 int32_t priority, uint64_t *stream)
{
	struct sim_obj *s;
	int32_t rc;

	if (!ex || !stream)
		return CUDA_ERROR_INVALID_VALUE;
	rc = ctx_check(ex);
	if (rc)
		return rc;
	if (flags & ~(uint32_t)CU_STREAM_NON_BLOCKING)
		return CUDA_ERROR_INVALID_VALUE;
	s = obj_new(ex, SIM_STREAM, ex->cur);
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* The driver clamps priorities to [-5, 0] on sm_90. */
	if (priority > 0)
		priority = 0;
	if (priority < -5)
		priority = -5;
	s->u.stream.flags = flags;
	s->u.stream.priority = priority;
	*stream = s->handle;
	return CUDA_SUCCESS;
}

static int32_t sim_stream_destroy(struct pvgpu_exec *ex, uint64_t stream)
{
	int32_t rc;
	struct sim_obj *s = ctx_obj(ex, false, stream, stream_get, &rc);

	if (!s)
		return rc;
	obj_free(ex, s);
	return CUDA_SUCCESS;
}

static int32_t stream_synchronize(struct pvgpu_exec *ex, uint64_t stream)
{
	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	sim_output_flush(ex);
	return check_stream(ex, stream);
}

static int32_t sim_synchronize(struct pvgpu_exec *ex, bool whole_ctx,
			       uint64_t stream)
{
	return whole_ctx ? ctx_synchronize(ex) : stream_synchronize(ex, stream);
}

static int32_t sim_stream_query(struct pvgpu_exec *ex, uint64_t stream)
{
	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	return check_stream(ex, stream);
}

static int32_t sim_stream_wait_event(struct pvgpu_exec *ex, uint64_t stream,
				     uint64_t event, uint32_t flags)
{
	int32_t rc;

	rc = check_stream(ex, stream);
	if (rc)
		return rc;
	/* The event may come from another context, as in CUDA. */
	if (!obj_find(ex, event, SIM_EVENT))
		return CUDA_ERROR_INVALID_HANDLE;
	if (flags & ~(uint32_t)CU_EVENT_WAIT_EXTERNAL)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* events */

static int32_t sim_event_create(struct pvgpu_exec *ex, uint32_t flags,
				uint64_t *event)
{
	const uint32_t known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING |
			       CU_EVENT_INTERPROCESS;
	struct sim_obj *e;
	int32_t rc;

	if (!ex || !event)
		return CUDA_ERROR_INVALID_VALUE;
	rc = ctx_check(ex);
	if (rc)
		return rc;
	if (flags & ~known)
		return CUDA_ERROR_INVALID_VALUE;
	if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING))
		return CUDA_ERROR_INVALID_VALUE;
	e = obj_new(ex, SIM_EVENT, ex->cur);
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->u.event.flags = flags;
	*event = e->handle;
	return CUDA_SUCCESS;
}

/* An event of any context (events outlive a change of current context, as
 * in CUDA); NULL, with *rc saying why, when there is none. */
static struct sim_obj *event_of(struct pvgpu_exec *ex, uint64_t event,
				int32_t *rc)
{
	struct sim_obj *e = ex ? obj_find(ex, event, SIM_EVENT) : NULL;

	*rc = !ex ? CUDA_ERROR_INVALID_VALUE :
	      !e ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
	return e;
}

static int32_t sim_event_destroy(struct pvgpu_exec *ex, uint64_t event)
{
	int32_t rc;
	struct sim_obj *e = event_of(ex, event, &rc);

	if (!e)
		return rc;
	obj_free(ex, e);
	return CUDA_SUCCESS;
}

static int32_t sim_event_record(struct pvgpu_exec *ex, uint64_t event,
				uint64_t stream)
{
	struct sim_obj *e;
	int32_t rc;

	rc = check_stream(ex, stream);
	if (rc)
		return rc;
	e = obj_find(ex, event, SIM_EVENT);
	if (!e || e->ctx != ex->cur)
		return CUDA_ERROR_INVALID_HANDLE;
	e->u.event.recorded = true;
	e->u.event.ns = pvgpu_now_ns();
	return CUDA_SUCCESS;
}

/* Never-recorded events count as complete, as in CUDA. */
static int32_t sim_event_synchronize(struct pvgpu_exec *ex, uint64_t event)
{
	int32_t rc;
	struct sim_obj *e = event_of(ex, event, &rc);

	if (!e)
		return rc;
	/* Waiting on a faulted context reports its fault. */
	sim_output_flush(ex);
	return e->ctx->u.ctx.poisoned ? e->ctx->u.ctx.fault : CUDA_SUCCESS;
}

static int32_t sim_event_query(struct pvgpu_exec *ex, uint64_t event)
{
	return sim_event_synchronize(ex, event);
}

static int32_t sim_event_elapsed(struct pvgpu_exec *ex, uint64_t start,
				 uint64_t end, float *ms)
{
	struct sim_obj *s, *e;

	if (!ex || !ms)
		return CUDA_ERROR_INVALID_VALUE;
	s = obj_find(ex, start, SIM_EVENT);
	e = obj_find(ex, end, SIM_EVENT);
	if (!s || !e)
		return CUDA_ERROR_INVALID_HANDLE;
	/* cuEventElapsedTime: unrecorded or timing-less → invalid handle. */
	if (!s->u.event.recorded || !e->u.event.recorded)
		return CUDA_ERROR_INVALID_HANDLE;
	if ((s->u.event.flags | e->u.event.flags) & CU_EVENT_DISABLE_TIMING)
		return CUDA_ERROR_INVALID_HANDLE;
	*ms = (float)(((double)e->u.event.ns - (double)s->u.event.ns) / 1e6);
	return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* modules and kernels */

/* A module of the current context; NULL if the handle is not one. */
static struct sim_obj *module_get(struct pvgpu_exec *ex, uint64_t module)
{
	struct sim_obj *o = obj_find(ex, module, SIM_MODULE);

	return o && o->ctx == ex->cur ? o : NULL;
}

static struct sim_obj *func_get(struct pvgpu_exec *ex, uint64_t func)
{
	struct sim_obj *o = obj_find(ex, func, SIM_FUNCTION);

	return o && o->ctx == ex->cur ? o : NULL;
}

static struct sim_obj *graph_get(struct pvgpu_exec *ex, uint64_t graph)
{
	return obj_find(ex, graph, SIM_GRAPH);
}

/* Give back the device memory of a module's variables. */
static void module_free_vars(struct pvgpu_exec *ex, struct sim_module *m)
{
	size_t v, i;

	for (v = 0; v < m->img->nvars; v++) {
		if (!m->var_addr[v])
			continue;
		i = alloc_upper_bound(ex, m->var_addr[v]);
		if (i && ex->allocs[i - 1].addr == m->var_addr[v])
			alloc_remove(ex, i - 1);
		m->var_addr[v] = 0;
	}
}

static int32_t sim_module_load(struct pvgpu_exec *ex, const void *image,
			       size_t size, uint64_t *module)
{
	struct sim_module *m;
	struct sim_obj *o;
	char err[256];
	size_t v;
	int32_t rc;

	if (!ex || !module)
		return CUDA_ERROR_INVALID_VALUE;
	rc = ctx_check(ex);
	if (rc)
		return rc;
	if (!image)
		return CUDA_ERROR_INVALID_VALUE;

	m = calloc(1, sizeof(*m));
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = sim_image_load(&ex->codecs, image, size, &m->img, err,
			    sizeof(err));
	if (rc) {
		/* The CUresult alone would leave a test author guessing. */
		sim_diag(ex, "module load failed (%d): %s", rc, err);
		goto err_free;
	}
	rc = CUDA_ERROR_OUT_OF_MEMORY;
	m->var_addr = calloc(m->img->nvars ? m->img->nvars : 1,
			     sizeof(*m->var_addr));
	m->funcs = calloc(m->img->nkernels ? m->img->nkernels : 1,
			  sizeof(*m->funcs));
	if (!m->var_addr || !m->funcs)
		goto err_free;

	/* Variables live in device memory, initialised as the image says. */
	for (v = 0; v < m->img->nvars; v++) {
		const struct sim_var *var = &m->img->vars[v];

		rc = dev_alloc(ex, var->size, true, &m->var_addr[v]);
		if (rc)
			goto err_vars;
		if (var->init_len)
			memcpy(dev_bytes(ex, m->var_addr[v], var->size),
			       var->init, (size_t)var->init_len);
	}

	o = obj_new(ex, SIM_MODULE, ex->cur);
	if (!o) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto err_vars;
	}
	o->u.module.m = m;
	*module = o->handle;
	return CUDA_SUCCESS;

err_vars:
	module_free_vars(ex, m);
err_free:
	sim_image_free(m->img);
	free(m->var_addr);
	free(m->funcs);
	free(m);
	return rc;
}

static int32_t sim_module_unload(struct pvgpu_exec *ex, uint64_t module)
{
	struct sim_module *m;
	struct sim_obj *o, *f;
	size_t k;
	int32_t rc;

	o = ctx_obj(ex, false, module, module_get, &rc);
	if (!o)
		return rc;
	m = o->u.module.m;
	/* Its functions die with it, as CUfunction handles do. */
	for (k = 0; k < m->img->nkernels; k++) {
		f = m->funcs[k] ? obj_find(ex, m->funcs[k], SIM_FUNCTION) : NULL;
		if (f)
			obj_free(ex, f);
	}
	module_free_vars(ex, m);
	obj_free(ex, o);
	return CUDA_SUCCESS;
}

static int32_t sim_module_function_names(struct pvgpu_exec *ex, uint64_t module,
					 char *names, size_t cap, size_t *len,
					 uint32_t *count)
{
	const struct sim_image *img;
	struct sim_obj *o;
	size_t used = 0;
	int32_t rc;

	o = ctx_obj(ex, !names || !len || !count, module, module_get, &rc);
	if (!o)
		return rc;
	img = o->u.module.m->img;
	for (size_t k = 0; k < img->nkernels; k++) {
		size_t l = strlen(img->kernels[k].name) + 1;

		if (used + l > cap)
			break;
		memcpy(names + used, img->kernels[k].name, l);
		used += l;
	}
	*len = used;
	*count = (uint32_t)img->nkernels;
	return CUDA_SUCCESS;
}

/* One handle per kernel, as cuModuleGetFunction gives. */
static int32_t module_function(struct pvgpu_exec *ex, struct sim_obj *o,
			       const struct sim_kernel *k, uint64_t *func)
{
	struct sim_module *m = o->u.module.m;
	size_t idx = (size_t)(k - m->img->kernels);
	struct sim_obj *f;

	if (m->funcs[idx]) {
		*func = m->funcs[idx];
		return CUDA_SUCCESS;
	}
	f = obj_new(ex, SIM_FUNCTION, ex->cur);
	if (!f)
		return CUDA_ERROR_OUT_OF_MEMORY;
	f->u.func.module = o;
	f->u.func.k = k;
	f->u.func.twin = twin_find(ex, k->name);
	f->u.func.max_dyn_shared = k->static_shared < SIM_DEFAULT_SHARED ?
				   SIM_DEFAULT_SHARED - (int32_t)k->static_shared :
				   0;
	f->u.func.carveout = -1;
	m->funcs[idx] = f->handle;
	*func = f->handle;
	return CUDA_SUCCESS;
}

/* A kernel or a variable of the module's image, by name. */
static int32_t sim_module_symbol(struct pvgpu_exec *ex, uint64_t module,
				 enum pvgpu_symbol_kind kind, const char *name,
				 uint64_t *value, uint64_t *size)
{
	bool func = kind == PVGPU_SYM_FUNCTION;
	const struct sim_kernel *k;
	const struct sim_var *var;
	struct sim_module *m;
	struct sim_obj *o;
	int32_t rc;

	o = ctx_obj(ex, !name || (func && !value) ||
		    (!func && kind != PVGPU_SYM_GLOBAL),
		    module, module_get, &rc);
	if (!o)
		return rc;
	m = o->u.module.m;
	if (func) {
		k = sim_image_kernel(m->img, name);
		return k ? module_function(ex, o, k, value) :
			   CUDA_ERROR_NOT_FOUND;
	}
	var = sim_image_var(m->img, name);
	if (!var)
		return CUDA_ERROR_NOT_FOUND;
	/* Either may be NULL, as with cuModuleGetGlobal. */
	if (value)
		*value = m->var_addr[var - m->img->vars];
	if (size)
		*size = var->size;
	return CUDA_SUCCESS;
}

static int32_t sim_function_params(struct pvgpu_exec *ex, uint64_t func,
				   struct pvgpu_param_info *layout,
				   uint32_t max, uint32_t *count)
{
	const struct sim_kernel *k;
	struct sim_obj *f;
	uint32_t i;
	int32_t rc;

	f = ctx_obj(ex, !count || (max && !layout), func, func_get, &rc);
	if (!f)
		return rc;
	k = f->u.func.k;
	for (i = 0; i < k->nparams && i < max; i++)
		layout[i] = k->params[i];
	*count = k->nparams;
	return CUDA_SUCCESS;
}

static int32_t sim_function_attribute(struct pvgpu_exec *ex, uint64_t func,
				      int32_t attr, int32_t *value)
{
	const struct sim_kernel *k;
	struct sim_obj *f;
	int32_t rc;

	f = ctx_obj(ex, !value, func, func_get, &rc);
	if (!f)
		return rc;
	k = f->u.func.k;

	/* What cuFuncGetAttribute would say of an sm_90 build of it. */
	switch (attr) {
	case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
		*value = (int32_t)k->max_threads;
		break;
	case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
		*value = (int32_t)k->static_shared;
		break;
	case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
		*value = 0;
		break;
	case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
		*value = (int32_t)k->local_bytes;
		break;
	case CU_FUNC_ATTRIBUTE_NUM_REGS:
		*value = k->num_regs ? (int32_t)k->num_regs :
				       SIM_DEFAULT_NUM_REGS;
		break;
	case CU_FUNC_ATTRIBUTE_PTX_VERSION:
	case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
		*value = SIM_MODULE_ARCH;
		break;
	case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
		*value = 0;
		break;
	case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
		*value = f->u.func.max_dyn_shared;
		break;
	case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
		*value = f->u.func.carveout;
		break;
	case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET:
		*value = 0;
		break;
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
		*value = f->u.func.cluster[attr -
				CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH];
		break;
	case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
		*value = f->u.func.cluster_nonportable;
		break;
	case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
		*value = f->u.func.cluster_policy;
		break;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

static int32_t sim_function_set_attribute(struct pvgpu_exec *ex,
					  uint64_t func, int32_t attr,
					  int32_t value)
{
	const struct sim_kernel *k;
	struct sim_obj *f;
	int32_t rc;

	f = ctx_obj(ex, false, func, func_get, &rc);
	if (!f)
		return rc;
	k = f->u.func.k;

	switch (attr) {
	case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
		/* Static and dynamic shared memory share the 227 KiB. */
		if (value < 0 ||
		    (int64_t)value + k->static_shared > SIM_MAX_SHARED_OPTIN)
			return CUDA_ERROR_INVALID_VALUE;
		f->u.func.max_dyn_shared = value;
		break;
	case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
		if (value < -1 || value > 100)
			return CUDA_ERROR_INVALID_VALUE;
		f->u.func.carveout = value;
		break;
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
		if (value < 0 || value > 8)
			return CUDA_ERROR_INVALID_VALUE;
		f->u.func.cluster[attr -
				  CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH] =
			value;
		break;
	case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
		if (value != 0 && value != 1)
			return CUDA_ERROR_INVALID_VALUE;
		f->u.func.cluster_nonportable = value;
		break;
	case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
		if (value < CU_CLUSTER_SCHEDULING_POLICY_DEFAULT ||
		    value > CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING)
			return CUDA_ERROR_INVALID_VALUE;
		f->u.func.cluster_policy = value;
		break;
	default:
		/* The others are read-only. */
		return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* peers: several simulated devices of one session */

static bool ctx_has_peer(const struct sim_obj *c, const struct sim_obj *peer)
{
	for (unsigned int i = 0; i < c->u.ctx.npeers; i++)
		if (c->u.ctx.peers[i] == peer)
			return true;
	return false;
}

static bool can_peer(struct pvgpu_exec *ex, int32_t dev, int32_t peer)
{
	return dev != peer && !ex->no_peer[dev][peer];
}

/* cuDeviceGetP2PAttribute, or cuDeviceCanAccessPeer (executor.h). */
static int32_t sim_peer_attribute(struct pvgpu_exec *ex, int32_t attr,
				  int32_t src, int32_t dst, int32_t *value)
{
	bool can;

	if (!ex || !value)
		return CUDA_ERROR_INVALID_VALUE;
	if (bad_dev(ex, src) || bad_dev(ex, dst))
		return CUDA_ERROR_INVALID_DEVICE;
	can = can_peer(ex, src, dst);
	if (attr == PVGPU_PEER_CAN_ACCESS) {
		*value = can;
		return CUDA_SUCCESS;
	}
	if (src == dst)
		return CUDA_ERROR_INVALID_DEVICE;
	switch (attr) {
	case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK:
		*value = 0;
		return CUDA_SUCCESS;
	case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
	case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
	case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED:
		*value = can;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

static int32_t peer_enable(struct pvgpu_exec *ex, struct sim_obj *p,
			   uint32_t flags)
{
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	/* A context of the same device included (can_peer: a device is
	 * not its own peer), as NVIDIA's driver answers. */
	if (!can_peer(ex, ex->cur->u.ctx.dev, p->u.ctx.dev))
		return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
	if (ctx_has_peer(ex->cur, p))
		return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
	if (ex->cur->u.ctx.npeers >= SIM_MAX_PEERS)
		return CUDA_ERROR_TOO_MANY_PEERS;
	ex->cur->u.ctx.peers[ex->cur->u.ctx.npeers++] = p;
	return CUDA_SUCCESS;
}

static int32_t peer_disable(struct pvgpu_exec *ex, struct sim_obj *p)
{
	struct sim_obj *c = ex->cur;

	for (unsigned int i = 0; i < c->u.ctx.npeers; i++)
		if (c->u.ctx.peers[i] == p) {
			c->u.ctx.peers[i] = c->u.ctx.peers[--c->u.ctx.npeers];
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
}

/* The current context gains (or loses) access to peer_ctx's memory. */
static int32_t sim_peer_access(struct pvgpu_exec *ex, uint64_t peer_ctx,
			       bool enable, uint32_t flags)
{
	struct sim_obj *p;
	int32_t rc;

	rc = ctx_check(ex);
	if (rc)
		return rc;
	p = obj_find(ex, peer_ctx, SIM_CTX);
	if (!p)
		return CUDA_ERROR_INVALID_CONTEXT;
	return enable ? peer_enable(ex, p, flags) : peer_disable(ex, p);
}

/*
 * [ptr, ptr + size) in one allocation, of any device: under unified
 * addressing the pointer says where it is, and NVIDIA's driver copies
 * memory of another device than the context named with it says.
 */
static unsigned char *peer_bytes(struct pvgpu_exec *ex, uint64_t ctx,
				 uint64_t ptr, uint64_t size, int32_t *rc)
{
	struct sim_obj *c = obj_find(ex, ctx, SIM_CTX);
	struct sim_alloc *a;

	if (!c) {
		*rc = CUDA_ERROR_INVALID_CONTEXT;
		return NULL;
	}
	if (c->u.ctx.poisoned) {
		*rc = c->u.ctx.fault;
		return NULL;
	}
	a = alloc_range(ex, ptr, size);
	if (!a) {
		*rc = CUDA_ERROR_INVALID_VALUE;
		return NULL;
	}
	return a->data + (ptr - a->addr);
}

static int32_t peer_copy(struct pvgpu_exec *ex, uint64_t dst, uint64_t dst_ctx,
			 uint64_t src, uint64_t src_ctx, uint64_t size)
{
	unsigned char *d, *s;
	int32_t rc = CUDA_SUCCESS;

	if (!size)
		return obj_find(ex, dst_ctx, SIM_CTX) &&
		       obj_find(ex, src_ctx, SIM_CTX) ?
		       CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
	d = peer_bytes(ex, dst_ctx, dst, size, &rc);
	s = d ? peer_bytes(ex, src_ctx, src, size, &rc) : NULL;
	if (!d || !s)
		return rc;
	memmove(d, s, (size_t)size);
	return CUDA_SUCCESS;
}

static int32_t array_copy(struct pvgpu_exec *ex,
			  const struct pvgpu_array_copy *c)
{
	struct sim_obj *o = ex && c ? obj_find(ex, c->array, SIM_ARRAY) : NULL;
	int32_t rc;

	if (!o || o->ctx != ex->cur)
		return CUDA_ERROR_INVALID_HANDLE;
	rc = check_stream(ex, c->stream);
	if (rc)
		return rc;
	if (c->x > o->u.array.row || c->width > o->u.array.row - c->x ||
	    c->y > o->u.array.rows || c->height > o->u.array.rows - c->y ||
	    c->z > o->u.array.slices || c->depth > o->u.array.slices - c->z)
		return CUDA_ERROR_INVALID_VALUE;
	for (uint64_t z = 0; z < c->depth; z++)
		for (uint64_t y = 0; y < c->height; y++) {
			unsigned char *a = o->u.array.data + ((c->z + z) * o->u.array.rows +
							      c->y + y) * o->u.array.row + c->x;
			unsigned char *d = dev_bytes(ex, c->dptr + (z * c->rows + y) * c->pitch,
						     c->width);

			if (!d)
				return CUDA_ERROR_INVALID_VALUE;
			if (c->to_array)
				memcpy(a, d, c->width);
			else
				memcpy(d, a, c->width);
		}
	return CUDA_SUCCESS;
}

/*
 * Every copy (executor.h), done at once: a synchronous one is the queued
 * one on the legacy stream (a peer copy's, ordered with both contexts,
 * checks only them).
 */
static int32_t sim_copy(struct pvgpu_exec *ex, const struct pvgpu_exec_copy *c)
{
	uint64_t stream = c->queued ? c->stream : 0;
	int32_t rc;

	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	switch (c->kind) {
	case PVGPU_COPY_HTOD:
		return sim_htod(ex, c->dst, c->host, c->size, stream);
	case PVGPU_COPY_DTOH:
		return sim_dtoh(ex, c->host, c->src, c->size, stream);
	case PVGPU_COPY_DTOD:
		return sim_dtod(ex, c->dst, c->src, c->size, stream);
	case PVGPU_COPY_PEER:
		rc = c->queued ? check_stream(ex, stream) : CUDA_SUCCESS;
		return rc ? rc : peer_copy(ex, c->dst, c->dst_ctx, c->src,
					   c->src_ctx, c->size);
	case PVGPU_COPY_ARRAY:
		return c->array ? array_copy(ex, c->array) :
				  CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------------------------ */
/* running a launch on its CPU twin */

/* One launch in flight; twins see only `pub`. */
struct sim_run {
	struct pvgpu_sim_launch pub;
	struct pvgpu_exec *ex;
	struct sim_obj *ctx;
	struct sim_module *m;
	struct pvgpu_sim_param *layout;
	unsigned char *params;
	unsigned char *shared;
	bool faulted;
	int32_t fault;			/* CUDA_ERROR_ILLEGAL_ADDRESS or _ASSERT */
	char why[160];
	char empty;			/* what a zero-length range points at */
};

static struct sim_run *run_of(const struct pvgpu_sim_launch *l)
{
	return l->sim;
}

static void run_fault(const struct pvgpu_sim_launch *l, const char *why)
{
	struct sim_run *r = run_of(l);

	if (!r->faulted) {
		snprintf(r->why, sizeof(r->why), "%s", why ? why : "fault");
		r->fault = CUDA_ERROR_ILLEGAL_ADDRESS;
	}
	r->faulted = true;
}

static int run_printf(const struct pvgpu_sim_launch *l, const char *fmt, ...)
{
	struct sim_run *r = run_of(l);
	va_list ap;
	int n;

	if (r->faulted)
		return -1;
	va_start(ap, fmt);
	n = sim_output_vadd(r->ex, 0, fmt, ap);
	va_end(ap);
	return n;
}

static void run_assert_add(struct sim_run *r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	(void)sim_output_vadd(r->ex, 1, fmt, ap);
	va_end(ap);
}

/* The driver's words for a failed device assert, then a sticky error. */
static void run_assert_fail(const struct pvgpu_sim_launch *l, const char *expr,
			    const char *file, unsigned int line,
			    const char *func, struct pvgpu_sim_dim3 block,
			    struct pvgpu_sim_dim3 thread)
{
	struct sim_run *r = run_of(l);

	run_assert_add(r, "%s:%u: %s: block: [%u,%u,%u], thread: [%u,%u,%u] "
		       "Assertion `%s` failed.\n", file, line, func, block.x,
		       block.y, block.z, thread.x, thread.y, thread.z, expr);
	if (!r->faulted) {
		snprintf(r->why, sizeof(r->why), "device assert `%s`", expr);
		r->fault = CUDA_ERROR_ASSERT;
	}
	r->faulted = true;
}

static int run_faulted(const struct pvgpu_sim_launch *l)
{
	return run_of(l)->faulted;
}

static void *run_dev(const struct pvgpu_sim_launch *l, uint64_t addr,
		     uint64_t len)
{
	struct sim_run *r = run_of(l);
	struct sim_alloc *a;
	char why[96];

	if (r->faulted)
		return NULL;
	if (!len)
		return &r->empty;
	a = alloc_range(r->ex, addr, len);
	if (!a && host_mapped(r->ex, addr, len))
		return (void *)(uintptr_t)addr;		/* mapped host memory */
	/* Another context's memory is out of reach, unless it is a peer. */
	if (!a || (a->ctx != r->ctx && !ctx_has_peer(r->ctx, a->ctx))) {
		snprintf(why, sizeof(why), "access to [0x%llx, +%llu)",
			 (unsigned long long)addr, (unsigned long long)len);
		run_fault(l, why);
		return NULL;
	}
	return a->data + (addr - a->addr);
}

static void *run_global(const struct pvgpu_sim_launch *l, const char *name,
			uint64_t *size)
{
	struct sim_run *r = run_of(l);
	const struct sim_var *v = sim_image_var(r->m->img, name);
	uint64_t addr;

	if (!v || r->faulted)
		return NULL;
	addr = r->m->var_addr[v - r->m->img->vars];
	if (size)
		*size = v->size;
	return dev_bytes(r->ex, addr, v->size);
}

static void *run_shared(const struct pvgpu_sim_launch *l, size_t bytes)
{
	struct sim_run *r = run_of(l);
	size_t limit = (size_t)l->static_shared + l->dynamic_shared;

	if (r->faulted)
		return NULL;
	if (bytes > limit) {
		run_fault(l, "shared memory beyond the block's static + "
			  "dynamic size");
		return NULL;
	}
	if (!r->shared) {
		r->shared = malloc(limit ? limit : 1);
		if (!r->shared) {
			run_fault(l, "sim out of host memory for shared memory");
			return NULL;
		}
	}
	/* Each block starts with garbage, as on a GPU. */
	memset(r->shared, SIM_SHARED_GARBAGE, bytes);
	return r->shared;
}

/* The checks cuLaunchKernel makes before anything runs. */
static int32_t launch_check(const struct pvgpu_launch *l,
			    const struct sim_obj *f)
{
	const struct sim_kernel *k = f->u.func.k;
	uint64_t threads;

	if (!l->grid[0] || !l->grid[1] || !l->grid[2] ||
	    !l->block[0] || !l->block[1] || !l->block[2])
		return CUDA_ERROR_INVALID_VALUE;
	if (l->block[0] > SIM_MAX_BLOCK_XY || l->block[1] > SIM_MAX_BLOCK_XY ||
	    l->block[2] > SIM_MAX_BLOCK_Z)
		return CUDA_ERROR_INVALID_VALUE;
	threads = (uint64_t)l->block[0] * l->block[1] * l->block[2];
	if (threads > SIM_MAX_BLOCK_THREADS)
		return CUDA_ERROR_INVALID_VALUE;
	if (l->grid[0] > SIM_MAX_GRID_X || l->grid[1] > SIM_MAX_GRID_YZ ||
	    l->grid[2] > SIM_MAX_GRID_YZ)
		return CUDA_ERROR_INVALID_VALUE;
	/* More threads than __launch_bounds__ allows. */
	if (threads > k->max_threads)
		return CUDA_ERROR_INVALID_VALUE;	/* as CUDA 13.0 on an H100 */
	if (l->shared_bytes > (uint32_t)f->u.func.max_dyn_shared)
		return CUDA_ERROR_INVALID_VALUE;
	if (l->params_size < k->param_size || (k->param_size && !l->params))
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

/*
 * Resident blocks per SM, as an sm_90 would have them: limited by threads
 * (2048 per SM), blocks (32), registers (64 K) and shared memory (228 KiB).
 */
static int32_t sim_occupancy(struct pvgpu_exec *ex, uint64_t func,
			     int32_t block_size, uint64_t dynamic_smem,
			     uint32_t flags, int32_t *blocks)
{
	const struct sim_kernel *k;
	struct sim_obj *f;
	uint64_t regs, smem, n;
	int32_t rc;

	(void)flags;
	f = ctx_obj(ex, !blocks || block_size <= 0 || block_size > 1024,
		    func, func_get, &rc);
	if (!f)
		return rc;
	k = f->u.func.k;
	n = 2048 / (uint64_t)block_size;
	if (n > 32)
		n = 32;
	regs = (uint64_t)(k->num_regs ? k->num_regs : SIM_DEFAULT_NUM_REGS) *
	       (uint64_t)block_size;
	if (regs && 65536 / regs < n)
		n = 65536 / regs;
	smem = k->static_shared + dynamic_smem + 1024;	/* 1 KiB reserved */
	if (228 * 1024 / smem < n)
		n = 228 * 1024 / smem;
	*blocks = (int32_t)n;
	return CUDA_SUCCESS;
}

/*
 * What an sm_90 leaves a block of dynamic shared memory with num_blocks
 * resident per SM: 228 KiB per SM, 1 KiB of it reserved per block, at most
 * 227 KiB per block, less the kernel's static shared memory.
 */
static int32_t sim_dynamic_smem(struct pvgpu_exec *ex, uint64_t func,
				int32_t num_blocks, int32_t block_size,
				uint64_t *bytes)
{
	const struct sim_kernel *k;
	struct sim_obj *f;
	uint64_t per_block;
	int32_t rc;

	f = ctx_obj(ex, !bytes || num_blocks <= 0 || num_blocks > 32 ||
		    block_size <= 0 || block_size > 1024 ||
		    (int64_t)num_blocks * block_size > 2048,
		    func, func_get, &rc);
	if (!f)
		return rc;
	k = f->u.func.k;
	per_block = 228 * 1024 / (uint64_t)num_blocks - 1024;
	if (per_block > 227 * 1024)
		per_block = 227 * 1024;
	*bytes = per_block > k->static_shared ? per_block - k->static_shared : 0;
	return CUDA_SUCCESS;
}

/*
 * Resident clusters on a simulated sm_90 with 132 SMs in GPCs of 16: a
 * cluster's blocks share a GPC, at most 8 per cluster (16 non-portable is
 * not modelled), each SM holding what sim_occupancy says.
 */
static int32_t sim_max_clusters(struct pvgpu_exec *ex, uint64_t func,
				const struct pvgpu_launch *s,
				const uint32_t cluster[3], int32_t *clusters)
{
	uint64_t size = (uint64_t)cluster[0] * cluster[1] * cluster[2];
	uint64_t threads = (uint64_t)s->block[0] * s->block[1] * s->block[2];
	int32_t per_sm = 0, rc;

	if (!clusters || threads == 0 || threads > 1024)
		return CUDA_ERROR_INVALID_VALUE;
	if (size == 0)
		size = 1;	/* no cluster dimensions: clusters of one block */
	if (size > 8)
		return CUDA_ERROR_INVALID_CLUSTER_SIZE;
	rc = sim_occupancy(ex, func, (int32_t)threads, s->shared_bytes, 0,
			   &per_sm);
	if (rc)
		return rc;
	/* 8 GPCs of 16 SMs and one of 4: whole clusters per GPC. */
	*clusters = (int32_t)(8 * (16 * (uint64_t)per_sm / size) +
			      4 * (uint64_t)per_sm / size);
	return CUDA_SUCCESS;
}

/*
 * Launch attributes as an sm_90 takes them: clusters of at most 8 blocks
 * that tile the grid; a cooperative grid no larger than what is resident
 * at once on 132 SMs; the rest (priority, scheduling hints) change nothing
 * a simulated device can show.
 */
static int32_t sim_launch_attrs(struct pvgpu_exec *ex,
				const struct pvgpu_launch *l,
				struct pvgpu_sim_dim3 *cluster, int *coop)
{
	*cluster = (struct pvgpu_sim_dim3){ 1, 1, 1 };
	*coop = 0;
	for (uint32_t i = 0; i < l->nattrs; i++) {
		const uint32_t *v = l->attrs[i].v;

		switch (l->attrs[i].id) {
		case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
			if (!v[0] || !v[1] || !v[2] ||
			    (uint64_t)v[0] * v[1] * v[2] > 8 ||
			    l->grid[0] % v[0] || l->grid[1] % v[1] ||
			    l->grid[2] % v[2])
				return CUDA_ERROR_INVALID_CLUSTER_SIZE;
			*cluster = (struct pvgpu_sim_dim3){ v[0], v[1], v[2] };
			break;
		case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
			*coop = v[0] != 0;
			break;
		case CU_LAUNCH_ATTRIBUTE_PRIORITY:
		case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
		case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
		case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
		case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
		case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
		case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
			break;
		default:
			return CUDA_ERROR_NOT_SUPPORTED;
		}
	}
	if (*coop) {
		uint64_t blocks = (uint64_t)l->grid[0] * l->grid[1] * l->grid[2];
		int32_t per_sm = 0;
		int32_t rc = sim_occupancy(ex, l->func,
					   (int32_t)(l->block[0] * l->block[1] * l->block[2]),
					   l->shared_bytes, 0, &per_sm);

		if (rc)
			return rc;
		if (blocks > 132 * (uint64_t)per_sm)
			return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
	}
	return CUDA_SUCCESS;
}

static int32_t launch_one(struct pvgpu_exec *ex,
			  const struct pvgpu_launch *launch)
{
	struct pvgpu_sim_dim3 cluster;
	int coop;
	const struct sim_kernel *k;
	struct sim_run r;
	struct sim_obj *f;
	uint32_t i;
	int32_t rc;

	if (!ex || !launch)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ctx_check(ex) && capturing(ex, launch->stream)) {
		f = func_get(ex, launch->func);
		if (!f)
			return CUDA_ERROR_INVALID_HANDLE;
		rc = launch_check(launch, f);
		if (!rc)
			rc = sim_launch_attrs(ex, launch, &cluster, &coop);
		return rc ? rc : graph_capture(ex, obj_find(ex, launch->stream, SIM_STREAM),
					       launch, NULL);
	}
	rc = check_stream(ex, launch->stream);
	if (rc)
		return rc;
	f = func_get(ex, launch->func);
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	rc = launch_check(launch, f);
	if (!rc)
		rc = sim_launch_attrs(ex, launch, &cluster, &coop);
	if (rc)
		return rc;
	k = f->u.func.k;
	if (!f->u.func.twin) {
		if (!f->u.func.warned)
			sim_diag(ex, "cannot launch kernel %s: no CPU twin is "
				 "registered for it (PVGPU_SIM_TWINS)", k->name);
		f->u.func.warned = true;
		return CUDA_ERROR_NOT_FOUND;
	}

	memset(&r, 0, sizeof(r));
	r.ex = ex;
	r.ctx = ex->cur;
	r.m = f->u.func.module->u.module.m;
	rc = CUDA_ERROR_OUT_OF_MEMORY;
	/* Copies, so a twin can neither see nor scribble on the caller's. */
	r.layout = calloc(k->nparams ? k->nparams : 1, sizeof(*r.layout));
	r.params = malloc(k->param_size ? k->param_size : 1);
	if (!r.layout || !r.params)
		goto out;
	for (i = 0; i < k->nparams; i++) {
		r.layout[i].offset = k->params[i].offset;
		r.layout[i].size = k->params[i].size;
	}
	if (k->param_size)
		memcpy(r.params, launch->params, k->param_size);

	r.pub.name = k->name;
	r.pub.grid = (struct pvgpu_sim_dim3){ launch->grid[0], launch->grid[1],
					      launch->grid[2] };
	r.pub.block = (struct pvgpu_sim_dim3){ launch->block[0],
					       launch->block[1],
					       launch->block[2] };
	r.pub.static_shared = k->static_shared;
	r.pub.dynamic_shared = launch->shared_bytes;
	r.pub.params = r.params;
	r.pub.params_size = k->param_size;
	r.pub.layout = r.layout;
	r.pub.nparams = k->nparams;
	r.pub.dev = run_dev;
	r.pub.global = run_global;
	r.pub.shared = run_shared;
	r.pub.fault = run_fault;
	r.pub.faulted = run_faulted;
	r.pub.sim = &r;
	r.pub.dev_printf = run_printf;
	r.pub.assert_fail = run_assert_fail;
	r.pub.cluster = cluster;
	r.pub.cooperative = coop;

	f->u.func.twin->run(&r.pub);

	rc = CUDA_SUCCESS;
	if (r.faulted) {
		sim_diag(ex, "kernel %s faulted: %s", k->name, r.why);
		ex->cur->u.ctx.poisoned = true;
		ex->cur->u.ctx.fault = r.fault;
		rc = r.fault;
	}
out:
	free(r.shared);
	free(r.params);
	free(r.layout);
	return rc;
}

/*
 * A run of identical launches (host-backend/session/runs.c): declined the
 * first time a function's runs on a stream are seen, as the CUDA executor
 * declines until its graph is worth making, then that many launches.
 */
static int32_t launch_run(struct pvgpu_exec *ex,
			  const struct pvgpu_launch *launch)
{
	int32_t rc = CUDA_SUCCESS;

	if (!ex || !launch)
		return CUDA_ERROR_INVALID_VALUE;
	if (ex->run_func != launch->func || ex->run_stream != launch->stream) {
		ex->run_func = launch->func;
		ex->run_stream = launch->stream;
		return PVGPU_EXEC_DECLINED;
	}
	for (uint32_t i = 0; i < PVGPU_LAUNCH_RUN && !rc; i++)
		rc = launch_one(ex, launch);
	return rc;
}

static int32_t sim_launch(struct pvgpu_exec *ex,
			  const struct pvgpu_launch *launch)
{
	return launch && launch->run ? launch_run(ex, launch) :
				       launch_one(ex, launch);
}

/*
 * CUDA arrays: a dense block of host memory, row after row, slice after
 * slice (a GPU lays them out in its own way, which no program can see).
 */
static int32_t sim_array_create(struct pvgpu_exec *ex,
				const struct pvgpu_array_desc *d, uint64_t *array)
{
	uint32_t fb = d->format == CU_AD_FORMAT_UNSIGNED_INT8 ||
		      d->format == CU_AD_FORMAT_SIGNED_INT8 ? 1 :
		      d->format == CU_AD_FORMAT_UNSIGNED_INT16 ||
		      d->format == CU_AD_FORMAT_SIGNED_INT16 ||
		      d->format == CU_AD_FORMAT_HALF ? 2 :
		      d->format == CU_AD_FORMAT_UNSIGNED_INT32 ||
		      d->format == CU_AD_FORMAT_SIGNED_INT32 ||
		      d->format == CU_AD_FORMAT_FLOAT ? 4 : 0;
	uint64_t row, rows, slices;
	struct sim_obj *o;
	int32_t rc;

	if (!ex || !d || !array)
		return CUDA_ERROR_INVALID_VALUE;
	rc = ctx_check(ex);
	if (rc)
		return rc;
	if (!fb || !d->width || d->width > 65536 || d->height > 65536 ||
	    d->depth > 16384 || (d->channels != 1 && d->channels != 2 &&
				 d->channels != 4) ||
	    (d->depth && !d->height && !(d->flags & CUDA_ARRAY3D_LAYERED)))
		return CUDA_ERROR_INVALID_VALUE;
	row = d->width * fb * d->channels;
	rows = d->height ? d->height : 1;
	slices = d->depth ? d->depth : 1;
	if (row * rows * slices > (4ull << 30))
		return CUDA_ERROR_OUT_OF_MEMORY;
	o = obj_new(ex, SIM_ARRAY, ex->cur);
	if (!o)
		return CUDA_ERROR_OUT_OF_MEMORY;
	o->u.array.data = calloc(row * rows * slices, 1);
	if (!o->u.array.data) {
		obj_free(ex, o);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	o->u.array.row = row;
	o->u.array.rows = rows;
	o->u.array.slices = slices;
	o->u.array.flags = d->flags;
	*array = o->handle;
	return CUDA_SUCCESS;
}

static int32_t sim_array_destroy(struct pvgpu_exec *ex, uint64_t array)
{
	struct sim_obj *o = ex ? obj_find(ex, array, SIM_ARRAY) : NULL;

	if (!o || o->ctx != ex->cur)
		return CUDA_ERROR_INVALID_HANDLE;
	obj_free(ex, o);
	return CUDA_SUCCESS;
}

/* A surface object of an array of the current context. */
static int32_t surf_create(struct pvgpu_exec *ex, uint64_t array,
			   uint64_t *obj)
{
	struct sim_obj *a, *o;
	int32_t rc;

	if (!ex || !obj)
		return CUDA_ERROR_INVALID_VALUE;
	rc = ctx_check(ex);
	if (rc)
		return rc;
	a = obj_find(ex, array, SIM_ARRAY);
	if (!a || a->ctx != ex->cur)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!(a->u.array.flags & CUDA_ARRAY3D_SURFACE_LDST))
		return CUDA_ERROR_INVALID_VALUE;
	o = obj_new(ex, SIM_SURF, ex->cur);
	if (!o)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*obj = o->handle;
	return CUDA_SUCCESS;
}

/*
 * Texture and surface objects: the sim cannot sample, so an object is an
 * opaque value of the context, its resource checked (the array the
 * context's, the memory inside one allocation) and nothing more.  They
 * go with their context as every object does.
 */
static int32_t sim_tex_create(struct pvgpu_exec *ex,
			      const struct pvgpu_tex_desc *d, bool surface,
			      uint64_t *obj)
{
	struct sim_obj *a, *o;
	uint64_t span;
	int32_t rc;

	if (!ex || !d || !obj)
		return CUDA_ERROR_INVALID_VALUE;
	if (surface)
		return surf_create(ex, d->array, obj);
	rc = ctx_check(ex);
	if (rc)
		return rc;
	if (d->res_type == CU_RESOURCE_TYPE_ARRAY) {
		a = obj_find(ex, d->array, SIM_ARRAY);
		if (!a || a->ctx != ex->cur)
			return CUDA_ERROR_INVALID_HANDLE;
	} else {
		/* As the driver: the base must be device memory; the span may
		 * run past its allocation. */
		span = d->res_type == CU_RESOURCE_TYPE_LINEAR ? d->size :
		       (d->height - 1) * d->pitch + d->width;
		if (!span || !dev_bytes(ex, d->dptr, 1))
			return CUDA_ERROR_INVALID_VALUE;
	}
	o = obj_new(ex, SIM_TEX, ex->cur);
	if (!o)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*obj = o->handle;
	return CUDA_SUCCESS;
}

/*
 * A TMA descriptor: the driver's encoding is its own, so the sim's is
 * a plain one of its own (the address, then the fields), enough for the
 * tests to see every field arrive.
 */
static int32_t sim_tensor_map_encode(struct pvgpu_exec *ex,
				     const struct pvgpu_tensor_map *m, uint64_t desc[16])
{
	int32_t rc;

	if (!ex || !m || !desc)
		return CUDA_ERROR_INVALID_VALUE;
	rc = ctx_check(ex);
	if (rc)
		return rc;
	if (m->dtype > CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ || (m->address & 15) ||
	    !dev_bytes(ex, m->address, 1))
		return CUDA_ERROR_INVALID_VALUE;
	memset(desc, 0, 16 * sizeof(uint64_t));
	desc[0] = m->address;
	desc[1] = (uint64_t)m->dtype | (uint64_t)m->rank << 8 | (uint64_t)m->im2col << 16 |
		  (uint64_t)m->swizzle << 24 | (uint64_t)m->interleave << 32 |
		  (uint64_t)m->l2 << 40 | (uint64_t)m->oob << 48;
	for (uint32_t i = 0; i < m->rank; i++) {
		desc[2 + i] = m->dims[i];
		desc[7 + i] = (uint64_t)(m->im2col ? m->elem_strides[i] : m->box[i]) << 32 |
			      m->elem_strides[i];
	}
	for (uint32_t i = 0; i + 1 < m->rank; i++)
		desc[12 + i] = m->strides[i];
	return CUDA_SUCCESS;
}

static int32_t sim_obj_destroy(struct pvgpu_exec *ex, uint64_t obj,
			       enum sim_kind kind)
{
	struct sim_obj *o = ex ? obj_find(ex, obj, kind) : NULL;

	if (!o || o->ctx != ex->cur)
		return CUDA_ERROR_INVALID_HANDLE;
	obj_free(ex, o);
	return CUDA_SUCCESS;
}

/*
 * The generic driver call: what a device without a GPU can answer; the
 * rest is CUDA_ERROR_NOT_SUPPORTED, which the guest sees as such.
 */
static int32_t sim_wait_value(struct pvgpu_exec *ex, uint64_t addr,
			      uint64_t value, uint32_t flags, int wide)
{
	unsigned char *p = dev_bytes(ex, addr, wide ? 8 : 4);
	uint64_t v = 0;
	bool ok;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&v, p, wide ? 8 : 4);
	if (!wide)
		value = (uint32_t)value;
	switch (flags & 0xf) {
	case CU_STREAM_WAIT_VALUE_GEQ:
		ok = wide ? (int64_t)(v - value) >= 0 : (int32_t)(uint32_t)(v - value) >= 0;
		break;
	case CU_STREAM_WAIT_VALUE_EQ:
		ok = v == value;
		break;
	case CU_STREAM_WAIT_VALUE_AND:
		ok = (v & value) != 0;
		break;
	case CU_STREAM_WAIT_VALUE_NOR:
		ok = (~(v | value) & (wide ? ~0ULL : 0xffffffffULL)) != 0;
		break;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	/* Nothing else runs while the sim waits: an unmet wait never ends. */
	if (!ok) {
		sim_diag(ex, "cuStreamWaitValue on a value nothing will change: "
			 "not supported by the sim");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	return CUDA_SUCCESS;
}

/* Stream capture as the sim models it: kernel launches only. */
static int32_t sim_capture_call(struct pvgpu_exec *ex,
				const struct pvgpu_generic_fn *f, uint64_t *a)
{
	struct sim_obj *s, *g;

	if (!a[0])			/* the legacy stream cannot be captured */
		return f->id == PVGPU_GENERIC_cuStreamIsCapturing ?
		       (a[1] = CU_STREAM_CAPTURE_STATUS_NONE, CUDA_SUCCESS) :
		       CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	s = obj_find(ex, a[0], SIM_STREAM);
	if (!s || s->ctx != ex->cur)
		return CUDA_ERROR_INVALID_HANDLE;
	switch (f->id) {
	case PVGPU_GENERIC_cuStreamBeginCapture_v2:
		if (s->u.stream.capture)
			return CUDA_ERROR_ILLEGAL_STATE;
		g = obj_new(ex, SIM_GRAPH, ex->cur);
		if (!g)
			return CUDA_ERROR_OUT_OF_MEMORY;
		s->u.stream.capture = g;
		s->u.stream.ncap = 0;
		s->u.stream.to_graph = false;
		return CUDA_SUCCESS;
	case PVGPU_GENERIC_cuStreamEndCapture:
		if (!s->u.stream.capture)
			return CUDA_ERROR_ILLEGAL_STATE;
		/* A capture into a graph the program has may end without
		 * asking for it (graphConditionalNodes does). */
		if (!a[1] && !s->u.stream.to_graph)
			return CUDA_ERROR_INVALID_VALUE;
		a[1] = s->u.stream.capture->handle;
		s->u.stream.capture = NULL;
		s->u.stream.to_graph = false;
		return CUDA_SUCCESS;
	default:			/* cuStreamIsCapturing */
		if (!a[1])
			return CUDA_ERROR_INVALID_VALUE;
		a[1] = s->u.stream.capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE :
					     CU_STREAM_CAPTURE_STATUS_NONE;
		return CUDA_SUCCESS;
	}
}

/* Graph memory: the sim makes an allocation node's memory at once and
 * keeps it (a graph may run any number of times). */
static int32_t graph_mem_alloc(struct pvgpu_exec *ex, uint64_t size,
			       uint64_t *dptr)
{
	int32_t rc = size ? sim_mem_alloc(ex, size, dptr) : CUDA_ERROR_INVALID_VALUE;
	size_t i;

	if (rc)
		return rc;
	i = alloc_upper_bound(ex, *dptr);
	ex->allocs[i - 1].graph = true;
	ex->graph_mem += size;
	if (ex->graph_mem > ex->graph_mem_high)
		ex->graph_mem_high = ex->graph_mem;
	return CUDA_SUCCESS;
}

static int32_t sim_mem_async(struct pvgpu_exec *ex, uint64_t stream,
			     uint64_t size, uint64_t *dptr)
{
	struct sim_obj *s;
	struct pvgpu_graph_node c = { .type = CU_GRAPH_NODE_TYPE_MEM_FREE };
	int32_t rc;

	if (!ex || !dptr)
		return CUDA_ERROR_INVALID_VALUE;
	rc = ctx_check(ex);
	if (rc)
		return rc;
	s = stream ? obj_find(ex, stream, SIM_STREAM) : NULL;
	if (!s || s->ctx != ex->cur || !s->u.stream.capture) {
		sim_diag(ex, "stream-ordered graph memory outside a capture: not "
			 "modelled by the sim");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (size) {
		rc = graph_mem_alloc(ex, size, dptr);
		if (rc)
			return rc;
		c.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
		c.width = size;
	}
	c.dst = *dptr;			/* what its runs map or unmap */
	return graph_capture(ex, s, NULL, &c);
}

/* cuGraphConditionalHandleCreate: a value of the sim's own. */
static int32_t sim_cond_handle(struct pvgpu_exec *ex, uint64_t graph,
			       uint32_t default_value, uint32_t flags,
			       uint64_t *handle)
{
	int32_t rc;

	(void)default_value;
	(void)flags;
	if (!ex || !handle)
		return CUDA_ERROR_INVALID_VALUE;
	rc = ctx_check(ex);
	if (rc)
		return rc;
	if (!obj_find(ex, graph, SIM_GRAPH))
		return CUDA_ERROR_INVALID_HANDLE;
	*handle = ++ex->serial;
	return CUDA_SUCCESS;
}

/* cuStreamGetCaptureInfo: the graph's handle doubles as the capture id. */
static int32_t sim_capture_info(struct pvgpu_exec *ex, uint64_t stream,
				uint32_t *status, uint64_t *id, uint64_t *graph,
				uint64_t *nodes, uint32_t *types, uint64_t *edges,
				uint32_t max, uint64_t *count)
{
	struct sim_obj *s, *g;
	int32_t rc;

	if (!ex || !status || !id || !graph || !count ||
	    (max && (!nodes || !types || !edges)))
		return CUDA_ERROR_INVALID_VALUE;
	rc = ctx_check(ex);
	if (rc)
		return rc;
	*status = CU_STREAM_CAPTURE_STATUS_NONE;
	*id = *graph = *count = 0;
	if (!stream)			/* the legacy stream is never captured */
		return CUDA_SUCCESS;
	s = obj_find(ex, stream, SIM_STREAM);
	if (!s || s->ctx != ex->cur)
		return CUDA_ERROR_INVALID_HANDLE;
	g = s->u.stream.capture;
	if (!g)
		return CUDA_SUCCESS;
	*status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
	*id = *graph = g->handle;
	*count = s->u.stream.ncap;
	for (size_t i = 0; i < s->u.stream.ncap && i < max; i++) {
		const struct sim_graph_launch *e = NULL;

		for (size_t k = 0; k < g->u.graph.n && !e; k++)
			if (g->u.graph.v[k].node == s->u.stream.cap_deps[i])
				e = &g->u.graph.v[k];
		nodes[i] = s->u.stream.cap_deps[i];
		types[i] = e ? e->type : CU_GRAPH_NODE_TYPE_EMPTY;
		edges[i] = 0;
	}
	return CUDA_SUCCESS;
}

static int32_t sim_capture_deps(struct pvgpu_exec *ex, uint64_t stream,
				const uint64_t *nodes, const uint64_t *edges,
				uint32_t n, uint32_t flags);

/* cuStreamBeginCaptureToGraph: the capture's nodes go into graph. */
static int32_t sim_capture_to_graph(struct pvgpu_exec *ex, uint64_t stream,
				    uint64_t graph, const uint64_t *nodes,
				    const uint64_t *edges, uint32_t n,
				    uint32_t mode)
{
	struct sim_obj *s, *g;
	int32_t rc;

	(void)mode;
	rc = ctx_check(ex);
	if (rc)
		return rc;
	s = stream ? obj_find(ex, stream, SIM_STREAM) : NULL;
	g = obj_find(ex, graph, SIM_GRAPH);
	if (!s || s->ctx != ex->cur || !g)
		return CUDA_ERROR_INVALID_HANDLE;
	if (s->u.stream.capture)
		return CUDA_ERROR_ILLEGAL_STATE;
	s->u.stream.capture = g;
	s->u.stream.ncap = 0;
	rc = sim_capture_deps(ex, stream, nodes, edges, n, 1);
	if (rc)
		s->u.stream.capture = NULL;
	s->u.stream.to_graph = !rc;
	return rc;
}

/* cuStreamUpdateCaptureDependencies: default edges only. */
static int32_t sim_capture_deps(struct pvgpu_exec *ex, uint64_t stream,
				const uint64_t *nodes, const uint64_t *edges,
				uint32_t n, uint32_t flags)
{
	struct sim_obj *s, *g;
	size_t base;
	int32_t rc;

	if (!ex || (n && !nodes) || flags > 1)
		return CUDA_ERROR_INVALID_VALUE;
	rc = ctx_check(ex);
	if (rc)
		return rc;
	s = stream ? obj_find(ex, stream, SIM_STREAM) : NULL;
	if (!s || s->ctx != ex->cur)
		return stream ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_ILLEGAL_STATE;
	g = s->u.stream.capture;
	if (!g)
		return CUDA_ERROR_ILLEGAL_STATE;
	for (uint32_t i = 0; edges && i < n; i++)
		if (edges[i]) {
			sim_diag(ex, "edge data in capture dependencies: not "
				 "supported by the sim");
			return CUDA_ERROR_NOT_SUPPORTED;
		}
	base = flags ? 0 : s->u.stream.ncap;
	if (n > SIM_CAP_DEPS - base) {
		sim_diag(ex, "more than %d capture dependencies: not supported "
			 "by the sim", SIM_CAP_DEPS);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	for (uint32_t i = 0; i < n; i++) {
		bool known = false;

		for (size_t k = 0; k < g->u.graph.n && !known; k++)
			known = g->u.graph.v[k].node == nodes[i];
		if (!known)
			return CUDA_ERROR_INVALID_VALUE;
	}
	memcpy(s->u.stream.cap_deps + base, nodes, n * sizeof(*nodes));
	s->u.stream.ncap = base + n;
	return CUDA_SUCCESS;
}

/* The entry of graph g with this node handle, or NULL. */
static struct sim_graph_launch *graph_entry(struct sim_obj *g, uint64_t node)
{
	for (size_t i = 0; node && i < g->u.graph.n; i++)
		if (g->u.graph.v[i].node == node)
			return &g->u.graph.v[i];
	return NULL;
}

/* The graph holding node, or NULL. */
static struct sim_obj *node_graph(struct pvgpu_exec *ex, uint64_t node)
{
	if (node >> SIM_HANDLE_KIND_SHIFT != SIM_GRAPH_NODE)
		return NULL;
	for (size_t i = 0; i < ex->nobjs; i++)
		if (ex->objs[i]->kind == SIM_GRAPH &&
		    graph_entry(ex->objs[i], node))
			return ex->objs[i];
	return NULL;
}

/* A copy of entry e at the end of x (its edges left out). */
static int32_t graph_copy_entry(struct sim_obj *x,
				const struct sim_graph_launch *e)
{
	struct sim_graph_launch *c;
	int32_t rc = graph_add(x, &e->l);

	if (rc)
		return rc;
	c = &x->u.graph.v[x->u.graph.n - 1];
	c->type = e->type;
	c->node = e->node;
	c->n = e->n;
	return CUDA_SUCCESS;
}

/* g's entries into x in an order where each comes after those it depends
 * on (Kahn's, by passes); a cycle is CUDA_ERROR_INVALID_VALUE. */
static int32_t graph_order(struct sim_obj *g, struct sim_obj *x)
{
	size_t n = g->u.graph.n, placed = 0;
	bool *done = calloc(n ? n : 1, sizeof(*done));
	int32_t rc = CUDA_SUCCESS;

	if (!done)
		return CUDA_ERROR_OUT_OF_MEMORY;
	while (placed < n && !rc) {
		size_t before = placed;

		for (size_t i = 0; i < n && !rc; i++) {
			const struct sim_graph_launch *e = &g->u.graph.v[i];
			bool ready = !done[i];

			for (size_t d = 0; ready && d < e->ndeps; d++) {
				struct sim_graph_launch *p = graph_entry(g, e->deps[d]);

				ready = !p || done[p - g->u.graph.v];
			}
			if (!ready)
				continue;
			rc = graph_copy_entry(x, e);
			done[i] = true;
			placed++;
		}
		if (!rc && placed == before)
			rc = CUDA_ERROR_INVALID_VALUE;	/* a cycle */
	}
	free(done);
	return rc;
}

/* One node of an executable graph, on stream. */
static int32_t graph_node_run(struct pvgpu_exec *ex,
			      const struct sim_graph_launch *e, uint64_t stream)
{
	struct pvgpu_launch l = e->l;
	int32_t rc = CUDA_SUCCESS;

	switch (e->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL:
		l.stream = stream;
		l.attrs = e->attrs;	/* the vector may have moved */
		return sim_launch(ex, &l);
	case CU_GRAPH_NODE_TYPE_MEMSET:
		for (uint64_t r = 0; r < e->n.height && !rc; r++)
			rc = sim_memset_async(ex, e->n.dst + r * e->n.pitch,
					      e->n.value, e->n.elem_size,
					      e->n.width, stream);
		return rc;
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		if (e->n.host && e->n.to_host)
			return sim_dtoh(ex, e->n.host, e->n.src, e->n.width,
					stream);
		if (e->n.host)
			return sim_htod(ex, e->n.dst, e->n.host, e->n.width,
					stream);
		return sim_dtod(ex, e->n.dst, e->n.src, e->n.width, stream);
	case CU_GRAPH_NODE_TYPE_CONDITIONAL:
		/* Its condition is set by kernels the sim does not run on a
		 * GPU: which body would run is not modelled. */
		sim_diag(ex, "a conditional graph node: not run by the sim");
		return CUDA_ERROR_NOT_SUPPORTED;
	case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
	case CU_GRAPH_NODE_TYPE_MEM_FREE: {
		struct sim_alloc *a = alloc_range(ex, e->n.dst, 1);

		if (a && a->graph)
			a->unmapped = e->type == CU_GRAPH_NODE_TYPE_MEM_FREE;
		return CUDA_SUCCESS;
	}
	default:
		return CUDA_SUCCESS;		/* empty */
	}
}

static int32_t sim_graph_add_node(struct pvgpu_exec *ex, uint64_t graph,
				  const struct pvgpu_graph_node *n,
				  const uint64_t *deps, uint32_t ndeps,
				  uint64_t *node)
{
	struct sim_graph_launch *e;
	struct pvgpu_launch empty = { 0 };
	struct sim_obj *g, *f;
	int32_t rc;

	g = ctx_obj(ex, !n || !node || (ndeps && !deps), graph, graph_get, &rc);
	if (!g)
		return rc;
	for (uint32_t i = 0; i < ndeps; i++)
		if (!graph_entry(g, deps[i]))
			return CUDA_ERROR_INVALID_VALUE;
	switch (n->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL:
		f = func_get(ex, n->kernel.func);
		if (!f)
			return CUDA_ERROR_INVALID_HANDLE;
		rc = launch_check(&n->kernel, f);
		if (rc)
			return rc;
		break;
	case CU_GRAPH_NODE_TYPE_MEMSET:
	case CU_GRAPH_NODE_TYPE_MEMCPY:
	case CU_GRAPH_NODE_TYPE_EMPTY:
	case CU_GRAPH_NODE_TYPE_MEM_FREE:
		break;
	case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
		if (!n->alloc)
			return CUDA_ERROR_INVALID_VALUE;
		break;
	case CU_GRAPH_NODE_TYPE_CONDITIONAL:
		if (!n->bodies || !n->cond_size || n->cond_size > 64 || !n->cond)
			return CUDA_ERROR_INVALID_VALUE;
		/* The body graphs: empty graphs of the context's. */
		for (uint32_t i = 0; i < n->cond_size; i++) {
			struct sim_obj *b = obj_new(ex, SIM_GRAPH, ex->cur);

			if (!b)
				return CUDA_ERROR_OUT_OF_MEMORY;
			n->bodies[i] = b->handle;
		}
		break;
	default:
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (ex->serial >= SIM_HANDLE_SERIAL_MASK)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
		rc = graph_mem_alloc(ex, n->width, n->alloc);
		if (rc)
			return rc;
	}
	rc = graph_add(g, n->type == CU_GRAPH_NODE_TYPE_KERNEL ? &n->kernel : &empty);
	if (rc)
		return rc;
	e = &g->u.graph.v[g->u.graph.n - 1];
	if (ndeps) {
		e->deps = malloc(ndeps * sizeof(*deps));
		if (!e->deps) {
			free(e->params);
			g->u.graph.n--;
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		memcpy(e->deps, deps, ndeps * sizeof(*deps));
		e->ndeps = ndeps;
	}
	e->type = n->type;
	e->n = *n;
	e->n.kernel = (struct pvgpu_launch){ 0 };
	if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
		e->n.dst = *n->alloc;	/* what its runs map (graph_node_run) */
	e->n.alloc = NULL;
	e->n.bodies = NULL;
	e->node = node_new(ex);
	*node = e->node;
	return CUDA_SUCCESS;
}

static int32_t sim_graph_kernel_node_set(struct pvgpu_exec *ex,
					 uint64_t exec, uint64_t node,
					 const struct pvgpu_launch *l)
{
	struct sim_graph_launch *e;
	struct sim_obj *g, *f;
	unsigned char *p;
	int32_t rc;

	if (!ex || !l)
		return CUDA_ERROR_INVALID_VALUE;
	rc = ctx_check(ex);
	if (rc)
		return rc;
	g = exec ? obj_find(ex, exec, SIM_GRAPH_EXEC) : node_graph(ex, node);
	e = g ? graph_entry(g, node) : NULL;
	if (!e)
		return exec && g ? CUDA_ERROR_INVALID_VALUE :
				   CUDA_ERROR_INVALID_HANDLE;
	if (e->type != CU_GRAPH_NODE_TYPE_KERNEL)
		return CUDA_ERROR_INVALID_VALUE;
	f = func_get(ex, l->func);
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	rc = launch_check(l, f);
	if (rc)
		return rc;
	p = malloc(l->params_size ? l->params_size : 1);
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (l->params_size)
		memcpy(p, l->params, l->params_size);
	free(e->params);
	e->params = p;
	e->l = *l;
	e->l.params = p;
	e->l.attrs = e->attrs;
	e->l.nattrs = 0;
	e->l.layout = NULL;
	e->l.nparams = 0;
	return CUDA_SUCCESS;
}

static int32_t sim_graph_add_deps(struct pvgpu_exec *ex, uint64_t graph,
				  const uint64_t *from, const uint64_t *to,
				  uint32_t n)
{
	struct sim_obj *g;
	int32_t rc;

	g = ctx_obj(ex, n && (!from || !to), graph, graph_get, &rc);
	if (!g)
		return rc;
	for (uint32_t i = 0; i < n; i++) {
		struct sim_graph_launch *t = graph_entry(g, to[i]);
		uint64_t *v;

		if (!t || !graph_entry(g, from[i]) || from[i] == to[i])
			return CUDA_ERROR_INVALID_VALUE;
		for (size_t d = 0; d < t->ndeps; d++)
			if (t->deps[d] == from[i])
				return CUDA_ERROR_INVALID_VALUE;	/* already */
		v = realloc(t->deps, (t->ndeps + 1) * sizeof(*v));
		if (!v)
			return CUDA_ERROR_OUT_OF_MEMORY;
		v[t->ndeps++] = from[i];
		t->deps = v;
	}
	return CUDA_SUCCESS;
}

static int32_t sim_graph_node_destroy(struct pvgpu_exec *ex, uint64_t node)
{
	struct sim_obj *g;
	struct sim_graph_launch *e;
	size_t i;

	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	g = node_graph(ex, node);
	if (!g)
		return CUDA_ERROR_INVALID_HANDLE;
	e = graph_entry(g, node);
	free(e->params);
	free(e->deps);
	i = (size_t)(e - g->u.graph.v);
	memmove(e, e + 1, (g->u.graph.n - i - 1) * sizeof(*e));
	g->u.graph.n--;
	/* Its edges go with it; the moved entries' pointers follow them. */
	for (i = 0; i < g->u.graph.n; i++) {
		struct sim_graph_launch *o = &g->u.graph.v[i];
		size_t k = 0;

		o->l.params = o->params;
		o->l.attrs = o->attrs;
		for (size_t d = 0; d < o->ndeps; d++)
			if (o->deps[d] != node)
				o->deps[k++] = o->deps[d];
		o->ndeps = k;
	}
	return CUDA_SUCCESS;
}

static int32_t sim_graph_nodes(struct pvgpu_exec *ex, uint64_t graph,
			       uint64_t *nodes, uint32_t *types, uint32_t max,
			       uint64_t *count)
{
	struct sim_obj *g;

	if (!ex || !count || (max && (!nodes || !types)))
		return CUDA_ERROR_INVALID_VALUE;
	g = obj_find(ex, graph, SIM_GRAPH);
	if (!g)
		return CUDA_ERROR_INVALID_HANDLE;
	for (size_t i = 0; i < g->u.graph.n && i < max; i++) {
		nodes[i] = g->u.graph.v[i].node;
		types[i] = g->u.graph.v[i].type;
	}
	*count = g->u.graph.n;
	return CUDA_SUCCESS;
}

/*
 * cuGraphExecUpdate: the graph's nodes in run order, position by position
 * the same types as the executable graph's, take their places (the
 * executable graph's node handles stay what they were).
 */
static int32_t sim_graph_exec_update(struct pvgpu_exec *ex, uint64_t exec,
				     uint64_t graph, uint32_t *result,
				     uint64_t *error_node, uint32_t *error_type)
{
	struct sim_obj tmp = { .kind = SIM_GRAPH_EXEC };
	struct sim_obj *g, *x;
	int32_t rc;

	if (!ex || !result || !error_node || !error_type)
		return CUDA_ERROR_INVALID_VALUE;
	*result = CU_GRAPH_EXEC_UPDATE_ERROR;
	*error_node = 0;
	rc = ctx_check(ex);
	if (rc)
		return rc;
	g = obj_find(ex, graph, SIM_GRAPH);
	x = obj_find(ex, exec, SIM_GRAPH_EXEC);
	if (!g || !x)
		return CUDA_ERROR_INVALID_HANDLE;
	rc = graph_order(g, &tmp);
	if (rc) {
		obj_release(&tmp);
		return rc;
	}
	if (tmp.u.graph.n != x->u.graph.n)
		*result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
	for (size_t i = 0; !*error_node && i < tmp.u.graph.n && i < x->u.graph.n; i++) {
		if (tmp.u.graph.v[i].type != x->u.graph.v[i].type) {
			*result = CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
			*error_node = tmp.u.graph.v[i].node;
			*error_type = tmp.u.graph.v[i].type;
		}
	}
	if (*result != CU_GRAPH_EXEC_UPDATE_ERROR) {
		obj_release(&tmp);
		return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
	}
	for (size_t i = 0; i < tmp.u.graph.n; i++)
		tmp.u.graph.v[i].node = x->u.graph.v[i].node;
	obj_release(x);
	x->u.graph = tmp.u.graph;
	*result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
	return CUDA_SUCCESS;
}

/* cuGraphClone: the same nodes and edges, with handles of their own. */
static int32_t graph_clone(struct pvgpu_exec *ex, struct sim_obj *g,
			   uint64_t *out)
{
	struct sim_obj *c = obj_new(ex, SIM_GRAPH, ex->cur);
	int32_t rc = CUDA_SUCCESS;

	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; i < g->u.graph.n && !rc; i++) {
		rc = graph_copy_entry(c, &g->u.graph.v[i]);
		if (!rc && !(c->u.graph.v[i].node = node_new(ex)))
			rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	for (size_t i = 0; i < g->u.graph.n && !rc; i++) {
		const struct sim_graph_launch *e = &g->u.graph.v[i];
		struct sim_graph_launch *d = &c->u.graph.v[i];

		if (!e->ndeps)
			continue;
		d->deps = malloc(e->ndeps * sizeof(*d->deps));
		if (!d->deps) {
			rc = CUDA_ERROR_OUT_OF_MEMORY;
			break;
		}
		for (size_t k = 0; k < e->ndeps; k++) {
			struct sim_graph_launch *p = graph_entry(g, e->deps[k]);

			d->deps[k] = p ? c->u.graph.v[p - g->u.graph.v].node : 0;
		}
		d->ndeps = e->ndeps;
	}
	if (rc) {
		obj_free(ex, c);
		return rc;
	}
	c->u.graph.origin = g->handle;
	*out = c->handle;
	return CUDA_SUCCESS;
}

/* cuGraphNodeFindInClone (and, with n, a copy node's host end reset):
 * the clone's entries are its origin's, in the same order. */
static int32_t sim_clone_node(struct pvgpu_exec *ex, uint64_t clone,
			      uint64_t node, const struct pvgpu_graph_node *n,
			      uint64_t *out)
{
	struct sim_obj *c, *g;
	struct sim_graph_launch *e, *d;
	int32_t rc;

	if (!ex || !out)
		return CUDA_ERROR_INVALID_VALUE;
	rc = ctx_check(ex);
	if (rc)
		return rc;
	c = obj_find(ex, clone, SIM_GRAPH);
	g = c ? obj_find(ex, c->u.graph.origin, SIM_GRAPH) : NULL;
	e = g ? graph_entry(g, node) : NULL;
	if (!e || (size_t)(e - g->u.graph.v) >= c->u.graph.n)
		return CUDA_ERROR_INVALID_VALUE;
	d = &c->u.graph.v[e - g->u.graph.v];
	if (n) {
		if (d->type != CU_GRAPH_NODE_TYPE_MEMCPY || !n->host)
			return CUDA_ERROR_INVALID_VALUE;
		d->n.host = n->host;
		d->n.to_host = n->to_host;
		d->n.width = n->width;
		d->n.dst = n->dst;
		d->n.src = n->src;
	}
	*out = d->node;
	return CUDA_SUCCESS;
}

static int32_t sim_graph_call(struct pvgpu_exec *ex,
			      const struct pvgpu_generic_fn *f, uint64_t *a)
{
	struct sim_obj *g, *x;
	int32_t rc;

	switch (f->id) {
	case PVGPU_GENERIC_cuGraphClone:
		g = obj_find(ex, a[1], SIM_GRAPH);
		if (!g || !a[0])
			return !g ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE;
		return graph_clone(ex, g, &a[0]);
	case PVGPU_GENERIC_cuGraphCreate:
		if (!a[0] || a[1])
			return CUDA_ERROR_INVALID_VALUE;
		g = obj_new(ex, SIM_GRAPH, ex->cur);
		if (!g)
			return CUDA_ERROR_OUT_OF_MEMORY;
		a[0] = g->handle;
		return CUDA_SUCCESS;
	case PVGPU_GENERIC_cuGraphInstantiateWithFlags:
		g = obj_find(ex, a[1], SIM_GRAPH);
		if (!g || !a[0])
			return !g ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE;
		x = obj_new(ex, SIM_GRAPH_EXEC, ex->cur);
		if (!x)
			return CUDA_ERROR_OUT_OF_MEMORY;
		rc = graph_order(g, x);
		if (rc) {
			obj_free(ex, x);
			return rc;
		}
		a[0] = x->handle;
		return CUDA_SUCCESS;
	case PVGPU_GENERIC_cuGraphLaunch:
	case PVGPU_GENERIC_cuGraphUpload:
		x = obj_find(ex, a[0], SIM_GRAPH_EXEC);
		if (!x || x->ctx != ex->cur)
			return CUDA_ERROR_INVALID_HANDLE;
		rc = check_stream(ex, a[1]);
		if (rc || f->id == PVGPU_GENERIC_cuGraphUpload)
			return rc;
		for (size_t i = 0; i < x->u.graph.n && !rc; i++)
			rc = graph_node_run(ex, &x->u.graph.v[i], a[1]);
		return rc;
	case PVGPU_GENERIC_cuGraphExecDestroy:
		x = obj_find(ex, a[0], SIM_GRAPH_EXEC);
		if (!x)
			return CUDA_ERROR_INVALID_HANDLE;
		obj_free(ex, x);
		return CUDA_SUCCESS;
	default:			/* cuGraphDestroy */
		g = obj_find(ex, a[0], SIM_GRAPH);
		if (!g)
			return CUDA_ERROR_INVALID_HANDLE;
		for (size_t i = 0; i < ex->nobjs; i++)
			if (ex->objs[i]->kind == SIM_STREAM &&
			    ex->objs[i]->u.stream.capture == g)
				return CUDA_ERROR_ILLEGAL_STATE;
		obj_free(ex, g);
		return CUDA_SUCCESS;
	}
}

/* Stream attributes: the access policy window, the synchronisation
 * policy and the priority; the legacy stream keeps none. */
static int32_t sim_stream_attr(struct pvgpu_exec *ex, uint64_t stream,
			       uint64_t id, CUstreamAttrValue *v, int set)
{
	struct sim_obj *s = stream ? obj_find(ex, stream, SIM_STREAM) : NULL;

	if (!v)
		return CUDA_ERROR_INVALID_VALUE;
	if (!s)
		return stream ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE;
	switch (id) {
	case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
		if (set && (v->accessPolicyWindow.hitRatio < 0.0f ||
			    v->accessPolicyWindow.hitRatio > 1.0f))
			return CUDA_ERROR_INVALID_VALUE;
		if (set)
			s->u.stream.window = v->accessPolicyWindow;
		else
			v->accessPolicyWindow = s->u.stream.window;
		return CUDA_SUCCESS;
	case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
		if (set && (v->syncPolicy < CU_SYNC_POLICY_AUTO ||
			    v->syncPolicy > CU_SYNC_POLICY_BLOCKING_SYNC))
			return CUDA_ERROR_INVALID_VALUE;
		if (set)
			s->u.stream.sync_policy = v->syncPolicy;
		else
			v->syncPolicy = s->u.stream.sync_policy ? s->u.stream.sync_policy :
								  CU_SYNC_POLICY_AUTO;
		return CUDA_SUCCESS;
	case CU_LAUNCH_ATTRIBUTE_PRIORITY:
		if (set)
			s->u.stream.priority = v->priority < -5 ? -5 :
					       v->priority > 0 ? 0 : v->priority;
		else
			v->priority = s->u.stream.priority;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

#define SIM_VMM_GRAIN	(2ull << 20)

static struct sim_range *range_holding(struct pvgpu_exec *ex, uint64_t ptr, uint64_t size)
{
	for (size_t i = 0; i < ex->nranges; i++) {
		struct sim_range *r = &ex->ranges[i];

		if (size && ptr >= r->base && size <= r->size && ptr - r->base <= r->size - size)
			return r;
	}
	return NULL;
}

static bool overlaps_alloc(struct pvgpu_exec *ex, uint64_t ptr, uint64_t size)
{
	for (size_t i = 0; i < ex->nallocs; i++)
		if (ex->allocs[i].addr < ptr + size && ptr < ex->allocs[i].addr + ex->allocs[i].size)
			return true;
	return false;
}

static int32_t prop_check(struct pvgpu_exec *ex, const CUmemAllocationProp *p)
{
	if (!p || p->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    p->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	return p->location.id < 0 || p->location.id >= ex->ndev ? CUDA_ERROR_INVALID_DEVICE :
								   CUDA_SUCCESS;
}

/* cuMemMap: an allocation whose bytes are the physical memory's. */
static int32_t vmm_map(struct pvgpu_exec *ex, uint64_t ptr, uint64_t size, uint64_t off,
		       struct sim_phys *p)
{
	struct sim_alloc *a;
	size_t i;

	if (!range_holding(ex, ptr, size) || overlaps_alloc(ex, ptr, size) ||
	    off > p->size || size > p->size - off || (ptr | size | off) % SIM_VMM_GRAIN)
		return CUDA_ERROR_INVALID_VALUE;
	if (grow((void **)&ex->allocs, &ex->allocs_cap, ex->nallocs + 1, sizeof(*ex->allocs)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	i = alloc_upper_bound(ex, ptr);
	memmove(&ex->allocs[i + 1], &ex->allocs[i], (ex->nallocs - i) * sizeof(*ex->allocs));
	a = &ex->allocs[i];
	memset(a, 0, sizeof(*a));
	a->addr = ptr;
	a->size = size;
	a->data = p->data + off;
	a->ctx = ex->cur;
	a->dev = p->dev;
	a->phys = p->handle;
	ex->nallocs++;
	p->maps++;
	return CUDA_SUCCESS;
}

/* The mapping holding ptr, or NULL. */
static struct sim_alloc *mapping_at(struct pvgpu_exec *ex, uint64_t ptr)
{
	struct sim_alloc *a = alloc_range(ex, ptr, 1);

	return a && a->phys ? a : NULL;
}

static int32_t sim_vmm_call(struct pvgpu_exec *ex, const struct pvgpu_generic_fn *f,
			    uint64_t *a)
{
	struct sim_phys *p;
	struct sim_range *r;
	struct sim_alloc *m;
	int32_t rc;

	switch (f->id) {
	case PVGPU_GENERIC_cuMemGetAllocationGranularity:
		rc = prop_check(ex, (const CUmemAllocationProp *)(uintptr_t)a[1]);
		if (!rc && !a[0])
			rc = CUDA_ERROR_INVALID_VALUE;
		a[0] = SIM_VMM_GRAIN;
		return rc;
	case PVGPU_GENERIC_cuMemCreate: {
		const CUmemAllocationProp *prop = (const CUmemAllocationProp *)(uintptr_t)a[2];
		unsigned char *data;
		uint64_t used;

		rc = prop_check(ex, prop);
		if (rc || !a[0] || !a[1] || a[1] % SIM_VMM_GRAIN || a[3])
			return rc ? rc : CUDA_ERROR_INVALID_VALUE;
		used = dev_used(ex, prop->location.id);
		if (used >= ex->total_bytes || a[1] > ex->total_bytes - used ||
		    grow((void **)&ex->phys, &ex->phys_cap, ex->nphys + 1, sizeof(*ex->phys)))
			return CUDA_ERROR_OUT_OF_MEMORY;
		data = calloc(1, (size_t)a[1]);
		if (!data)
			return CUDA_ERROR_OUT_OF_MEMORY;
		p = &ex->phys[ex->nphys++];
		p->handle = (0x50ull << 56) | ++ex->next_phys;
		p->size = a[1];
		p->data = data;
		p->dev = prop->location.id;
		p->refs = 1;
		p->maps = 0;
		p->shared = false;
		p->fd = -1;
		p->saved = NULL;
		ex->own_used[p->dev] += a[1];
		a[0] = p->handle;
		return CUDA_SUCCESS;
	}
	case PVGPU_GENERIC_cuMemRelease:
		p = phys_find(ex, a[0]);
		if (!p || !p->refs)
			return CUDA_ERROR_INVALID_VALUE;
		p->refs--;
		phys_put(ex, p);
		return CUDA_SUCCESS;
	case PVGPU_GENERIC_cuMemAddressReserve: {
		uint64_t addr;

		if (!a[0] || !a[1] || a[1] % SIM_VMM_GRAIN ||
		    grow((void **)&ex->ranges, &ex->ranges_cap, ex->nranges + 1, sizeof(*ex->ranges)))
			return CUDA_ERROR_INVALID_VALUE;
		/* Address space only: the same cursor as allocations, so the two never meet. */
		if (place_alloc(ex, ex->cur->u.ctx.dev, a[1] + SIM_VMM_GRAIN, &addr))
			return CUDA_ERROR_OUT_OF_MEMORY;
		addr = (addr + SIM_VMM_GRAIN - 1) & ~(SIM_VMM_GRAIN - 1);
		ex->ranges[ex->nranges++] = (struct sim_range){ addr, a[1] };
		a[0] = addr;
		return CUDA_SUCCESS;
	}
	case PVGPU_GENERIC_cuMemAddressFree:
		r = range_holding(ex, a[0], a[1]);
		if (!r || r->base != a[0] || r->size != a[1] || overlaps_alloc(ex, a[0], a[1]))
			return CUDA_ERROR_INVALID_VALUE;
		*r = ex->ranges[--ex->nranges];
		return CUDA_SUCCESS;
	case PVGPU_GENERIC_cuMemMap:
		p = phys_find(ex, a[3]);
		if (!p || !p->refs || a[4])
			return CUDA_ERROR_INVALID_VALUE;
		return vmm_map(ex, a[0], a[1], a[2], p);
	case PVGPU_GENERIC_cuMemUnmap:
		if (!range_holding(ex, a[0], a[1]))
			return CUDA_ERROR_INVALID_VALUE;
		for (size_t i = ex->nallocs; i-- > 0;) {
			m = &ex->allocs[i];
			if (m->phys && m->addr >= a[0] && m->addr + m->size <= a[0] + a[1])
				alloc_remove(ex, i);
		}
		return CUDA_SUCCESS;
	case PVGPU_GENERIC_cuMemSetAccess: {
		const CUmemAccessDesc *d = (const CUmemAccessDesc *)(uintptr_t)a[2];

		if (!d || a[3] != 1 || !range_holding(ex, a[0], a[1]) ||
		    d->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
		    d->location.id < 0 || d->location.id >= ex->ndev ||
		    d->flags > CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			return CUDA_ERROR_INVALID_VALUE;
		return mapping_at(ex, a[0]) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	}
	case PVGPU_GENERIC_cuMemGetAccess:
		if (!a[0] || !a[1])
			return CUDA_ERROR_INVALID_VALUE;
		m = mapping_at(ex, a[2]);
		if (!m)
			return CUDA_ERROR_INVALID_VALUE;
		a[0] = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
		return CUDA_SUCCESS;
	case PVGPU_GENERIC_cuMemRetainAllocationHandle:
		m = mapping_at(ex, a[1]);
		p = m ? phys_find(ex, m->phys) : NULL;
		if (!p || !a[0])
			return CUDA_ERROR_INVALID_VALUE;
		p->refs++;
		a[0] = p->handle;
		return CUDA_SUCCESS;
	case PVGPU_GENERIC_cuMemGetAllocationPropertiesFromHandle: {
		CUmemAllocationProp *prop = (CUmemAllocationProp *)(uintptr_t)a[0];

		p = phys_find(ex, a[1]);
		if (!p || !prop)
			return CUDA_ERROR_INVALID_VALUE;
		memset(prop, 0, sizeof(*prop));
		prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
		prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		prop->location.id = p->dev;
		return CUDA_SUCCESS;
	}
	default:
		sim_diag(ex, "%s: not supported by the sim", f->name);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
}

/*
 * CUDA IPC between worker processes: an exported allocation moves into a
 * memfd, which the exporter holds open, and the handle names the
 * exporting process, descriptor and memfd; another worker of the same
 * user opens it through /proc, as sim_vmm_import does.  No name in
 * /dev/shm: a worker SIGKILLed before it could unlink one would leave the
 * file behind it, and a memfd goes with the last process that has it open
 * or mapped.  As with the driver, a handle opens only while its exporter
 * lives and holds the allocation: the memfd's name, unique per export,
 * tells a descriptor number used again from the one the handle meant.
 */
#define SIM_IPC_MEM	"pvgpu-sim-ipc"

static int32_t sim_ipc_get(struct pvgpu_exec *ex, uint64_t dptr, uint8_t handle[64])
{
	size_t i = alloc_upper_bound(ex, dptr);
	struct sim_alloc *a;
	void *map;
	int fd;

	if (!ex || ctx_check(ex))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!i || ex->allocs[i - 1].addr != dptr || ex->allocs[i - 1].module ||
	    ex->allocs[i - 1].phys)
		return CUDA_ERROR_INVALID_VALUE;
	a = &ex->allocs[i - 1];
	if (!a->ipc[0]) {
		char name[32];

		snprintf(name, sizeof(name), SIM_IPC_MEM "-%u", ++ex->ipc_serial);
		fd = memfd_create(name, MFD_CLOEXEC);
		if (fd < 0)
			return CUDA_ERROR_OUT_OF_MEMORY;
		if (ftruncate(fd, (off_t)a->size) ||
		    (map = mmap(NULL, a->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
			close(fd);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		memcpy(map, a->data, a->size);
		free(a->data);
		a->data = map;
		snprintf(a->ipc, sizeof(a->ipc), SIM_IPC_MEM " %d %d %u", (int)getpid(),
			 fd, ex->ipc_serial);
		a->ipc_owner = true;
		a->ipc_fd = fd;
	}
	memset(handle, 0, 64);
	memcpy(handle, a->ipc, strlen(a->ipc));
	return CUDA_SUCCESS;
}

static int32_t sim_ipc_open(struct pvgpu_exec *ex, const uint8_t handle[64],
			    uint32_t flags, uint64_t *dptr)
{
	char name[48] = { 0 }, path[64], want[64], link[64];
	unsigned int serial;
	struct sim_alloc *a;
	struct stat st;
	uint64_t addr;
	int pid, fd;
	ssize_t n;
	void *map;
	size_t i;

	(void)flags;
	if (!ex || ctx_check(ex))
		return CUDA_ERROR_INVALID_CONTEXT;
	memcpy(name, handle, sizeof(name) - 1);
	if (sscanf(name, SIM_IPC_MEM " %d %d %u", &pid, &fd, &serial) != 3 ||
	    pid <= 0 || fd < 0)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, fd);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return CUDA_ERROR_INVALID_VALUE;
	/* What we opened is the export's memfd, not another the number
	 * names by now. */
	snprintf(want, sizeof(want), "/memfd:" SIM_IPC_MEM "-%u (deleted)", serial);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	link[n > 0 ? n : 0] = '\0';
	if (strcmp(link, want) || fstat(fd, &st) || st.st_size <= 0 ||
	    grow((void **)&ex->allocs, &ex->allocs_cap, ex->nallocs + 1, sizeof(*ex->allocs)) ||
	    place_alloc(ex, ex->cur->u.ctx.dev, (uint64_t)st.st_size, &addr) ||
	    (map = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		close(fd);
		return CUDA_ERROR_INVALID_VALUE;
	}
	close(fd);
	i = alloc_upper_bound(ex, addr);
	memmove(&ex->allocs[i + 1], &ex->allocs[i], (ex->nallocs - i) * sizeof(*ex->allocs));
	a = &ex->allocs[i];
	memset(a, 0, sizeof(*a));
	a->addr = addr;
	a->size = (uint64_t)st.st_size;
	a->data = map;
	a->ctx = ex->cur;
	a->dev = ex->cur->u.ctx.dev;
	memcpy(a->ipc, name, sizeof(name));
	a->ipc_fd = -1;
	ex->nallocs++;
	*dptr = addr;
	return CUDA_SUCCESS;
}

static int32_t sim_ipc_close(struct pvgpu_exec *ex, uint64_t dptr)
{
	size_t i = ex ? alloc_upper_bound(ex, dptr) : 0;

	if (!i || ex->allocs[i - 1].addr != dptr || !ex->allocs[i - 1].ipc[0] ||
	    ex->allocs[i - 1].ipc_owner)
		return CUDA_ERROR_INVALID_VALUE;
	alloc_remove(ex, i - 1);
	return CUDA_SUCCESS;
}

/*
 * CUDA IPC of events: the sim's work is done when it is issued, so an
 * event is complete wherever it is opened; the handle names the exporting
 * process and event (it opens only as an interprocess, timing-less event).
 */
#define SIM_IPC_EVENT	"pvgpu-sim-event"
static int32_t sim_ipc_event_get(struct pvgpu_exec *ex, uint64_t event, uint8_t handle[64])
{
	struct sim_obj *e = ex ? obj_find(ex, event, SIM_EVENT) : NULL;

	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!(e->u.event.flags & CU_EVENT_INTERPROCESS))
		return CUDA_ERROR_INVALID_VALUE;
	memset(handle, 0, 64);
	snprintf((char *)handle, 64, SIM_IPC_EVENT " %d %llu", (int)getpid(),
		 (unsigned long long)event);
	return CUDA_SUCCESS;
}

static int32_t sim_ipc_event_open(struct pvgpu_exec *ex, const uint8_t handle[64],
				  uint64_t *event)
{
	struct sim_obj *e;

	if (!ex || ctx_check(ex))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (memcmp(handle, SIM_IPC_EVENT " ", sizeof(SIM_IPC_EVENT)) || handle[63])
		return CUDA_ERROR_INVALID_VALUE;
	e = obj_new(ex, SIM_EVENT, ex->cur);
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->u.event.flags = CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
	*event = e->handle;
	return CUDA_SUCCESS;
}

/*
 * VMM shareable handles between worker processes: exported physical
 * memory moves into a memfd (its mappings follow it), and the handle
 * names the exporting process and descriptor, which another worker of
 * the same user opens through /proc.
 */
#define SIM_VMM_HANDLE	"pvgpu-sim-vmm"
static int32_t sim_vmm_export(struct pvgpu_exec *ex, uint64_t mem, uint8_t handle[64])
{
	struct sim_phys *p = ex ? phys_find(ex, mem) : NULL;
	unsigned char *map;
	int fd;

	if (!p || !p->refs)
		return CUDA_ERROR_INVALID_VALUE;
	if (!p->shared) {
		fd = memfd_create("pvgpu-sim-vmm", MFD_CLOEXEC);
		if (fd < 0)
			return CUDA_ERROR_OUT_OF_MEMORY;
		if (ftruncate(fd, (off_t)p->size) ||
		    (map = mmap(NULL, p->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
			close(fd);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		memcpy(map, p->data, p->size);
		for (size_t i = 0; i < ex->nallocs; i++)
			if (ex->allocs[i].phys == p->handle)
				ex->allocs[i].data = map + (ex->allocs[i].data - p->data);
		free(p->data);
		p->data = map;
		p->shared = true;
		p->fd = fd;
	}
	if (p->fd < 0)
		return CUDA_ERROR_NOT_SUPPORTED;	/* an import: export the original */
	memset(handle, 0, 64);
	snprintf((char *)handle, 64, SIM_VMM_HANDLE " %d %d %llu %d", (int)getpid(), p->fd,
		 (unsigned long long)p->size, (int)p->dev);
	return CUDA_SUCCESS;
}

static int32_t sim_vmm_import(struct pvgpu_exec *ex, const uint8_t handle[64],
			      uint64_t *mem, uint64_t *size)
{
	char text[64], path[64];
	unsigned long long bytes;
	struct sim_phys *p;
	struct stat st;
	int pid, fd, dev;
	void *map;

	if (!ex || ctx_check(ex))
		return CUDA_ERROR_INVALID_CONTEXT;
	memcpy(text, handle, sizeof(text));
	text[63] = '\0';
	if (sscanf(text, SIM_VMM_HANDLE " %d %d %llu %d", &pid, &fd, &bytes, &dev) != 4 ||
	    dev < 0 || dev >= ex->ndev || !bytes || bytes % SIM_VMM_GRAIN)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, fd);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (fstat(fd, &st) || (uint64_t)st.st_size != bytes ||
	    grow((void **)&ex->phys, &ex->phys_cap, ex->nphys + 1, sizeof(*ex->phys)) ||
	    (map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		close(fd);
		return CUDA_ERROR_INVALID_VALUE;
	}
	close(fd);
	p = &ex->phys[ex->nphys++];
	memset(p, 0, sizeof(*p));
	p->handle = (0x50ull << 56) | ++ex->next_phys;
	p->size = bytes;
	p->data = map;
	p->dev = dev;
	p->refs = 1;
	p->shared = true;
	p->fd = -1;
	*mem = p->handle;
	*size = bytes;
	return CUDA_SUCCESS;
}

/* Sharing with other workers, by kind (executor.h share_get/open). */
static int32_t sim_share_get(struct pvgpu_exec *ex, enum pvgpu_ipc_kind kind,
			     uint64_t value, uint8_t handle[64])
{
	switch (kind) {
	case PVGPU_IPC_MEM:
		return sim_ipc_get(ex, value, handle);
	case PVGPU_IPC_EVENT:
		return sim_ipc_event_get(ex, value, handle);
	case PVGPU_IPC_VMM:
		return sim_vmm_export(ex, value, handle);
	}
	return CUDA_ERROR_INVALID_VALUE;
}

static int32_t sim_share_open(struct pvgpu_exec *ex, enum pvgpu_ipc_kind kind,
			      const uint8_t handle[64], uint32_t flags,
			      uint64_t *value, uint64_t *size)
{
	switch (kind) {
	case PVGPU_IPC_MEM:
		return sim_ipc_open(ex, handle, flags, value);
	case PVGPU_IPC_EVENT:
		return sim_ipc_event_open(ex, handle, value);
	case PVGPU_IPC_VMM:
		return sim_vmm_import(ex, handle, value, size);
	}
	return CUDA_ERROR_INVALID_VALUE;
}

/* A link, or cuModuleLoadDataEx of PTX with options: the sim's linker
 * gives the logs and results, its module loader the module. */
static int32_t sim_link(struct pvgpu_exec *ex, struct pvgpu_link *l,
			uint64_t *module)
{
	int32_t rc = pvgpu_sim_link(ex, l);

	if (!module)
		return rc;
	if (!rc)
		rc = sim_module_load(ex, l->image, l->image_size, module);
	free(l->image);
	l->image = NULL;
	return rc;
}

static int32_t sim_profiler(struct pvgpu_exec *ex,
			    const struct pvgpu_generic_fn *f, uint64_t *a)
{
	(void)ex;
	(void)f;
	(void)a;
	return CUDA_SUCCESS;	/* no profiler attached: nothing to do */
}

static int32_t sim_stream_attr_call(struct pvgpu_exec *ex,
				    const struct pvgpu_generic_fn *f, uint64_t *a)
{
	return sim_stream_attr(ex, a[0], a[1], (CUstreamAttrValue *)(uintptr_t)a[2],
			       f->id == PVGPU_GENERIC_cuStreamSetAttribute);
}

static int32_t sim_ctx_call(struct pvgpu_exec *ex,
			    const struct pvgpu_generic_fn *f, uint64_t *a)
{
	static const uint64_t limit_defaults[CU_LIMIT_MAX] = {
		[CU_LIMIT_STACK_SIZE] = 1024,
		[CU_LIMIT_PRINTF_FIFO_SIZE] = SIM_PRINTF_FIFO,
		[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20,
		[CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2,
		[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048,
		[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64,
	};

	switch (f->id) {
	case PVGPU_GENERIC_cuCtxSetLimit:
		if (a[0] >= CU_LIMIT_MAX)
			return CUDA_ERROR_INVALID_VALUE;
		ex->limits[a[0]] = a[1];
		return CUDA_SUCCESS;
	case PVGPU_GENERIC_cuCtxGetLimit:
		if (!a[0] || a[1] >= CU_LIMIT_MAX)
			return CUDA_ERROR_INVALID_VALUE;
		a[0] = ex->limits[a[1]] ? ex->limits[a[1]] : limit_defaults[a[1]];
		return CUDA_SUCCESS;
	case PVGPU_GENERIC_cuCtxGetStreamPriorityRange:
		a[0] = 0;			/* least, as on an H100 */
		a[1] = (uint64_t)(int64_t)-5;	/* greatest */
		return CUDA_SUCCESS;
	case PVGPU_GENERIC_cuCtxGetCacheConfig:
		if (!a[0])
			return CUDA_ERROR_INVALID_VALUE;
		a[0] = (uint64_t)ex->cache_config;
		return CUDA_SUCCESS;
	case PVGPU_GENERIC_cuCtxSetCacheConfig:
		if (a[0] > CU_FUNC_CACHE_PREFER_EQUAL)
			return CUDA_ERROR_INVALID_VALUE;
		ex->cache_config = (int32_t)a[0];
		return CUDA_SUCCESS;
	default:	/* cuCtxResetPersistingL2Cache */
		return CUDA_SUCCESS;
	}
}

static int32_t sim_stream_value_call(struct pvgpu_exec *ex,
				     const struct pvgpu_generic_fn *f, uint64_t *a)
{
	int wide = f->id == PVGPU_GENERIC_cuStreamWriteValue64_v2 ||
		   f->id == PVGPU_GENERIC_cuStreamWaitValue64_v2;
	unsigned char *p;

	if (f->id == PVGPU_GENERIC_cuStreamWaitValue32_v2 ||
	    f->id == PVGPU_GENERIC_cuStreamWaitValue64_v2)
		return sim_wait_value(ex, a[1], a[2], (uint32_t)a[3], wide);
	/* Aligned, as the driver wants; work is done when queued, so the
	 * write is made at once, seen by whoever polls the word. */
	p = a[1] % (wide ? 8 : 4) ? NULL : dev_bytes(ex, a[1], wide ? 8 : 4);
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	if (wide)
		__atomic_store_n((uint64_t *)(void *)p, a[2], __ATOMIC_RELEASE);
	else
		__atomic_store_n((uint32_t *)(void *)p, (uint32_t)a[2],
				 __ATOMIC_RELEASE);
	return CUDA_SUCCESS;
}

/* Function attributes and occupancy: a[] as annotations.py has them. */
static int32_t sim_func_call(struct pvgpu_exec *ex,
			     const struct pvgpu_generic_fn *f, uint64_t *a)
{
	int32_t rc, v = 0;
	uint64_t bytes = 0;

	switch (f->id) {
	case PVGPU_GENERIC_cuFuncGetAttribute:
		rc = sim_function_attribute(ex, a[2], (int32_t)a[1], a[0] ? &v : NULL);
		a[0] = (uint64_t)(int64_t)v;
		return rc;
	case PVGPU_GENERIC_cuFuncSetAttribute:
		return sim_function_set_attribute(ex, a[0], (int32_t)a[1], (int32_t)a[2]);
	case PVGPU_GENERIC_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags:
		if (!a[0])
			return CUDA_ERROR_INVALID_VALUE;
		rc = sim_occupancy(ex, a[1], (int32_t)a[2], a[3], (uint32_t)a[4], &v);
		a[0] = (uint64_t)(int64_t)v;
		return rc;
	default:	/* cuOccupancyAvailableDynamicSMemPerBlock */
		if (!a[0])
			return CUDA_ERROR_INVALID_VALUE;
		rc = sim_dynamic_smem(ex, a[1], (int32_t)a[2], (int32_t)a[3], &bytes);
		a[0] = bytes;
		return rc;
	}
}

static int32_t sim_elapsed_call(struct pvgpu_exec *ex,
				const struct pvgpu_generic_fn *f, uint64_t *a)
{
	float ms = 0;
	int32_t rc = sim_event_elapsed(ex, a[1], a[2], a[0] ? &ms : NULL);

	(void)f;
	a[0] = 0;
	memcpy(&a[0], &ms, sizeof(ms));		/* a float result: its bits */
	return rc;
}

/*
 * Events and stream queries, a[] as annotations.py has them: a new
 * event's slot is a[0]; cuEventRecordWithFlags takes the flags the driver
 * knows (CU_EVENT_RECORD_EXTERNAL only during a capture).
 */
static int32_t sim_event_call(struct pvgpu_exec *ex,
			      const struct pvgpu_generic_fn *f, uint64_t *a)
{
	switch (f->id) {
	case PVGPU_GENERIC_cuEventCreate:
		if (!a[0] || a[1] > UINT32_MAX)
			return CUDA_ERROR_INVALID_VALUE;
		return sim_event_create(ex, (uint32_t)a[1], &a[0]);
	case PVGPU_GENERIC_cuEventDestroy_v2:
		return sim_event_destroy(ex, a[0]);
	case PVGPU_GENERIC_cuEventRecordWithFlags:
		if (a[2] & ~(uint64_t)CU_EVENT_RECORD_EXTERNAL)
			return CUDA_ERROR_INVALID_VALUE;
		return sim_event_record(ex, a[0], a[1]);
	case PVGPU_GENERIC_cuEventRecord:
		return sim_event_record(ex, a[0], a[1]);
	case PVGPU_GENERIC_cuEventSynchronize:
		return sim_event_synchronize(ex, a[0]);
	case PVGPU_GENERIC_cuEventQuery:
		return sim_event_query(ex, a[0]);
	case PVGPU_GENERIC_cuStreamQuery:
		return sim_stream_query(ex, a[0]);
	default:	/* cuStreamWaitEvent */
		return a[2] > UINT32_MAX ? CUDA_ERROR_INVALID_VALUE :
		       sim_stream_wait_event(ex, a[0], a[1], (uint32_t)a[2]);
	}
}

/*
 * Graph memory of the current context's device (the worker checked a[0]):
 * its attributes read, a high watermark reset (only to 0, as the driver
 * has it), a trim; a[2] is the worker's copy of the cuuint64_t value.
 */
static int32_t sim_graph_mem_call(struct pvgpu_exec *ex,
				  const struct pvgpu_generic_fn *f, uint64_t *a)
{
	int set = f->id == PVGPU_GENERIC_cuDeviceSetGraphMemAttribute;
	uint64_t v = 0;

	if (f->id == PVGPU_GENERIC_cuDeviceGraphMemTrim)
		return CUDA_SUCCESS;		/* nothing unused is kept */
	if (!a[2])
		return CUDA_ERROR_INVALID_VALUE;
	if (set)
		memcpy(&v, (const void *)(uintptr_t)a[2], sizeof(v));
	switch (a[1]) {
	case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
	case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
		if (set)
			return CUDA_ERROR_INVALID_VALUE;
		v = ex->graph_mem;
		break;
	case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
	case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
		if (set && v)
			return CUDA_ERROR_INVALID_VALUE;
		if (set) {
			ex->graph_mem_high = ex->graph_mem;
			return CUDA_SUCCESS;
		}
		v = ex->graph_mem_high;
		break;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	memcpy((void *)(uintptr_t)a[2], &v, sizeof(v));
	return CUDA_SUCCESS;
}

static int32_t sim_destroy_call(struct pvgpu_exec *ex,
				const struct pvgpu_generic_fn *f, uint64_t *a)
{
	switch (f->id) {
	case PVGPU_GENERIC_cuArrayDestroy:
		return sim_array_destroy(ex, a[0]);
	case PVGPU_GENERIC_cuTexObjectDestroy:
		return sim_obj_destroy(ex, a[0], SIM_TEX);
	case PVGPU_GENERIC_cuSurfObjectDestroy:
		return sim_obj_destroy(ex, a[0], SIM_SURF);
	default:	/* cuGraphDestroyNode */
		return sim_graph_node_destroy(ex, a[0]);
	}
}

/*
 * The generic calls the sim models, indexed by id; every other one is
 * CUDA_ERROR_NOT_SUPPORTED.  streams: its stream arguments are checked
 * first (capture and graph calls check their own, in the driver's order).
 */
static const struct sim_generic {
	int32_t (*call)(struct pvgpu_exec *ex, const struct pvgpu_generic_fn *f,
			uint64_t *a);
	bool streams;
} sim_generic[] = {
	[PVGPU_GENERIC_cuCtxSetLimit] = { sim_ctx_call, true },
	[PVGPU_GENERIC_cuCtxGetLimit] = { sim_ctx_call, true },
	[PVGPU_GENERIC_cuCtxGetStreamPriorityRange] = { sim_ctx_call, true },
	[PVGPU_GENERIC_cuCtxGetCacheConfig] = { sim_ctx_call, true },
	[PVGPU_GENERIC_cuCtxSetCacheConfig] = { sim_ctx_call, true },
	[PVGPU_GENERIC_cuCtxResetPersistingL2Cache] = { sim_ctx_call, true },
	[PVGPU_GENERIC_cuStreamWriteValue32_v2] = { sim_stream_value_call, true },
	[PVGPU_GENERIC_cuStreamWriteValue64_v2] = { sim_stream_value_call, true },
	[PVGPU_GENERIC_cuStreamWaitValue32_v2] = { sim_stream_value_call, true },
	[PVGPU_GENERIC_cuStreamWaitValue64_v2] = { sim_stream_value_call, true },
	[PVGPU_GENERIC_cuStreamBeginCapture_v2] = { sim_capture_call, false },
	[PVGPU_GENERIC_cuStreamEndCapture] = { sim_capture_call, false },
	[PVGPU_GENERIC_cuStreamIsCapturing] = { sim_capture_call, false },
	[PVGPU_GENERIC_cuGraphInstantiateWithFlags] = { sim_graph_call, false },
	[PVGPU_GENERIC_cuGraphLaunch] = { sim_graph_call, false },
	[PVGPU_GENERIC_cuGraphUpload] = { sim_graph_call, false },
	[PVGPU_GENERIC_cuGraphExecDestroy] = { sim_graph_call, false },
	[PVGPU_GENERIC_cuGraphDestroy] = { sim_graph_call, false },
	[PVGPU_GENERIC_cuGraphCreate] = { sim_graph_call, false },
	[PVGPU_GENERIC_cuGraphClone] = { sim_graph_call, false },
	[PVGPU_GENERIC_cuProfilerStart] = { sim_profiler, true },
	[PVGPU_GENERIC_cuProfilerStop] = { sim_profiler, true },
	[PVGPU_GENERIC_cuStreamSetAttribute] = { sim_stream_attr_call, true },
	[PVGPU_GENERIC_cuStreamGetAttribute] = { sim_stream_attr_call, true },
	[PVGPU_GENERIC_cuMemGetAllocationGranularity] = { sim_vmm_call, true },
	[PVGPU_GENERIC_cuMemCreate] = { sim_vmm_call, true },
	[PVGPU_GENERIC_cuMemRelease] = { sim_vmm_call, true },
	[PVGPU_GENERIC_cuMemAddressReserve] = { sim_vmm_call, true },
	[PVGPU_GENERIC_cuMemAddressFree] = { sim_vmm_call, true },
	[PVGPU_GENERIC_cuMemMap] = { sim_vmm_call, true },
	[PVGPU_GENERIC_cuMemUnmap] = { sim_vmm_call, true },
	[PVGPU_GENERIC_cuMemSetAccess] = { sim_vmm_call, true },
	[PVGPU_GENERIC_cuMemGetAccess] = { sim_vmm_call, true },
	[PVGPU_GENERIC_cuMemRetainAllocationHandle] = { sim_vmm_call, true },
	[PVGPU_GENERIC_cuMemGetAllocationPropertiesFromHandle] = { sim_vmm_call, true },
	[PVGPU_GENERIC_cuFuncGetAttribute] = { sim_func_call, true },
	[PVGPU_GENERIC_cuFuncSetAttribute] = { sim_func_call, true },
	[PVGPU_GENERIC_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags] = { sim_func_call, true },
	[PVGPU_GENERIC_cuOccupancyAvailableDynamicSMemPerBlock] = { sim_func_call, true },
	[PVGPU_GENERIC_cuArrayDestroy] = { sim_destroy_call, true },
	[PVGPU_GENERIC_cuTexObjectDestroy] = { sim_destroy_call, true },
	[PVGPU_GENERIC_cuSurfObjectDestroy] = { sim_destroy_call, true },
	[PVGPU_GENERIC_cuGraphDestroyNode] = { sim_destroy_call, true },
	[PVGPU_GENERIC_cuEventElapsedTime_v2] = { sim_elapsed_call, true },
	[PVGPU_GENERIC_cuDeviceGetGraphMemAttribute] = { sim_graph_mem_call, true },
	[PVGPU_GENERIC_cuDeviceSetGraphMemAttribute] = { sim_graph_mem_call, true },
	[PVGPU_GENERIC_cuDeviceGraphMemTrim] = { sim_graph_mem_call, true },
	[PVGPU_GENERIC_cuEventCreate] = { sim_event_call, true },
	[PVGPU_GENERIC_cuEventDestroy_v2] = { sim_event_call, true },
	[PVGPU_GENERIC_cuEventRecord] = { sim_event_call, true },
	[PVGPU_GENERIC_cuEventRecordWithFlags] = { sim_event_call, true },
	[PVGPU_GENERIC_cuEventSynchronize] = { sim_event_call, true },
	[PVGPU_GENERIC_cuEventQuery] = { sim_event_call, true },
	[PVGPU_GENERIC_cuStreamQuery] = { sim_event_call, true },
	[PVGPU_GENERIC_cuStreamWaitEvent] = { sim_event_call, true },
};

static int32_t sim_driver_call(struct pvgpu_exec *ex,
			       const struct pvgpu_generic_fn *f, uint64_t *a)
{
	const struct sim_generic *g;
	int32_t rc;

	if (!ex || !f)
		return CUDA_ERROR_INVALID_VALUE;
	rc = ctx_check(ex);
	if (rc)
		return rc;
	g = f->id < sizeof(sim_generic) / sizeof(sim_generic[0]) ?
	    &sim_generic[f->id] : NULL;
	if (!g || !g->call) {
		sim_diag(ex, "%s: not supported by the sim", f->name);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	for (uint32_t i = 0; g->streams && i < f->nargs; i++) {
		if (f->args[i].kind == PVGPU_GA_STREAM &&
		    (rc = check_stream(ex, a[i])))
			return rc;
	}
	return g->call(ex, f, a);
}

const struct pvgpu_executor_ops pvgpu_exec_sim = {
	.name			= "sim",
	.takes_runs		= true,
	.open			= sim_open,
	.close			= sim_close,
	.driver_info		= sim_driver_info,
	.device_attribute	= sim_device_attribute,
	.device_info		= sim_device_info,
	.ctx_create		= sim_ctx_create,
	.ctx_destroy		= sim_ctx_destroy,
	.ctx_set		= sim_ctx_set,
	.mem_alloc		= sim_mem_alloc,
	.mem_free		= sim_mem_free,
	.mem_get_info		= sim_mem_get_info,
	.host_alloc		= sim_host_alloc,
	.host_register		= sim_host_register,
	.host_release		= sim_host_release,
	.copy			= sim_copy,
	.memset_async		= sim_memset_async,
	.stream_create		= sim_stream_create,
	.stream_destroy		= sim_stream_destroy,
	.synchronize		= sim_synchronize,
	.module_load		= sim_module_load,
	.module_unload		= sim_module_unload,
	.module_symbol		= sim_module_symbol,
	.module_function_names	= sim_module_function_names,
	.function_params	= sim_function_params,
	.launch			= sim_launch,
	.max_clusters		= sim_max_clusters,
	.peer_attribute		= sim_peer_attribute,
	.peer_access		= sim_peer_access,
	.array_create		= sim_array_create,
	.tex_create		= sim_tex_create,
	.tensor_map_encode	= sim_tensor_map_encode,
	.driver_call		= sim_driver_call,
	.link			= sim_link,
	.host_device_pointer	= sim_host_device_pointer,
	.share_get		= sim_share_get,
	.share_open		= sim_share_open,
	.ipc_close		= sim_ipc_close,
	.graph_add_node		= sim_graph_add_node,
	.graph_kernel_node_set	= sim_graph_kernel_node_set,
	.graph_add_deps		= sim_graph_add_deps,
	.graph_nodes		= sim_graph_nodes,
	.graph_exec_update	= sim_graph_exec_update,
	.capture_info		= sim_capture_info,
	.capture_deps		= sim_capture_deps,
	.capture_to_graph	= sim_capture_to_graph,
	.clone_node		= sim_clone_node,
	.mem_async		= sim_mem_async,
	.cond_handle		= sim_cond_handle,
	.checkpoint		= sim_checkpoint,
	.idle_point		= sim_idle_point,
};

/* How pvgpud finds this fixture: build/lib/pvgpud/exec-sim.so. */
const struct pvgpu_executor_ops *const pvgpu_executor_plugin = &pvgpu_exec_sim;
