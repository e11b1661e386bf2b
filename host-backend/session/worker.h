/*
 * worker.h - one session, served by one process.
 *
 * The supervisor forks a worker per accepted connection.  The worker owns
 * the connection, an executor instance (and through it the session's CUDA
 * contexts), and the tables that say which handles and device memory the
 * session owns.  When the session ends, however it ends, the worker closes
 * the executor and exits, and the process boundary frees whatever is left.
 */
#ifndef PVGPU_WORKER_H
#define PVGPU_WORKER_H

#include <stddef.h>
#include <stdint.h>

#include "accounting.h"
#include "executor.h"
#include "handles.h"
#include "host.h"
#include "loglimit.h"
#include "policy.h"
#include "pvgpu_proto.h"
#include "gpusched.h"
#include "output.h"
#include "signal_word.h"
#include "window.h"
#include "worker_reattach.h"
#include "session.h"
#include "ring.h"

#define PVGPU_STAGING_BUFFERS	4
#define PVGPU_NOTED_ERRORS	32
#define PVGPU_WINDOW_PINS	256
#define PVGPU_WINDOW_MAX_SLOTS	64	/* staging slots a window may have */
/*
 * Contexts a session may hold on one GPU at once.  Each takes device
 * memory the driver keeps for itself, charged to the VM's memory at what
 * the start-up probe measured (accounting.h ctx_bytes); a program needs
 * one per GPU, the primary.
 */
#define PVGPU_CTX_PER_DEVICE	4

struct pvgpu_staging {
	void *buf;			/* pinned, `block` bytes */
	uint64_t event;			/* executor event; 0 until first use */
	int busy;			/* a DMA may still read/write buf */
};

/* What copies stage through (copy.c): pinned buffers taken in turn, and
 * one small buffer of ordinary memory for small synchronous copies. */
struct pvgpu_copy_bufs {
	struct pvgpu_staging staging[PVGPU_STAGING_BUFFERS];
	unsigned int next;		/* the buffer to take next */
	uint64_t pinned;		/* bytes of them counted in slot->host_pinned */
	uint8_t *small;			/* PVGPU_SMALL_COPY bytes */
};

/* The session's shared window, as the worker checked it at attach time. */
struct pvgpu_window {
	uint8_t *base;			/* NULL: no window */
	uint64_t size;
	int borrowed;			/* the channel's memory (Xen grants): not ours to unmap */
	/* The guest process's own memfd (shm://), not a VM's window: only
	 * such a ring session is kept for a resume (reattach.c). */
	int own;
	int same_address;		/* mapped where the guest has it (managed.c) */
	struct pvgpu_window_header *hdr;
	uint64_t staging_offset;
	uint32_t slot_size, nslots;
	uint64_t staging_ctx;		/* context the staging slots are pinned in */
	uint64_t slot_ev_ctx;		/* context of slot_ev; 0: none made */
	uint64_t slot_ev[PVGPU_WINDOW_MAX_SLOTS];	/* one executor event per slot */
	uint64_t h2d_seq, d2h_seq;	/* blocks through the ring so far */
	struct pvgpu_window_pin {
		uint64_t offset, size;
		uint64_t ctx;		/* 0: its context was destroyed */
		uint64_t dptr;		/* its device address, once asked (hostmap.c) */
		int managed;		/* cuMemAllocManaged's (managed.c) */
	} pins[PVGPU_WINDOW_PINS];	/* the guest's pinned allocations */
	unsigned int npins;
};

/*
 * Staging buffers of copy nodes whose host end is guest memory the worker
 * cannot see (capture.c).  A buffer lives while its graph holds the node
 * or an executable graph made from that graph does.
 */
struct pvgpu_staged {
	uint64_t id;			/* the guest's name for it */
	uint8_t *buf;
	uint64_t size;
	uint64_t dptr;			/* its node's device end */
	uint64_t graph, node;		/* its node's ids; 0: gone */
	uint32_t execs;			/* executable graphs using it */
	int to_host;
};
struct pvgpu_staged_set {
	struct pvgpu_staged *v;
	size_t n, cap;
	uint64_t bytes;			/* in all, at most PVGPU_STAGED_MAX */
	uint64_t serial;
};
#define PVGPU_STAGED_MAX	(1ull << 30)


/* Opcodes counted by sync_ops: every one ops.spec declares. */
#define PVGPU_SYNC_OPS (PVGPU_OP_MAX + 1)

struct pvgpu_worker {
	struct pvgpu_conn *conn;	/* the channel: only through its ops */
	struct pvgpu_peer peer;
	const struct pvgpu_worker_config *cfg;
	struct pvgpu_slot *slot;
	struct pvgpu_accounting *acct;

	const struct pvgpu_executor_ops *ex_ops;
	struct pvgpu_exec *ex;
	char ex_error[256];		/* why the executor did not open */

	int said_hello;
	int ipc_refusal_said;		/* an IPC export's refusal was logged */
	uint32_t version;
	uint64_t features;	/* agreed at hello: PVGPU_FEATURE_* */
	uint64_t req_id;		/* id of the request being served */
	int32_t deferred;		/* first error of async work since the last reply */
	int fatal;			/* protocol broken: end the session */
	/*
	 * Reading the next request's header, between calls: where an
	 * executor's idle_point may act on a checkpointer's request.
	 */
	int between_calls;
	struct {
		uint16_t opcode;
		int32_t status;
	} noted[PVGPU_NOTED_ERRORS];	/* errors already logged once */
	unsigned int nnoted;
	struct pvgpu_log_limit loglim;	/* what its requests may log */

	struct pvgpu_handles handles;	/* contexts, streams, events */
	struct pvgpu_allocs allocs;	/* device memory */
	uint64_t cur_ctx;		/* handle of the current context, 0: none */

	struct pvgpu_copy_bufs copy;	/* staging of copies (copy.c) */
	uint8_t *rx;			/* one control payload or batch */
	uint16_t req_opcode;		/* the request being served: its opcode, */
	uint32_t req_len;		/* its payload's bytes */
	const uint8_t *batch_next;	/* the batch's next message, */
	size_t batch_left;		/* its bytes from there on */

	uint64_t served;		/* messages served, this one included */
	/*
	 * Identical launches held while the guest's next message already
	 * waits (runs.c): the last launch's request, its parameters copied,
	 * the message it was (served; 0: none), and how many like it are
	 * held.
	 */
	struct pvgpu_run {
		uint32_t count;
		uint64_t last;
		struct pvgpu_launch_kernel_req req;
		uint8_t params[PVGPU_RUN_PARAMS_MAX];
	} run;
	uint64_t runs;			/* runs the executor took */

	struct pvgpu_window win;
	/*
	 * The control ring in the window (feature ring): taken at
	 * window_attach (ring_pending), used from the message after its
	 * reply on (ring_on); the socket then carries only wake-ups.
	 */
	struct pvgpu_ring ring;
	int ring_pending, ring_on;
	/*
	 * What carries the messages (worker_io.c): the channel, or the ring
	 * in front of it, chosen once as ring_on is set; a resume's hello
	 * and its reply cross the new channel itself (reattach.c).
	 */
	const struct pvgpu_worker_wire *wire;
	uint32_t req_flags;		/* the request's header flags */
	struct pvgpu_signal signal;	/* completion by the device's word (signal.c) */

	struct pvgpu_sched_session sched;	/* its launches in flight */

	struct pvgpu_output output;	/* device printf (output.c) */
	/*
	 * Streams in stream capture (generic.c): while any is, the scheduler
	 * records no events of its own, which would land in the guest's graph.
	 */
	unsigned int capturing;
	struct pvgpu_staged_set staged;	/* capture.c */
	/* Requests that waited for a reply, by opcode: at debug level, the
	 * session's end names the ones a program made most (a front-end that
	 * should answer something locally shows up here). */
	uint32_t sync_ops[PVGPU_SYNC_OPS];

	int32_t device_count;		/* as hello said it (a resume says it again) */
	struct pvgpu_resume resume;	/* after a lost connection (reattach.c) */
};

/* One OUTPUT frame with the current request's id (worker_io.c). */
int pvgpu_worker_send_output(struct pvgpu_worker *w, const void *payload,
			     uint32_t len);


/* Connection I/O for handlers (worker_io.c). 0 on success, -1 when the
 * connection is gone or the peer broke the framing (w->fatal is set). */
int pvgpu_worker_read(struct pvgpu_worker *w, void *buf, size_t len);
/*
 * Before a request reaches the executor: if the session is not running
 * (suspend.h), ask the supervisor to resume it and wait for that, at most
 * cfg->resume_wait_ns.  0: running; -1: no resume came (said once, and the
 * session is to end).
 */
int pvgpu_worker_await_running(struct pvgpu_worker *w);
/*
 * After the driver refused an allocation of bytes on device dev: where
 * the policy oversubscribes dev, ask the supervisor to make room
 * (oversub.h) and wait for its answer, at most cfg->resume_wait_ns.
 * 1 when it asked (retry the allocation once), 0 when it did not.
 */
int pvgpu_worker_make_room(struct pvgpu_worker *w, int dev, uint64_t bytes);
/*
 * Would bytes more on device dev pass the policy's [gpu N] memory, counting
 * what every running session holds there?  Then the allocation is out of
 * memory as on a full GPU.  Counted without a lock: two sessions that
 * allocate at once may pass it by what they allocate then, as two
 * processes may find the same free bytes of a real GPU.
 */
int pvgpu_worker_over_cap(struct pvgpu_worker *w, int dev, uint64_t bytes);
/* Where the worker idles: let the executor act (executor.h idle_point). */
void pvgpu_worker_idle_point(struct pvgpu_worker *w);
int pvgpu_worker_read_data_hdr(struct pvgpu_worker *w, uint32_t max,
			       uint32_t *len);
/* The next DATA frame of a copy with left bytes still to come: at most max, and left. */
int pvgpu_worker_next_frame(struct pvgpu_worker *w, uint32_t max, uint64_t left,
			    uint32_t *len);
/* Read the DATA frames of the current request, size bytes in all. */
int pvgpu_worker_recv_data(struct pvgpu_worker *w, uint8_t *buf, uint64_t size);
int pvgpu_worker_send_data(struct pvgpu_worker *w, const void *buf,
			   uint32_t len);
int pvgpu_worker_send_reply(struct pvgpu_worker *w, uint16_t opcode,
			    int32_t status, const uint8_t *fields, size_t len);

/*
 * Stream id -> executor stream (ops.c); 0 is the current context's default
 * stream, and a stream of another context is CUDA_ERROR_INVALID_HANDLE.
 */
int32_t pvgpu_lookup_stream(struct pvgpu_worker *w, uint64_t id,
			    uint64_t *exec);

/*
 * Runs of identical launches (runs.c).  pvgpu_run_take: 1 when this launch
 * joined the held run or began one (it is then launched with it), 0 when
 * the caller launches it now.  pvgpu_run_flush: launch what is held; the
 * worker calls it before serving anything else and before it waits for
 * the guest.  pvgpu_worker_more_input: the guest's next message is
 * already here (the rest of a batch, or a record in the ring);
 * pvgpu_worker_next_alike: and it may be another of the request being
 * served (the same opcode in a batch, and as many bytes).
 * pvgpu_worker_async_failed: an async request failed (its error is the
 * next reply's, logged once per kind).
 */
int pvgpu_run_take(struct pvgpu_worker *w,
		   const struct pvgpu_launch_kernel_req *req);
void pvgpu_run_flush(struct pvgpu_worker *w);
int pvgpu_worker_more_input(struct pvgpu_worker *w);
int pvgpu_worker_next_alike(struct pvgpu_worker *w);
void pvgpu_worker_async_failed(struct pvgpu_worker *w, uint16_t opcode,
			       int32_t st);

/* A struct pvgpu_launch's shape and parameters from a launch_kernel or
 * launch_kernel_ex request. */
#define PVGPU_LAUNCH_SHAPE(req)						\
	.grid = { (req)->grid_x, (req)->grid_y, (req)->grid_z },	\
	.block = { (req)->block_x, (req)->block_y, (req)->block_z },	\
	.shared_bytes = (req)->shared_bytes, .params = (req)->params,	\
	.params_size = (req)->params_len

/*
 * Room for one more handle under the session's bound (handles.h), asked
 * before the executor makes what it would name, so that a refusal makes
 * and frees nothing: CUDA_SUCCESS or CUDA_ERROR_OUT_OF_MEMORY (ops.c).
 */
int32_t pvgpu_room_for_handle(struct pvgpu_worker *w);

/* The device of the current context, -1 without one (the scheduler's d). */
static inline int pvgpu_cur_device(struct pvgpu_worker *w)
{
	struct pvgpu_handle *ctx = pvgpu_handle_get(&w->handles, w->cur_ctx, H_CTX);

	return ctx ? ctx->device : -1;
}

/*
 * A kernel launch from the guest (modules.c): checked, in its VM's turn,
 * then the executor's launch, with run set PVGPU_LAUNCH_RUN of them (or
 * PVGPU_EXEC_DECLINED and none).
 */
int32_t pvgpu_kernel_launch(struct pvgpu_worker *w, struct pvgpu_launch *l,
			    uint64_t func, uint64_t guest_stream, int run);

/*
 * A launch's function id and packed params checked against the function's
 * parameter layout; l->func, layout and nparams filled in (modules.c).
 */
int32_t pvgpu_kernel_prepare(struct pvgpu_worker *w, struct pvgpu_launch *l,
			     uint64_t func);

/*
 * Where [offset, offset + size) of the window lies in the worker, when it
 * is all inside the window's arena (the guest's host allocations, pinned
 * where the guest registered them; mapped while the session lasts); else
 * NULL (window.c).
 */
void *pvgpu_window_host(struct pvgpu_worker *w, uint64_t offset,
			uint64_t size);

/* A graph's node handles dropped with it (graphs.c). */
void pvgpu_graph_forget(struct pvgpu_worker *w, uint64_t graph);
/* The session's id for an executor node of graph / an executor graph of
 * the current context, made on first sight; 0: out of memory (graphs.c). */
uint64_t pvgpu_graph_node_id(struct pvgpu_worker *w, uint64_t graph,
			     uint64_t node, uint32_t type);
uint64_t pvgpu_graph_id(struct pvgpu_worker *w, uint64_t graph);
/* A new node's dependencies checked: nodes of graph, no repeats; out[] the
 * executor's node handles (graphs.c). */
int32_t pvgpu_graph_deps(struct pvgpu_worker *w, uint64_t graph,
			 const uint64_t *ids, uint32_t n, uint64_t *out);

/* Graph (0: any) or node (0: any) gives up its buffers. */
void pvgpu_staged_unref(struct pvgpu_worker *w, uint64_t graph, uint64_t node);
/* Executable graph exec now uses graph's buffers (instead of any before). */
int32_t pvgpu_staged_instantiated(struct pvgpu_worker *w, uint64_t exec,
				  uint64_t graph);
/* Executable graph exec is being destroyed. */
void pvgpu_staged_exec_gone(struct pvgpu_worker *w, uint64_t exec);
void pvgpu_staged_free(struct pvgpu_worker *w);
/* The driver gave [base, base + size) to an allocation of another kind:
 * graph allocations there are gone (their memory trimmed) (capture.c). */
void pvgpu_graph_allocs_reused(struct pvgpu_worker *w, uint64_t base,
			       uint64_t size);
/* Before a graph launch: graph memory freed outside its graph charged
 * again, as the launch maps it again (capture.c). */
int32_t pvgpu_graph_allocs_mapped(struct pvgpu_worker *w);

/* May the session's VM use this device (its policy's gpus)? (ops.c) */
int pvgpu_vm_may_use(struct pvgpu_worker *w, int32_t device);

/*
 * A device-to-device copy whose ends lie on two GPUs (peer.c): d and s
 * are the session's allocations holding dst and src, stream an executor
 * stream of the current context.
 */
int32_t pvgpu_peer_dtod(struct pvgpu_worker *w, const struct pvgpu_alloc *d,
			uint64_t dst, const struct pvgpu_alloc *s, uint64_t src,
			uint64_t size, uint64_t stream, int sync);

/* Pipelined copies (copy.c). */
int32_t pvgpu_copy_htod(struct pvgpu_worker *w, uint64_t dst, uint64_t size,
			uint64_t stream, int sync);
int32_t pvgpu_copy_dtoh(struct pvgpu_worker *w, uint64_t src, uint64_t size,
			uint64_t stream);
/* Read and drop the DATA frames of a refused host-to-device copy. */
void pvgpu_copy_refuse_htod(struct pvgpu_worker *w, uint64_t size);
/* The same for an input of the request's own, read up to max bytes: more
 * is more than a worker reads, and the session is out of step (it ends). */
void pvgpu_copy_refuse_upto(struct pvgpu_worker *w, uint64_t size,
			    uint64_t max);
void pvgpu_staging_release(struct pvgpu_worker *w);

/* Bytes per channel of a CUarray_format; 0: not one pvgpu takes (arrays.c). */
uint32_t pvgpu_format_bytes(uint32_t format);
/* The session's array id in the current context, or NULL; *flags: its
 * CUDA_ARRAY3D_* flags (arrays.c). */
struct pvgpu_handle *pvgpu_lookup_array(struct pvgpu_worker *w, uint64_t id,
					uint32_t *flags);

/* The executor's object obj (a handle's exec_handle) destroyed by the
 * generic call fn, whose one argument destroys it (generic.c): for a
 * worker undoing what it made, where no guest handle names it yet. */
int32_t pvgpu_generic_destroy(struct pvgpu_worker *w, uint32_t fn, uint64_t obj);
/* A handle's charge to the VM's quota (a module's, an array's, a
 * context's, a stream's), given back (modules.c). */
void pvgpu_module_uncharge(struct pvgpu_worker *w, struct pvgpu_handle *h);
/* JIT options from the guest (link.c): -1 unless every key is one the
 * executor may take as it is (a scalar value; the log buffers being the
 * executor's own); copied into l (log sizes bounded) unless l is NULL. */
int pvgpu_link_options(struct pvgpu_link *l, const uint32_t *key, uint32_t nkey,
		       const uint64_t *value, uint32_t nvalue);
/* The logs and option results of l into a reply with link_complete's
 * fields (link_complete, module_load_jit). */
#define PVGPU_LINK_RESULTS(rep, l) do {						\
	(l)->info_log[PVGPU_LINK_LOG - 1] = (l)->error_log[PVGPU_LINK_LOG - 1] = '\0'; \
	(rep)->info_log_len = strlen((l)->info_log);				\
	memcpy((rep)->info_log, (l)->info_log, (rep)->info_log_len + 1);	\
	(rep)->error_log_len = strlen((l)->error_log);				\
	memcpy((rep)->error_log, (l)->error_log, (rep)->error_log_len + 1);	\
	(rep)->opt_result_count = (l)->nopts;					\
	memcpy((rep)->opt_result, (l)->opt_value, (l)->nopts * sizeof(uint64_t)); \
} while (0)

/* How the worker sleeps on and wakes the guest over the control ring. */
void pvgpu_worker_ring_waiter(struct pvgpu_worker *w,
			      struct pvgpu_ring_waiter *out);
/*
 * From the next message on, the ring carries the messages (on), or the
 * channel does (worker_io.c).  A worker starts on its channel.
 */
void pvgpu_worker_wire_ring(struct pvgpu_worker *w, int on);

/* Virtual memory management through the generic call (vmm.c): checks
 * before the driver runs, bookkeeping after (st: the call's status). */
struct pvgpu_generic_fn;
struct pvgpu_vmm_call {
	uint64_t charge, uncharge;	/* quota bytes taken / to give back */
	int32_t device;
};
int32_t pvgpu_vmm_before(struct pvgpu_worker *w, const struct pvgpu_generic_fn *f,
			 uint64_t *a, const uint64_t *ids, struct pvgpu_vmm_call *c);
int32_t pvgpu_vmm_after(struct pvgpu_worker *w, const struct pvgpu_generic_fn *f,
			const uint64_t *a, const uint64_t *in, const uint64_t *out,
			const struct pvgpu_vmm_call *c, int32_t st);

/* Shared window (window.c). */
void pvgpu_window_forget_ctx(struct pvgpu_worker *w, uint64_t ctx);
/*
 * Pin [offset, offset + size) of the window for the GPU in the current
 * context (page-aligned, in the arena, overlapping no other pin); *pin is
 * its entry (window.c).
 */
int32_t pvgpu_window_pin(struct pvgpu_worker *w, uint64_t offset,
			 uint64_t size, struct pvgpu_window_pin **pin);
/*
 * Where the window is at the guest's address (same_address) and the GPU
 * reaches the pinned part at that same address: the part becomes a device
 * range of the session (alloc module `kind`) and pin->dptr its address;
 * else CUDA_ERROR_NOT_SUPPORTED (managed.c).
 */
int32_t pvgpu_window_pin_same(struct pvgpu_worker *w, struct pvgpu_window_pin *pin,
			      uint64_t kind, int32_t device);
void pvgpu_window_detach(struct pvgpu_worker *w);

#endif /* PVGPU_WORKER_H */
