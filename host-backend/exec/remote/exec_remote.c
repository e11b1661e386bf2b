/*
 * exec_remote.c - the "remote" executor: a session's work runs on the GPUs
 * of other pvgpud nodes.
 *
 * Each instance (one per worker, so one per guest session) opens a protocol
 * client session (guest-lib/client) to every node in the list it is given
 * (pvgpud --remote URI, or the [remote] section of --config), in the worker,
 * after fork().  Their device lists are concatenated: node 0's devices
 * first.  Every executor operation becomes the matching wire operation on
 * the node that owns its object; the worker in front has already applied
 * this node's policy and quotas, and the node behind applies its own.
 *
 * Device pointers of two nodes.  Each node's driver hands out addresses
 * in its own space, and two nodes alike (the same driver, the same GPU,
 * the sim) hand out the same ones; but one program sees one address space
 * (unified addressing: a pointer says its device), and the worker's
 * allocation table is keyed by address.  So an allocation a node returns
 * inside another node's memory is kept aside and asked for again (the
 * node then gives other addresses), up to ALLOC_TRIES times; the spares
 * are freed once a clean one came.  Each allocation remembers its node:
 * a free goes there, whatever context is current.
 *
 * Handles.  A node's handles (its worker's ids, at most 56 bits) come back
 * with the node's index + 1 in the top byte, so an operation on a stream,
 * event, module or function goes to the node that made it.  Operations
 * without a handle (memory, copies, default streams) go to the node of the
 * current context.  Device pointers are passed through untouched: kernel
 * parameters carry them and cannot be rewritten.
 *
 * Bulk data.  Host-to-device blocks are queued with their data, which the
 * client writes at once as DATA frames and never waits for an answer:
 * the worker's staging pipeline stays a pipeline across the second hop.
 * Device-to-host blocks are one round trip each, into the caller's buffer.
 *
 * A node that dies (its connection breaks) turns every later operation on
 * it into CUDA_ERROR_DEVICE_UNAVAILABLE, sticky, like a GPU fallen off the
 * bus: the session sees a CUDA error, the worker keeps answering it, and
 * sessions on other nodes (and the daemon) are untouched.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include "client.h"
#include "executor.h"
#include "pvgpu_generic.h"
#include "pvgpu_guest.h"
#include "pvgpu_proto.h"

#define REMOTE_MAX_DEVICES	16	/* the front's PVGPU_MAX_DEVICES */
#define ATTR_CACHE		256	/* attributes 0..255 are remembered */
#define NODE_SHIFT		56
#define LOCAL_MASK		((1ULL << NODE_SHIFT) - 1)

struct remote_node {
	char uri[256];
	struct pvgpu_client *c;
	int32_t first_dev, ndev;	/* our device numbers [first, first+n) */
	int dead;			/* connection lost: said once */
	uint64_t ctx;			/* the context last made current there */
	int staged;			/* a peer copy staged from here: said */
};

/* A device allocation and the node it is on. */
struct remote_range {
	uint64_t base, size;
	unsigned int node;
};

#define ALLOC_TRIES	8

/* Parameter layouts of the functions resolved so far (function_params). */
struct remote_func {
	uint64_t handle;
	struct pvgpu_param_info *layout;
	uint32_t n;
};

struct pvgpu_exec {
	struct remote_node nodes[PVGPU_MAX_REMOTES];
	unsigned int nnodes;
	int32_t ndev;
	int cur;			/* node of the current context; -1: none */
	struct remote_func *funcs;
	size_t nfuncs, capfuncs;
	struct remote_range *ranges;	/* device allocations, any order */
	size_t nranges, capranges;
	/* Device attributes never change: one round trip per (dev, attr). */
	int32_t attr[REMOTE_MAX_DEVICES][ATTR_CACHE];
	uint8_t attr_known[REMOTE_MAX_DEVICES][ATTR_CACHE];
	int clash_said;			/* a guest may retry: said once per session */
};

/* The daemon's log (cfg->log_fd): the worker's fd 2 is its guest's. */
static int say_fd = 2;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	char line[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	dprintf(say_fd, "pvgpud[%d] warn: remote executor: %s\n", (int)getpid(),
		line);
}

/* A client status as a CUresult; a lost node stays lost. */
static int32_t cu(struct remote_node *n, int32_t st)
{
	if (st >= 0)
		return st;
	if (st == PVGPU_CLIENT_EIO) {
		if (!n->dead)
			say("node %s: connection lost; its devices are unavailable to this session",
			    n->uri);
		n->dead = 1;
		return CUDA_ERROR_DEVICE_UNAVAILABLE;
	}
	if (st == PVGPU_CLIENT_EENCODE)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_ERROR_UNKNOWN;		/* the node broke the protocol */
}

static uint64_t tag(unsigned int node, uint64_t h)
{
	return ((uint64_t)(node + 1) << NODE_SHIFT) | h;
}

/* The node a handle belongs to, and its own value; NULL when none. */
static struct remote_node *untag(struct pvgpu_exec *ex, uint64_t h,
				 uint64_t *local)
{
	uint64_t n = h >> NODE_SHIFT;

	if (!n || n > ex->nnodes || !(h & LOCAL_MASK))
		return NULL;
	*local = h & LOCAL_MASK;
	return &ex->nodes[n - 1];
}

/* A node's handle as ours: it must fit under the tag. */
static int32_t tagged(struct pvgpu_exec *ex, struct remote_node *n,
		      uint64_t h, uint64_t *out)
{
	if (!h || (h >> NODE_SHIFT)) {
		*out = 0;
		return CUDA_ERROR_UNKNOWN;
	}
	*out = tag((unsigned int)(n - ex->nodes), h);
	return CUDA_SUCCESS;
}

static struct remote_node *dev_node(struct pvgpu_exec *ex, int32_t dev,
				    int32_t *local)
{
	if (dev < 0 || dev >= ex->ndev)
		return NULL;
	for (unsigned int i = 0; i < ex->nnodes; i++) {
		struct remote_node *n = &ex->nodes[i];

		if (dev >= n->first_dev && dev < n->first_dev + n->ndev) {
			*local = dev - n->first_dev;
			return n;
		}
	}
	return NULL;
}

static struct remote_node *cur_node(struct pvgpu_exec *ex)
{
	return ex && ex->cur >= 0 ? &ex->nodes[ex->cur] : NULL;
}

/* Stream 0 is the current context's default stream. */
static struct remote_node *stream_node(struct pvgpu_exec *ex, uint64_t stream,
				       uint64_t *local)
{
	if (!stream) {
		*local = 0;
		return cur_node(ex);
	}
	return ex ? untag(ex, stream, local) : NULL;
}

/* ------------------------------------------------------------------ */

static void remote_close(struct pvgpu_exec *ex);

static struct pvgpu_exec *remote_open(const struct pvgpu_exec_config *cfg,
				      char *err, size_t errlen)
{
	struct pvgpu_client_config ccfg;
	struct pvgpu_exec *ex;

	if (cfg && cfg->log_fd > 0)
		say_fd = cfg->log_fd;
	if (!cfg || !cfg->nremotes) {
		snprintf(err, errlen, "no remote nodes (pvgpud --remote URI, or a [remote] section with node = URI)");
		return NULL;
	}
	if (cfg->nremotes > PVGPU_MAX_REMOTES) {
		snprintf(err, errlen, "more than %d remote nodes", PVGPU_MAX_REMOTES);
		return NULL;
	}
	ex = calloc(1, sizeof(*ex));
	if (!ex) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	ex->cur = -1;
	pvgpu_client_config_init(&ccfg);
	ccfg.window = 0;		/* bulk data goes as DATA frames */
	if (cfg->remote_token) {
		if (strlen(cfg->remote_token) >= sizeof(ccfg.token)) {
			snprintf(err, errlen, "remote token longer than %zu bytes",
				 sizeof(ccfg.token) - 1);
			goto err_close;
		}
		snprintf(ccfg.token, sizeof(ccfg.token), "%s", cfg->remote_token);
	}
	for (unsigned int i = 0; i < cfg->nremotes; i++) {
		struct remote_node *n = &ex->nodes[i];
		const struct pvgpu_client_info *info;
		char why[256];
		int rc;

		snprintf(n->uri, sizeof(n->uri), "%s", cfg->remotes[i]);
		rc = pvgpu_client_open(n->uri, &ccfg, &n->c, why, sizeof(why));
		if (rc) {
			snprintf(err, errlen, "remote node %s: %s", n->uri, why);
			goto err_close;
		}
		ex->nnodes = i + 1;
		info = pvgpu_client_info(n->c);
		if (info->device_count < 0 ||
		    info->device_count > REMOTE_MAX_DEVICES - ex->ndev) {
			snprintf(err, errlen, "remote node %s: %d devices; at most %d in all",
				 n->uri, info->device_count, REMOTE_MAX_DEVICES);
			goto err_close;
		}
		n->first_dev = ex->ndev;
		n->ndev = info->device_count;
		ex->ndev += n->ndev;
	}
	return ex;

err_close:
	remote_close(ex);
	return NULL;
}

static void remote_close(struct pvgpu_exec *ex)
{
	if (!ex)
		return;
	/* bye: the node frees what the session held there. */
	for (unsigned int i = 0; i < ex->nnodes; i++)
		pvgpu_client_close(ex->nodes[i].c);
	for (size_t i = 0; i < ex->nfuncs; i++)
		free(ex->funcs[i].layout);
	free(ex->funcs);
	free(ex->ranges);
	free(ex);
}

/* ------------------------------------------------------------------ */
/* devices */

/* The first node's driver version; the devices of every node. */
static int32_t remote_driver_info(struct pvgpu_exec *ex, int32_t *version,
				  int32_t *count)
{
	struct pvgpu_driver_get_version_req q = { 0 };
	struct pvgpu_driver_get_version_rep r;
	int32_t st = CUDA_SUCCESS;

	if (!ex || (!version && !count))
		return CUDA_ERROR_INVALID_VALUE;
	if (version) {
		st = cu(&ex->nodes[0],
			pvgpu_call_driver_get_version(ex->nodes[0].c, &q, &r));
		if (!st)
			*version = r.version;
	}
	if (count && !st)
		*count = ex->ndev;
	return st;
}

static int32_t remote_device_attribute(struct pvgpu_exec *ex, int32_t dev,
				       int32_t attr, int32_t *value)
{
	struct pvgpu_device_get_attributes_req q = { 0 };
	struct pvgpu_device_get_attributes_rep r;
	struct remote_node *n;
	int32_t local, st;

	if (!ex || !value)
		return CUDA_ERROR_INVALID_VALUE;
	n = dev_node(ex, dev, &local);
	if (!n)
		return CUDA_ERROR_INVALID_DEVICE;
	if (attr >= 0 && attr < ATTR_CACHE && ex->attr_known[dev][attr]) {
		*value = ex->attr[dev][attr];
		return CUDA_SUCCESS;
	}
	q.device = local;
	q.attrs[0] = attr;
	q.attrs_count = 1;
	st = cu(n, pvgpu_call_device_get_attributes(n->c, &q, &r));
	if (st)
		return st;
	if (r.values_count != 1)
		return CUDA_ERROR_UNKNOWN;
	*value = r.values[0];
	if (attr >= 0 && attr < ATTR_CACHE) {
		ex->attr[dev][attr] = r.values[0];
		ex->attr_known[dev][attr] = 1;
	}
	return CUDA_SUCCESS;
}

/* The node's answers to cuDeviceGetName, cuDeviceGetUuid and
 * cuDeviceTotalMem for its device. */
static int32_t remote_device_info(struct pvgpu_exec *ex, int32_t dev,
				  struct pvgpu_exec_device *d)
{
	struct pvgpu_device_get_name_req nq = { 0 };
	struct pvgpu_device_get_name_rep nr;
	struct pvgpu_device_get_uuid_req uq = { 0 };
	struct pvgpu_device_get_uuid_rep ur;
	struct pvgpu_device_total_mem_req mq = { 0 };
	struct pvgpu_device_total_mem_rep mr;
	struct remote_node *n;
	int32_t local, st;

	if (!ex || !d)
		return CUDA_ERROR_INVALID_VALUE;
	n = dev_node(ex, dev, &local);
	if (!n)
		return CUDA_ERROR_INVALID_DEVICE;
	nq.device = uq.device = mq.device = local;
	st = cu(n, pvgpu_call_device_get_name(n->c, &nq, &nr));
	if (!st)
		st = cu(n, pvgpu_call_device_get_uuid(n->c, &uq, &ur));
	if (!st)
		st = cu(n, pvgpu_call_device_total_mem(n->c, &mq, &mr));
	if (st)
		return st;
	if (ur.uuid_len != sizeof(d->uuid))
		return CUDA_ERROR_UNKNOWN;	/* the node broke the protocol */
	snprintf(d->name, sizeof(d->name), "%.*s", (int)nr.name_len, nr.name);
	memcpy(d->uuid, ur.uuid, sizeof(d->uuid));
	d->total_mem = mr.bytes;
	return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* contexts */

static int32_t remote_ctx_create(struct pvgpu_exec *ex, int32_t dev,
				 uint64_t *ctx)
{
	struct pvgpu_ctx_create_req q = { 0 };
	struct pvgpu_ctx_create_rep r;
	struct remote_node *n;
	int32_t local, st;

	if (!ex || !ctx)
		return CUDA_ERROR_INVALID_VALUE;
	n = dev_node(ex, dev, &local);
	if (!n)
		return CUDA_ERROR_INVALID_DEVICE;
	q.device = local;
	st = cu(n, pvgpu_call_ctx_create(n->c, &q, &r));
	if (st)
		return st;
	st = tagged(ex, n, r.ctx, ctx);
	if (st)
		return st;
	/* cuCtxCreate makes the new context current. */
	ex->cur = (int)(n - ex->nodes);
	return CUDA_SUCCESS;
}

static int32_t remote_ctx_destroy(struct pvgpu_exec *ex, uint64_t ctx)
{
	struct pvgpu_ctx_destroy_req q = { 0 };
	struct pvgpu_ctx_destroy_rep r;
	struct remote_node *n;

	if (!ex || !(n = untag(ex, ctx, &q.ctx)))
		return CUDA_ERROR_INVALID_CONTEXT;
	return cu(n, pvgpu_call_ctx_destroy(n->c, &q, &r));
}

static int32_t remote_ctx_set(struct pvgpu_exec *ex, uint64_t ctx)
{
	struct pvgpu_ctx_set_req q = { 0 };
	struct remote_node *n;

	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ctx) {
		ex->cur = -1;
		return CUDA_SUCCESS;
	}
	n = untag(ex, ctx, &q.ctx);
	if (!n)
		return CUDA_ERROR_INVALID_CONTEXT;
	ex->cur = (int)(n - ex->nodes);
	n->ctx = q.ctx;
	return cu(n, pvgpu_call_ctx_set(n->c, &q));
}

static int32_t ctx_synchronize(struct pvgpu_exec *ex)
{
	struct pvgpu_ctx_synchronize_req q = { 0 };
	struct pvgpu_ctx_synchronize_rep r;
	struct remote_node *n = cur_node(ex);

	if (!n)
		return CUDA_ERROR_INVALID_CONTEXT;
	return cu(n, pvgpu_call_ctx_synchronize(n->c, &q, &r));
}

/* ------------------------------------------------------------------ */
/* memory */

/* The allocation holding ptr, or NULL. */
static struct remote_range *range_at(struct pvgpu_exec *ex, uint64_t ptr)
{
	for (size_t i = 0; i < ex->nranges; i++)
		if (ptr - ex->ranges[i].base < ex->ranges[i].size)
			return &ex->ranges[i];
	return NULL;
}

/* [base, base+size) overlaps memory of a node other than node. */
static int range_clash(const struct pvgpu_exec *ex, unsigned int node,
		       uint64_t base, uint64_t size)
{
	for (size_t i = 0; i < ex->nranges; i++) {
		const struct remote_range *r = &ex->ranges[i];

		if (r->node != node && base < r->base + r->size &&
		    r->base < base + size)
			return 1;
	}
	return 0;
}

static int range_add(struct pvgpu_exec *ex, unsigned int node, uint64_t base,
		     uint64_t size)
{
	if (ex->nranges == ex->capranges) {
		size_t cap = ex->capranges ? 2 * ex->capranges : 64;
		struct remote_range *v = realloc(ex->ranges, cap * sizeof(*v));

		if (!v)
			return -1;
		ex->ranges = v;
		ex->capranges = cap;
	}
	ex->ranges[ex->nranges++] = (struct remote_range){ base, size, node };
	return 0;
}

static void node_free(struct remote_node *n, uint64_t dptr)
{
	struct pvgpu_mem_free_req q = { .dptr = dptr };
	struct pvgpu_mem_free_rep r;

	(void)cu(n, pvgpu_call_mem_free(n->c, &q, &r));
}

static int32_t remote_mem_alloc(struct pvgpu_exec *ex, uint64_t size,
				uint64_t *dptr)
{
	struct pvgpu_mem_alloc_req q = { .size = size };
	struct pvgpu_mem_alloc_rep r;
	struct remote_node *n = cur_node(ex);
	uint64_t spare[ALLOC_TRIES];
	unsigned int node, nspare = 0;
	int32_t st;

	if (!n)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!dptr)
		return CUDA_ERROR_INVALID_VALUE;
	node = (unsigned int)(n - ex->nodes);
	for (;;) {
		st = cu(n, pvgpu_call_mem_alloc(n->c, &q, &r));
		if (st)
			break;
		if (!range_clash(ex, node, r.dptr, size ? size : 1))
			break;
		if (nspare == ALLOC_TRIES) {
			if (!ex->clash_said)
				say("%s: %u allocations in a row inside another node's memory: refused (said once per session)",
				    n->uri, ALLOC_TRIES + 1);
			ex->clash_said = 1;
			node_free(n, r.dptr);
			st = CUDA_ERROR_OUT_OF_MEMORY;
			break;
		}
		spare[nspare++] = r.dptr;	/* held, so the next differs */
	}
	while (nspare)
		node_free(n, spare[--nspare]);
	if (st)
		return st;
	if (range_add(ex, node, r.dptr, size ? size : 1)) {
		node_free(n, r.dptr);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*dptr = r.dptr;
	return CUDA_SUCCESS;
}

static int32_t remote_mem_free(struct pvgpu_exec *ex, uint64_t dptr)
{
	struct pvgpu_mem_free_req q = { .dptr = dptr };
	struct pvgpu_mem_free_rep r;
	struct remote_range *a = ex ? range_at(ex, dptr) : NULL;
	struct remote_node *n = a ? &ex->nodes[a->node] : cur_node(ex);
	int32_t st;

	if (!n)
		return CUDA_ERROR_INVALID_CONTEXT;
	st = cu(n, pvgpu_call_mem_free(n->c, &q, &r));
	if (!st && a && a->base == dptr)
		*a = ex->ranges[--ex->nranges];
	return st;
}

static int32_t remote_mem_get_info(struct pvgpu_exec *ex, uint64_t *free_bytes,
				   uint64_t *total_bytes)
{
	struct pvgpu_mem_get_info_req q = { 0 };
	struct pvgpu_mem_get_info_rep r;
	struct remote_node *n = cur_node(ex);
	int32_t st;

	if (!n)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!free_bytes || !total_bytes)
		return CUDA_ERROR_INVALID_VALUE;
	st = cu(n, pvgpu_call_mem_get_info(n->c, &q, &r));
	if (!st) {
		*free_bytes = r.free;
		*total_bytes = r.total;
	}
	return st;
}

/*
 * Staging memory here is ordinary memory: the client copies out of it (or
 * into it) before a call returns, so nothing needs pinning on this node.
 */
static int32_t remote_host_alloc(struct pvgpu_exec *ex, size_t size, void **p)
{
	long page = sysconf(_SC_PAGESIZE);

	if (!ex || !p || !size)
		return CUDA_ERROR_INVALID_VALUE;
	if (posix_memalign(p, page > 0 ? (size_t)page : 4096, size))
		return CUDA_ERROR_OUT_OF_MEMORY;
	return CUDA_SUCCESS;
}

static int32_t host_free(struct pvgpu_exec *ex, void *p)
{
	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	free(p);
	return CUDA_SUCCESS;
}

static int32_t remote_host_register(struct pvgpu_exec *ex, void *p, size_t size)
{
	return !ex || !p || !size ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

static int32_t host_unregister(struct pvgpu_exec *ex, void *p)
{
	return !ex || !p ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

static int32_t remote_host_release(struct pvgpu_exec *ex, void *p,
				   bool registered)
{
	return registered ? host_unregister(ex, p) : host_free(ex, p);
}

/* ------------------------------------------------------------------ */
/* copies */

static int32_t remote_htod(struct pvgpu_exec *ex, uint64_t dst,
			   const void *host, uint64_t size, bool queued,
			   uint64_t stream)
{
	struct pvgpu_memcpy_htod_async_req q = { .dst = dst, .size = size };
	struct remote_node *n = stream_node(ex, stream, &q.stream);

	if (!n)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!host && size)
		return CUDA_ERROR_INVALID_VALUE;
	if (!queued) {
		struct pvgpu_memcpy_htod_req sq = {
			.dst = dst, .size = size, .stream = q.stream,
		};
		struct pvgpu_memcpy_htod_rep sr;

		return cu(n, pvgpu_call_memcpy_htod(n->c, &sq, &sr, host));
	}
	/* Written at once, answered never: errors come back deferred. */
	return cu(n, pvgpu_call_memcpy_htod_async(n->c, &q, host));
}

static int32_t remote_dtoh(struct pvgpu_exec *ex, void *host, uint64_t src,
			   uint64_t size, uint64_t stream)
{
	struct pvgpu_memcpy_dtoh_req q = { .src = src, .size = size };
	struct pvgpu_memcpy_dtoh_rep r;
	struct remote_node *n = stream_node(ex, stream, &q.stream);

	if (!n)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!host && size)
		return CUDA_ERROR_INVALID_VALUE;
	/* Ordered on the stream there; done (and in host) when it returns. */
	return cu(n, pvgpu_call_memcpy_dtoh(n->c, &q, &r, host));
}

static int32_t remote_dtod(struct pvgpu_exec *ex, uint64_t dst, uint64_t src,
			   uint64_t size, uint64_t stream)
{
	struct pvgpu_memcpy_dtod_async_req q = {
		.dst = dst, .src = src, .size = size,
	};
	struct remote_node *n = stream_node(ex, stream, &q.stream);

	if (!n)
		return CUDA_ERROR_INVALID_HANDLE;
	return cu(n, pvgpu_call_memcpy_dtod_async(n->c, &q));
}

static int32_t remote_memset_async(struct pvgpu_exec *ex, uint64_t dst,
				   uint32_t value, uint32_t elem_size,
				   uint64_t count, uint64_t stream)
{
	struct pvgpu_memset_async_req q = {
		.dst = dst, .value = value, .elem_size = elem_size,
		.count = count,
	};
	struct remote_node *n = stream_node(ex, stream, &q.stream);

	if (!n)
		return CUDA_ERROR_INVALID_HANDLE;
	return cu(n, pvgpu_call_memset_async(n->c, &q));
}

/* ------------------------------------------------------------------ */
/* streams */

static int32_t remote_stream_create(struct pvgpu_exec *ex, uint32_t flags,
				    int32_t priority, uint64_t *stream)
{
	struct pvgpu_stream_create_req q = { .flags = flags, .priority = priority };
	struct pvgpu_stream_create_rep r;
	struct remote_node *n = cur_node(ex);
	int32_t st;

	if (!n)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!stream)
		return CUDA_ERROR_INVALID_VALUE;
	st = cu(n, pvgpu_call_stream_create(n->c, &q, &r));
	return st ? st : tagged(ex, n, r.stream, stream);
}

static int32_t remote_stream_destroy(struct pvgpu_exec *ex, uint64_t stream)
{
	struct pvgpu_stream_destroy_req q = { 0 };
	struct pvgpu_stream_destroy_rep r;
	struct remote_node *n;

	if (!ex || !(n = untag(ex, stream, &q.stream)))
		return CUDA_ERROR_INVALID_HANDLE;
	return cu(n, pvgpu_call_stream_destroy(n->c, &q, &r));
}

static int32_t stream_synchronize(struct pvgpu_exec *ex, uint64_t stream)
{
	struct pvgpu_stream_synchronize_req q = { 0 };
	struct pvgpu_stream_synchronize_rep r;
	struct remote_node *n = stream_node(ex, stream, &q.stream);

	if (!n)
		return CUDA_ERROR_INVALID_HANDLE;
	return cu(n, pvgpu_call_stream_synchronize(n->c, &q, &r));
}

static int32_t remote_synchronize(struct pvgpu_exec *ex, bool whole_ctx,
				  uint64_t stream)
{
	return whole_ctx ? ctx_synchronize(ex) : stream_synchronize(ex, stream);
}

/* ------------------------------------------------------------------ */
/* modules and kernels */

static int32_t remote_module_load(struct pvgpu_exec *ex, const void *image,
				  size_t size, uint64_t *module)
{
	struct pvgpu_module_load_req q = { .size = size };
	struct pvgpu_module_load_rep r;
	struct remote_node *n = cur_node(ex);
	int32_t st;

	if (!n)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!image || !size || !module)
		return CUDA_ERROR_INVALID_VALUE;
	/* The node keeps its own cache by hash: a second session's load is cheap there too. */
	st = cu(n, pvgpu_call_module_load(n->c, &q, &r, image));
	return st ? st : tagged(ex, n, r.module, module);
}

static int32_t remote_module_unload(struct pvgpu_exec *ex, uint64_t module)
{
	struct pvgpu_module_unload_req q = { 0 };
	struct pvgpu_module_unload_rep r;
	struct remote_node *n;

	if (!ex || !(n = untag(ex, module, &q.module)))
		return CUDA_ERROR_INVALID_HANDLE;
	return cu(n, pvgpu_call_module_unload(n->c, &q, &r));
}

static struct remote_func *func_find(struct pvgpu_exec *ex, uint64_t h)
{
	for (size_t i = 0; i < ex->nfuncs; i++)
		if (ex->funcs[i].handle == h)
			return &ex->funcs[i];
	return NULL;
}

static int32_t module_function(struct pvgpu_exec *ex, struct remote_node *n,
			       uint64_t module, const char *name,
			       uint64_t *func)
{
	struct pvgpu_module_get_function_req *q;
	struct pvgpu_module_get_function_rep *r;
	struct remote_func *f;
	size_t len;
	int32_t st;

	len = strlen(name);
	/* The reply is 8 KiB of layout: off the (worker's) stack. */
	q = calloc(1, sizeof(*q));
	r = calloc(1, sizeof(*r));
	if (!q || !r) {
		st = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	q->module = module;
	if (len >= sizeof(q->name)) {
		st = CUDA_ERROR_NOT_FOUND;
		goto out;
	}
	memcpy(q->name, name, len + 1);
	q->name_len = (uint32_t)len;
	st = cu(n, pvgpu_call_module_get_function(n->c, q, r));
	if (st)
		goto out;
	if (r->param_offset_count != r->param_size_count) {
		st = CUDA_ERROR_UNKNOWN;
		goto out;
	}
	st = tagged(ex, n, r->func, func);
	if (st)
		goto out;
	f = func_find(ex, *func);
	if (!f) {
		if (ex->nfuncs == ex->capfuncs) {
			size_t cap = ex->capfuncs ? ex->capfuncs * 2 : 16;
			struct remote_func *v = realloc(ex->funcs, cap * sizeof(*v));

			if (!v) {
				st = CUDA_ERROR_OUT_OF_MEMORY;
				goto out;
			}
			ex->funcs = v;
			ex->capfuncs = cap;
		}
		f = &ex->funcs[ex->nfuncs++];
		memset(f, 0, sizeof(*f));
		f->handle = *func;
	}
	free(f->layout);
	f->layout = NULL;
	f->n = r->param_size_count;
	if (f->n) {
		f->layout = calloc(f->n, sizeof(*f->layout));
		if (!f->layout) {
			f->n = 0;
			st = CUDA_ERROR_OUT_OF_MEMORY;
			goto out;
		}
	}
	for (uint32_t i = 0; i < f->n; i++) {
		f->layout[i].offset = r->param_offset[i];
		f->layout[i].size = r->param_size[i];
	}
out:
	free(q);
	free(r);
	return st;
}

static int32_t module_global(struct remote_node *n, uint64_t module,
			     const char *name, uint64_t *dptr, uint64_t *size)
{
	struct pvgpu_module_get_global_req *q;
	struct pvgpu_module_get_global_rep r;
	size_t len;
	int32_t st;

	q = calloc(1, sizeof(*q));
	if (!q)
		return CUDA_ERROR_OUT_OF_MEMORY;
	len = strlen(name);
	q->module = module;
	if (len >= sizeof(q->name))
		st = CUDA_ERROR_NOT_FOUND;
	else {
		memcpy(q->name, name, len + 1);
		q->name_len = (uint32_t)len;
		st = cu(n, pvgpu_call_module_get_global(n->c, q, &r));
		if (!st) {
			*dptr = r.dptr;
			*size = r.size;
		}
	}
	free(q);
	return st;
}

/* Asked of the module's node (both results wanted, for a global too). */
static int32_t remote_module_symbol(struct pvgpu_exec *ex, uint64_t module,
				    enum pvgpu_symbol_kind kind,
				    const char *name, uint64_t *value,
				    uint64_t *size)
{
	struct remote_node *n;
	uint64_t local;

	if (!ex || !name || !value ||
	    (kind == PVGPU_SYM_GLOBAL ? !size : kind != PVGPU_SYM_FUNCTION))
		return CUDA_ERROR_INVALID_VALUE;
	n = untag(ex, module, &local);
	if (!n)
		return CUDA_ERROR_INVALID_HANDLE;
	return kind == PVGPU_SYM_FUNCTION ?
	       module_function(ex, n, local, name, value) :
	       module_global(n, local, name, value, size);
}

static int32_t remote_function_params(struct pvgpu_exec *ex, uint64_t func,
				      struct pvgpu_param_info *layout,
				      uint32_t max, uint32_t *count)
{
	struct remote_func *f;

	if (!ex || !count || (max && !layout))
		return CUDA_ERROR_INVALID_VALUE;
	f = func_find(ex, func);
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	for (uint32_t i = 0; i < f->n && i < max; i++)
		layout[i] = f->layout[i];
	*count = f->n;
	return CUDA_SUCCESS;
}

/* With launch attributes: the same launch, its attributes as they came. */
static int32_t remote_launch_ex(struct remote_node *n,
				const struct pvgpu_launch_kernel_req *q,
				const struct pvgpu_launch *l)
{
	struct pvgpu_launch_kernel_ex_req x = {
		.func = q->func, .grid_x = q->grid_x, .grid_y = q->grid_y,
		.grid_z = q->grid_z, .block_x = q->block_x,
		.block_y = q->block_y, .block_z = q->block_z,
		.shared_bytes = q->shared_bytes, .stream = q->stream,
		.params = q->params, .params_len = q->params_len,
	};

	if (l->nattrs > PVGPU_MAX_LAUNCH_ATTRS || !l->attrs)
		return CUDA_ERROR_INVALID_VALUE;
	for (uint32_t i = 0; i < l->nattrs; i++) {
		x.attrs[4 * i] = l->attrs[i].id;
		memcpy(&x.attrs[4 * i + 1], l->attrs[i].v, sizeof(l->attrs[i].v));
	}
	x.attrs_count = 4 * l->nattrs;
	return cu(n, pvgpu_call_launch_kernel_ex(n->c, &x));
}

static int32_t remote_launch(struct pvgpu_exec *ex,
			     const struct pvgpu_launch *l)
{
	struct pvgpu_launch_kernel_req q = { 0 };
	struct remote_node *n, *sn;

	if (!ex || !l || (l->params_size && !l->params))
		return CUDA_ERROR_INVALID_VALUE;
	if (l->run)
		return PVGPU_EXEC_DECLINED;	/* takes_runs: the node's own */
	n = untag(ex, l->func, &q.func);
	if (!n)
		return CUDA_ERROR_INVALID_HANDLE;
	sn = stream_node(ex, l->stream, &q.stream);
	if (sn != n)
		return CUDA_ERROR_INVALID_HANDLE;
	q.grid_x = l->grid[0];
	q.grid_y = l->grid[1];
	q.grid_z = l->grid[2];
	q.block_x = l->block[0];
	q.block_y = l->block[1];
	q.block_z = l->block[2];
	q.shared_bytes = l->shared_bytes;
	q.params = l->params;
	q.params_len = l->params_size;
	if (l->nattrs)
		return remote_launch_ex(n, &q, l);
	return cu(n, pvgpu_call_launch_kernel(n->c, &q));
}

/*
 * Peers.  Devices of one node are asked there; devices of two nodes are
 * never peers (no GPU reaches across the network), and a copy between them
 * is staged through this worker's memory, block by block: node to node,
 * never through the guest.
 */
/* cuDeviceGetP2PAttribute, or cuDeviceCanAccessPeer (executor.h). */
static int32_t remote_peer_attribute(struct pvgpu_exec *ex, int32_t attr,
				     int32_t src, int32_t dst, int32_t *value)
{
	struct pvgpu_device_p2p_attribute_req q = { .attrib = attr };
	struct pvgpu_device_p2p_attribute_rep r;
	struct remote_node *a = dev_node(ex, src, &q.src_device);
	struct remote_node *b = dev_node(ex, dst, &q.dst_device);
	int32_t st;

	if (!a || !b || !value)
		return CUDA_ERROR_INVALID_DEVICE;
	if (a != b) {
		*value = 0;
		return CUDA_SUCCESS;
	}
	if (attr == PVGPU_PEER_CAN_ACCESS) {
		struct pvgpu_device_can_access_peer_req cq = {
			.device = q.src_device, .peer = q.dst_device,
		};
		struct pvgpu_device_can_access_peer_rep cr;

		st = cu(a, pvgpu_call_device_can_access_peer(a->c, &cq, &cr));
		r.value = cr.can_access;
	} else {
		st = cu(a, pvgpu_call_device_p2p_attribute(a->c, &q, &r));
	}
	if (!st)
		*value = r.value;
	return st;
}

/* The current context gains (or loses) access to peer_ctx's memory. */
static int32_t remote_peer_access(struct pvgpu_exec *ex, uint64_t peer_ctx,
				  bool enable, uint32_t flags)
{
	struct pvgpu_ctx_enable_peer_access_req e = { .flags = flags };
	struct pvgpu_ctx_disable_peer_access_req d;
	struct remote_node *n = cur_node(ex), *p;
	uint64_t local;

	if (!n)
		return CUDA_ERROR_INVALID_CONTEXT;
	p = untag(ex, peer_ctx, &local);
	if (!p)
		return CUDA_ERROR_INVALID_HANDLE;
	if (p != n)
		return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
	if (enable) {
		struct pvgpu_ctx_enable_peer_access_rep r;

		e.peer_ctx = local;
		return cu(n, pvgpu_call_ctx_enable_peer_access(n->c, &e, &r));
	} else {
		struct pvgpu_ctx_disable_peer_access_rep r;

		d.peer_ctx = local;
		return cu(n, pvgpu_call_ctx_disable_peer_access(n->c, &d, &r));
	}
}


#define STAGE_BLOCK	(4u << 20)

/* src on node a (context ca), dst on node b (context cb): through here. */
static int32_t stage_between_nodes(struct remote_node *b, uint64_t cb, uint64_t dst,
				   struct remote_node *a, uint64_t ca, uint64_t src,
				   uint64_t size)
{
	struct pvgpu_ctx_set_req set;
	uint8_t *buf;
	int32_t st = CUDA_SUCCESS;

	if (!a->staged) {
		a->staged = 1;
		say("peer copies from %s to %s are staged through this node",
		    a->uri, b->uri);
	}
	buf = malloc(STAGE_BLOCK);
	if (!buf)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (uint64_t off = 0; off < size && !st; off += STAGE_BLOCK) {
		uint64_t n = size - off < STAGE_BLOCK ? size - off : STAGE_BLOCK;
		struct pvgpu_memcpy_dtoh_req dq = { .src = src + off, .size = n };
		struct pvgpu_memcpy_dtoh_rep dr;
		struct pvgpu_memcpy_htod_req hq = { .dst = dst + off, .size = n };
		struct pvgpu_memcpy_htod_rep hr;

		set.ctx = ca;
		st = cu(a, pvgpu_call_ctx_set(a->c, &set));
		if (!st)
			st = cu(a, pvgpu_call_memcpy_dtoh(a->c, &dq, &dr, buf));
		set.ctx = cb;
		if (!st)
			st = cu(b, pvgpu_call_ctx_set(b->c, &set));
		if (!st)
			st = cu(b, pvgpu_call_memcpy_htod(b->c, &hq, &hr, buf));
	}
	free(buf);
	/* Both nodes' current contexts as the session last set them. */
	set.ctx = a->ctx;
	if (a->ctx)
		(void)pvgpu_call_ctx_set(a->c, &set);
	set.ctx = b->ctx;
	if (b->ctx)
		(void)pvgpu_call_ctx_set(b->c, &set);
	return st;
}

/* stream 0: the synchronous copy (cuMemcpyPeer). */
static int32_t remote_peer(struct pvgpu_exec *ex, uint64_t dst,
			   uint64_t dst_ctx, uint64_t src, uint64_t src_ctx,
			   uint64_t size, uint64_t stream)
{
	struct pvgpu_memcpy_peer_async_req q = { .dst = dst, .src = src,
						 .size = size };
	struct remote_node *a, *b, *n;
	uint64_t ls;

	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	b = untag(ex, dst_ctx, &q.dst_ctx);
	a = untag(ex, src_ctx, &q.src_ctx);
	if (!a || !b)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (a != b) {
		/* Staged copies are synchronous: everything queued on the
		 * stream has to be done first. */
		n = stream_node(ex, stream, &ls);
		if (n) {
			struct pvgpu_stream_synchronize_req sq = { .stream = ls };
			struct pvgpu_stream_synchronize_rep sr;
			int32_t st = cu(n, pvgpu_call_stream_synchronize(n->c, &sq, &sr));

			if (st)
				return st;
		}
		return stage_between_nodes(b, q.dst_ctx, dst, a, q.src_ctx,
					   src, size);
	}
	if (stream) {
		if (!(n = untag(ex, stream, &q.stream)) || n != a)
			return CUDA_ERROR_INVALID_HANDLE;
		return cu(a, pvgpu_call_memcpy_peer_async(a->c, &q));
	} else {
		struct pvgpu_memcpy_peer_req s = {
			.dst = dst, .dst_ctx = q.dst_ctx, .src = src,
			.src_ctx = q.src_ctx, .size = size,
		};
		struct pvgpu_memcpy_peer_rep r;

		return cu(a, pvgpu_call_memcpy_peer(a->c, &s, &r));
	}
}

static int32_t array_copy(struct pvgpu_exec *ex,
			  const struct pvgpu_array_copy *c)
{
	struct pvgpu_array_copy_req q;
	struct pvgpu_array_copy_rep r;
	struct remote_node *n, *sn;

	if (!ex || !c)
		return CUDA_ERROR_INVALID_VALUE;
	n = untag(ex, c->array, &q.array);
	sn = stream_node(ex, c->stream, &q.stream);
	if (!n || sn != n)
		return CUDA_ERROR_INVALID_HANDLE;
	q.x = c->x;
	q.y = c->y;
	q.z = c->z;
	q.width = c->width;
	q.height = c->height;
	q.depth = c->depth;
	q.dptr = c->dptr;
	q.pitch = c->pitch;
	q.rows = c->rows;
	q.to_array = (uint32_t)c->to_array;
	return cu(n, pvgpu_call_array_copy(n->c, &q, &r));
}

/*
 * Every copy (executor.h), by the node's own ops: a device-to-host copy
 * there returns when done, on its stream; a synchronous one is on the
 * node's legacy stream.
 */
static int32_t remote_copy(struct pvgpu_exec *ex, const struct pvgpu_exec_copy *c)
{
	uint64_t stream = c->queued ? c->stream : 0;
	int32_t st;

	switch (c->kind) {
	case PVGPU_COPY_HTOD:
		return remote_htod(ex, c->dst, c->host, c->size, c->queued,
				   stream);
	case PVGPU_COPY_DTOH:
		return remote_dtoh(ex, c->host, c->src, c->size, stream);
	case PVGPU_COPY_DTOD:
		st = remote_dtod(ex, c->dst, c->src, c->size, stream);
		return st || c->queued ? st : stream_synchronize(ex, 0);
	case PVGPU_COPY_PEER:
		return remote_peer(ex, c->dst, c->dst_ctx, c->src, c->src_ctx,
				   c->size, stream);
	case PVGPU_COPY_ARRAY:
		return c->array ? array_copy(ex, c->array) :
				  CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_ERROR_INVALID_VALUE;
}

static int32_t remote_max_clusters(struct pvgpu_exec *ex, uint64_t func,
				   const struct pvgpu_launch *s,
				   const uint32_t cluster[3], int32_t *clusters)
{
	struct pvgpu_func_max_clusters_req q = {
		.grid_x = s->grid[0], .grid_y = s->grid[1], .grid_z = s->grid[2],
		.block_x = s->block[0], .block_y = s->block[1],
		.block_z = s->block[2], .shared_bytes = s->shared_bytes,
		.cluster_x = cluster[0], .cluster_y = cluster[1],
		.cluster_z = cluster[2],
	};
	struct pvgpu_func_max_clusters_rep r;
	struct remote_node *n;
	int32_t st;

	if (!clusters)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex || !(n = untag(ex, func, &q.func)))
		return CUDA_ERROR_INVALID_HANDLE;
	st = cu(n, pvgpu_call_func_max_clusters(n->c, &q, &r));
	if (!st)
		*clusters = r.clusters;
	return st;
}

/* ------------------------------------------------------------------ */
/* CUDA arrays: the node's, tagged like every other handle */

static int32_t remote_array_create(struct pvgpu_exec *ex,
				   const struct pvgpu_array_desc *d, uint64_t *array)
{
	struct pvgpu_array_create_req q;
	struct pvgpu_array_create_rep r;
	struct remote_node *n = cur_node(ex);
	int32_t st;

	if (!n)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!d || !array)
		return CUDA_ERROR_INVALID_VALUE;
	q = (struct pvgpu_array_create_req){
		.width = d->width, .height = d->height, .depth = d->depth,
		.format = d->format, .channels = d->channels, .flags = d->flags,
	};
	st = cu(n, pvgpu_call_array_create(n->c, &q, &r));
	return st ? st : tagged(ex, n, r.array, array);
}

/* A surface object of an array of the current context. */
static int32_t surf_create(struct pvgpu_exec *ex, uint64_t array,
			   uint64_t *obj)
{
	struct pvgpu_surf_create_req q;
	struct pvgpu_surf_create_rep r;
	struct remote_node *n = cur_node(ex);
	int32_t st;

	if (!n)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!obj || untag(ex, array, &q.array) != n)
		return CUDA_ERROR_INVALID_HANDLE;
	st = cu(n, pvgpu_call_surf_create(n->c, &q, &r));
	if (!st)
		*obj = r.obj;
	return st;
}

/*
 * Texture and surface objects: the node's driver values, untagged (a
 * kernel on the node reads them).  The worker lets a session destroy only
 * an object it made, in the context it made it in: the current node's.
 */
static int32_t remote_tex_create(struct pvgpu_exec *ex,
				 const struct pvgpu_tex_desc *d, bool surface,
				 uint64_t *obj)
{
	struct pvgpu_tex_create_req q;
	struct pvgpu_tex_create_rep r;
	struct remote_node *n = cur_node(ex);
	uint64_t handle = d ? d->dptr : 0;
	int32_t st;

	if (!n)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!d || !obj)
		return CUDA_ERROR_INVALID_VALUE;
	if (surface)
		return surf_create(ex, d->array, obj);
	if (d->res_type == CU_RESOURCE_TYPE_ARRAY && untag(ex, d->array, &handle) != n)
		return CUDA_ERROR_INVALID_HANDLE;
	q = (struct pvgpu_tex_create_req){
		.res_type = d->res_type, .handle = handle, .format = d->format,
		.channels = d->channels, .width = d->width, .height = d->height,
		.pitch = d->pitch, .size = d->size, .address0 = d->address[0],
		.address1 = d->address[1], .address2 = d->address[2],
		.filter = d->filter, .flags = d->flags, .max_aniso = d->max_aniso,
		.mip_filter = d->mip_filter, .mip_bias = d->mip_bias,
		.mip_min = d->mip_min, .mip_max = d->mip_max,
		.border0 = d->border[0], .border1 = d->border[1],
		.border2 = d->border[2], .border3 = d->border[3],
	};
	st = cu(n, pvgpu_call_tex_create(n->c, &q, &r));
	if (!st)
		*obj = r.obj;
	return st;
}

/* ------------------------------------------------------------------ */
/* the generic driver call */

/*
 * Any generic call, whatever its id, goes on to the node with this one
 * function: the front's worker has checked it against the session's
 * tables, the node's worker checks it again against its own.  The call
 * goes to the node its stream, handle or device arguments belong to (all
 * the same one), else to the current context's.  Streams and handles are
 * untagged to the node's own ids, devices to its own indexes, new handles
 * tagged on the way back; texture and surface objects are the node's
 * driver values as they are (a kernel reads them), on the current
 * context's node; device pointers pass untouched.  Structures the call
 * reads travel with it and those it writes come back (driver_call_data),
 * into the worker's own storage.
 */
static int32_t remote_driver_call(struct pvgpu_exec *ex,
				  const struct pvgpu_generic_fn *f, uint64_t *a)
{
	struct pvgpu_driver_call_data_req dq = { 0 };
	struct pvgpu_driver_call_data_rep *dr = NULL;
	struct remote_node *n = NULL, *hn;
	uint64_t args[PVGPU_GENERIC_MAX_ARGS] = { 0 };
	const uint64_t *results;
	uint8_t in[sizeof(dr->output)];
	uint32_t nin = 0, nout = 0, results_count;
	int32_t st, dev = 0;

	if (!ex || !f || !a || f->nargs > PVGPU_GENERIC_MAX_ARGS)
		return CUDA_ERROR_INVALID_VALUE;
	if (f->id == PVGPU_GENERIC_cuStreamWaitEvent &&
	    (n = stream_node(ex, a[0], &args[0])) &&
	    (hn = untag(ex, a[1], &args[1])) && hn != n) {
		/*
		 * An event of another node: no stream there can wait on it, so
		 * wait here, which orders everything after it too (stricter,
		 * never wrong).
		 */
		struct pvgpu_driver_call_req q = {
			.fn = PVGPU_GENERIC_cuEventSynchronize, .args_count = 1,
			.args = { args[1] } };
		struct pvgpu_driver_call_rep r;

		return cu(hn, pvgpu_call_driver_call(hn->c, &q, &r));
	}
	for (uint32_t i = 0; i < f->nargs; i++) {
		const struct pvgpu_generic_arg *g = &f->args[i];

		switch (g->kind) {
		case PVGPU_GA_STREAM:
			hn = stream_node(ex, a[i], &args[i]);
			break;
		case PVGPU_GA_HIN:
		case PVGPU_GA_HDEL:
			if (g->size == PVGPU_GH_TEX || g->size == PVGPU_GH_SURF) {
				args[i] = a[i];
				hn = cur_node(ex);
			} else {
				hn = untag(ex, a[i], &args[i]);
			}
			break;
		case PVGPU_GA_DEVICE:
			hn = dev_node(ex, a[i] <= INT32_MAX ? (int32_t)a[i] : -1, &dev);
			args[i] = (uint64_t)dev;
			break;
		case PVGPU_GA_OUT:
		case PVGPU_GA_HNEW:
			args[i] = a[i] != 0;
			continue;
		case PVGPU_GA_INBUF:
			args[i] = a[i] != 0;
			if (a[i] && g->size > sizeof(in) - nin)
				return CUDA_ERROR_INVALID_VALUE;
			if (a[i]) {
				memcpy(in + nin, (const void *)(uintptr_t)a[i], g->size);
				nin += g->size;
			}
			continue;
		case PVGPU_GA_OUTBUF:
			args[i] = a[i] != 0;
			nout += a[i] ? g->size : 0;
			continue;
		default:
			args[i] = a[i];
			continue;
		}
		if (!hn || (n && hn != n))
			return CUDA_ERROR_INVALID_HANDLE;
		n = hn;
	}
	if (!n)
		n = cur_node(ex);
	if (!n)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (f->async) {
		struct pvgpu_driver_call_async_req q = { .fn = f->id,
							 .args_count = f->nargs };

		memcpy(q.args, args, sizeof(q.args));
		return cu(n, pvgpu_call_driver_call_async(n->c, &q));
	}
	struct pvgpu_driver_call_req q = { .fn = f->id, .args_count = f->nargs };
	struct pvgpu_driver_call_rep r = { 0 };

	if (f->data) {
		dr = calloc(1, sizeof(*dr));
		if (!dr)
			return CUDA_ERROR_OUT_OF_MEMORY;
		dq = (struct pvgpu_driver_call_data_req){ .fn = f->id,
			.args_count = f->nargs, .input = in, .input_len = nin };
		memcpy(dq.args, args, sizeof(dq.args));
		st = cu(n, pvgpu_call_driver_call_data(n->c, &dq, dr));
		results = dr->results;
		results_count = dr->results_count;
		if (!st && dr->output_len != nout)
			st = CUDA_ERROR_UNKNOWN;	/* the node broke the protocol */
	} else {
		memcpy(q.args, args, sizeof(q.args));
		st = cu(n, pvgpu_call_driver_call(n->c, &q, &r));
		results = r.results;
		results_count = r.results_count;
	}
	if (!st && results_count != f->nargs)
		st = CUDA_ERROR_UNKNOWN;	/* the node broke the protocol */
	nout = 0;
	for (uint32_t i = 0; !st && i < f->nargs; i++) {
		const struct pvgpu_generic_arg *g = &f->args[i];

		if (g->kind == PVGPU_GA_OUT) {
			a[i] = results[i];
		} else if (g->kind == PVGPU_GA_HNEW && a[i]) {
			st = tagged(ex, n, results[i], &a[i]);
		} else if (g->kind == PVGPU_GA_OUTBUF && a[i]) {
			memcpy((void *)(uintptr_t)a[i], dr->output + nout, g->size);
			nout += g->size;
		}
	}
	free(dr);
	return st;
}

static const struct pvgpu_executor_ops pvgpu_exec_remote = {
	.name			= "remote",
	.open			= remote_open,
	.close			= remote_close,
	.driver_info		= remote_driver_info,
	.device_attribute	= remote_device_attribute,
	.device_info		= remote_device_info,
	.ctx_create		= remote_ctx_create,
	.ctx_destroy		= remote_ctx_destroy,
	.ctx_set		= remote_ctx_set,
	.mem_alloc		= remote_mem_alloc,
	.mem_free		= remote_mem_free,
	.mem_get_info		= remote_mem_get_info,
	.host_alloc		= remote_host_alloc,
	.host_register		= remote_host_register,
	.host_release		= remote_host_release,
	.copy			= remote_copy,
	.memset_async		= remote_memset_async,
	.stream_create		= remote_stream_create,
	.stream_destroy		= remote_stream_destroy,
	.synchronize		= remote_synchronize,
	.module_load		= remote_module_load,
	.module_unload		= remote_module_unload,
	.module_symbol		= remote_module_symbol,
	.function_params	= remote_function_params,
	.launch			= remote_launch,
	.max_clusters		= remote_max_clusters,
	.peer_attribute		= remote_peer_attribute,
	.peer_access		= remote_peer_access,
	.array_create		= remote_array_create,
	.tex_create		= remote_tex_create,
	.driver_call		= remote_driver_call,
};

/* How pvgpud finds it: build/lib/pvgpud/exec-remote.so. */
const struct pvgpu_executor_ops *const pvgpu_executor_plugin = &pvgpu_exec_remote;
