/*
 * client.h - one protocol connection from the guest library to one backend.
 *
 * The generated stubs (build/gen/pvgpu_guest.c) encode a request and hand
 * it to pvgpu_client_call (sync ops) or pvgpu_client_queue (async ops).
 * A client is thread-safe: its mutex serialises the wire, so a sync call's
 * reply is always the next thing read.
 */
#ifndef PVGPU_CLIENT_H
#define PVGPU_CLIENT_H

#include <stddef.h>
#include <stdint.h>

/*
 * Failures of the client itself.  Negative, so distinct from every CUresult
 * (which the backend's statuses are, and which are all >= 0).
 */
#define PVGPU_CLIENT_EENCODE	(-1)	/* request could not be encoded */
#define PVGPU_CLIENT_EPROTO	(-2)	/* backend broke the protocol */
#define PVGPU_CLIENT_EIO	(-3)	/* connection gone; every later call too */

struct pvgpu_client;

/* What the backend said in its hello reply (after PVGPU_BLOCK_SIZE). */
struct pvgpu_client_info {
	uint32_t version;	/* negotiated protocol version */
	int32_t device_count;
	uint64_t session_id;
	uint32_t data_block;	/* largest DATA frame this client sends */
	uint64_t features;	/* agreed at hello: PVGPU_FEATURE_* */
};

/*
 * Everything a connection is tuned by.  The client reads no environment:
 * a front-end fills this once at start-up (pvgpu_config_from_env() in
 * guest-lib/frontend/ reads the PVGPU_* variables) and may then change
 * what it knows better, so that pvgpuctl, NVML and the driver
 * front-end configure the same client the same way.
 */
#define PVGPU_CLIENT_DEVICES_MAX	1024
#define PVGPU_CLIENT_TOKEN_MAX		257	/* hello's token, NUL included */
#define PVGPU_CLIENT_DEFAULT_DEVICES	"unix:///run/pvgpu/pvgpu.sock"
#define PVGPU_CLIENT_PATH_MAX		256
#define PVGPU_CLIENT_DEFAULT_RING_CAP	(512u << 10)

struct pvgpu_client_config {
	/* PVGPU_DEVICES: "URI[#N][,URI[#N]...]", split by the front-end. */
	char devices[PVGPU_CLIENT_DEVICES_MAX];
	/* PVGPU_TOKEN: who we are, where the channel cannot say (tcp). */
	char token[PVGPU_CLIENT_TOKEN_MAX];
	/* PVGPU_BLOCK_SIZE: largest DATA frame sent; 0 takes the backend's. */
	uint32_t block_size;
	/* PVGPU_POLL_US: busy-poll for a reply this long before sleeping. */
	uint64_t poll_ns;
	/*
	 * PVGPU_WAIT_SPIN_US: over the control ring, a call that waits on the
	 * device (a synchronize, a synchronous copy) spins this long for its
	 * reply before sleeping, as NVIDIA's driver spins in such a call (by
	 * default for as long as the device takes).  A sleep costs a wake-up
	 * at the end, 50-100 us on the H100 machine: with 2 ms, a program
	 * synchronizing on 9 ms kernels ran 1 % slower than natively; 200 ms
	 * covers the waits of the frameworks' steps.  After the first 2 ms the
	 * spin yields the CPU between looks (transport/ring.c).
	 */
	uint64_t wait_spin_ns;
	/*
	 * PVGPU_COPY_THREADS: threads copying through the window (1 to 8);
	 * by default a quarter of the online CPUs, 2 to 4.
	 */
	unsigned int copy_threads;
	/* Use a shared window where the transport has one (1, the default). */
	int window;
	/* PVGPU_WINDOW_DEVICE: "" takes the first free /dev/pvgpuN. */
	char window_device[PVGPU_CLIENT_PATH_MAX];
	/* PVGPU_WINDOW_SIZE, PVGPU_STAGING_SLOT(S): a shm:// window made here. */
	uint64_t window_size;
	uint32_t staging_slot, staging_slots;
	/*
	 * PVGPU_WINDOW_HUGEPAGES=1: make that window of the host's reserved
	 * huge pages (memfd MFD_HUGETLB), ordinary pages when there are not
	 * enough.  Off by default: the pool is the administrator's.
	 */
	int window_hugepages;
	/*
	 * PVGPU_RING=0 turns the control ring off (messages then take the
	 * socket); PVGPU_RING_BATCH=1 batches async messages on it as on a
	 * socket instead of sending each at once (client.c ring_sends_now);
	 * ring_cap is bytes each way, a power of two.
	 */
	int ring;
	int ring_batch;
	/*
	 * Ask for completion written by the device (feature signal, wire.h)
	 * over the control ring; PVGPU_SIGNAL=0 turns it off (then every
	 * call ends on the backend's reply).
	 */
	int signal;
	uint64_t ring_cap;
	/* Feature bits (PVGPU_FEATURE_*) this front-end cannot do without. */
	uint64_t required_features;
	/* PVGPU_WITHHOLD_FEATURES: bits not offered, as an older guest. */
	uint64_t withheld_features;
	/* PVGPU_DEBUG: one line on stderr for each failure. */
	int debug;
};

/* The defaults: what a front-end gets with no PVGPU_* variable set. */
void pvgpu_client_config_init(struct pvgpu_client_config *cfg);

/*
 * Connect to uri ("unix:///path", "tcp://host:port", "vsock://2:7100",
 * "shm:///path") with cfg, and say hello.  cfg is copied.  0 and *out on
 * success; otherwise a negative value and one line in err.
 */
int pvgpu_client_open(const char *uri, const struct pvgpu_client_config *cfg,
		      struct pvgpu_client **out, char *err, size_t errlen);

/* Flush, say bye, disconnect and free. */
void pvgpu_client_close(struct pvgpu_client *c);

/*
 * At process exit: flush and say bye if nobody is mid-call, then leave the
 * connection broken (later calls fail with EIO) without freeing anything
 * another thread might still hold.
 */
void pvgpu_client_shutdown(struct pvgpu_client *c);

const struct pvgpu_client_info *pvgpu_client_info(const struct pvgpu_client *c);

/* What went over the wire, for PVGPU_DEBUG and the launch-batching tests. */
struct pvgpu_client_stats {
	uint64_t sends;		/* messages written: a BATCH counts once */
	uint64_t calls;		/* sync requests, each a round trip */
	uint64_t async_ops;	/* async operations, batched or not */
	uint64_t batches;	/* BATCH messages */
	uint64_t data_frames;	/* DATA frames sent */
	uint64_t output_bytes;	/* device printf/assert output received */
	uint64_t local_answers;	/* synchronizes/queries answered in the guest */
	uint64_t signalled;	/* calls that ended on the device's word */
	uint64_t ring_kicks;	/* control ring: wake-ups sent to a backend asleep */
	uint64_t ring_sleeps;	/* control ring: our waits that slept */
	/*
	 * Bytes of the program's data this CPU copied: DATA frames sent and
	 * received (into the ring, or by the kernel into the socket), staged
	 * copies, landings, and what resume keeps of async data.  Pinned
	 * memory in the shared window moves with none.
	 */
	uint64_t cpu_copied;
};

/* 0 and *out, or -1 when another thread holds the connection. */
int pvgpu_client_stats(struct pvgpu_client *c, struct pvgpu_client_stats *out);

/*
 * At process exit, for every front-end: pvgpu_client_shutdown, then, under
 * PVGPU_DEBUG, one line of what went over the wire ("URI: sent N messages:
 * ... N calls ended on the device's signal"), which the tests count.
 * Nothing is printed while another thread holds the connection.
 */
void pvgpu_client_exit(struct pvgpu_client *c);

/*
 * For the benchmarks' exports (pvgpu_wire_stats, pvgpu_ring_wakes: both
 * front-ends): adds c's counts to out, in this order: messages sent, sync
 * calls (round trips), async ops, batches, DATA frames, wake-ups sent to a
 * backend asleep on the control ring, our waits on it that slept.  1 with
 * the control ring, 0 without (the last two are 0), -1 when another thread
 * holds the connection.
 */
#define PVGPU_WIRE_COUNTS	7
#define PVGPU_WIRE_STATS	5	/* of them, pvgpu_wire_stats's */
int pvgpu_client_wire_counts(struct pvgpu_client *c,
			     unsigned long long out[PVGPU_WIRE_COUNTS]);
/*
 * The two exports from a front-end's sum over its backends (counts: the
 * number of backends counted, or -1 before any, and in *rings those with
 * the control ring): pvgpu_wire_stats is counts [0, 5) and returns the
 * backends; pvgpu_ring_wakes [5, 7) and the backends with the ring.
 */
typedef int (*pvgpu_wire_sum_fn)(unsigned long long out[PVGPU_WIRE_COUNTS],
				 int *rings);
int pvgpu_wire_export(pvgpu_wire_sum_fn sum, unsigned long long *out,
		      int first, int n);

/* Both exports, defined in a front-end from its sum over its backends. */
#define PVGPU_WIRE_EXPORTS(sum)						\
	int pvgpu_wire_stats(unsigned long long out[PVGPU_WIRE_STATS]);	\
	int pvgpu_wire_stats(unsigned long long out[PVGPU_WIRE_STATS])	\
	{								\
		return pvgpu_wire_export(sum, out, 0, PVGPU_WIRE_STATS); \
	}								\
	int pvgpu_ring_wakes(unsigned long long out[2]);		\
	int pvgpu_ring_wakes(unsigned long long out[2])			\
	{								\
		return pvgpu_wire_export(sum, out, PVGPU_WIRE_STATS, 2); \
	}

/* Send the queued async operations; 0 or PVGPU_CLIENT_EIO. */
int32_t pvgpu_client_flush(struct pvgpu_client *c);

/*
 * A sync operation.  data_len bytes of bulk data go with it: from data_in
 * (DATA frames after the request) or into data_out (DATA frames before the
 * reply); at most one of them is non-NULL.  The reply's output fields (after
 * status and deferred) land in rep.  Returns the backend's status, else its
 * deferred error, else 0; or a PVGPU_CLIENT_E* code.
 */
int32_t pvgpu_client_call(struct pvgpu_client *c, uint16_t opcode,
			  const uint8_t *req, size_t req_len,
			  const void *data_in, uint64_t data_len,
			  void *data_out, uint8_t *rep, size_t rep_cap,
			  size_t *rep_len);

/*
 * An async operation: queued for the next batch.  With data_in it goes out
 * at once (after the queue) so the caller may reuse the buffer on return.
 */
int32_t pvgpu_client_queue(struct pvgpu_client *c, uint16_t opcode,
			   const uint8_t *req, size_t req_len,
			   const void *data_in, uint64_t data_in_len);

/*
 * A synchronize or query: of a context (its whole work), a stream of ctx
 * (0: the context's default stream) or an event of ctx.  `query` asks
 * (stream_query, event_query: CUDA_ERROR_NOT_READY while busy) instead of
 * waiting.  ctx and handle are the backend's.
 *
 * What the guest already knows is answered here (DESIGN §4).  The client
 * counts every operation it forwards that may leave work on the device
 * (all but the synchronize and query operations themselves and ctx_set).
 * When a synchronize or query that crossed the wire reports its object
 * idle, with no error, the object is noted idle as of the count taken
 * before it was sent; while nothing has been forwarded since, a
 * synchronize or query of that object -- or of any stream or event of a
 * context noted idle -- returns CUDA_SUCCESS with no round trip.  Any
 * forwarded operation, on any stream or context of the connection, ends
 * all of it: so the legacy default stream's implicit waits, per-thread
 * default streams and other contexts need no special case, and an error of
 * an async operation (or one held back, or a sticky one) still reaches the
 * next synchronize, which crosses.
 */
enum pvgpu_idle_kind {
	PVGPU_IDLE_CTX = 1,
	PVGPU_IDLE_STREAM,
	PVGPU_IDLE_EVENT,
};

int32_t pvgpu_client_wait(struct pvgpu_client *c, enum pvgpu_idle_kind kind,
			  int query, uint64_t ctx, uint64_t handle);

/*
 * A small synchronous copy from the device into pageable memory, ending on
 * the device's word as one into pinned memory does: the device copies into
 * the landing of the ring's first page (transport/ring.h), which the
 * worker pins with the word, and the bytes go on to dst under the call's
 * lock if the backend's status was success.  0: not taken (no ring or no
 * word, or size over the landing); 1, and the call's result in *st.
 */
int pvgpu_client_dtoh_landing(struct pvgpu_client *c, void *dst,
			      uint64_t src, uint64_t size, uint64_t stream,
			      int32_t *st);

struct pvgpu_window_map;

/* Pinned memory without a window (transport.h pin/unpin); 0 or -errno. */
int pvgpu_client_pin(struct pvgpu_client *c, void *p, size_t size);
void pvgpu_client_unpin(struct pvgpu_client *c, void *p);

/* The connection's shared window, or NULL (socket only). */
struct pvgpu_window_map *pvgpu_client_window(struct pvgpu_client *c);

/*
 * A staged copy (memcpy_htod_staged / memcpy_dtoh_staged): send the request,
 * move size bytes through the window's ring from src or into dst while the
 * backend DMAs the other end, then read the reply.
 */
int32_t pvgpu_client_call_staged(struct pvgpu_client *c, uint16_t opcode,
				 const uint8_t *req, size_t req_len,
				 const void *src, void *dst, uint64_t size);

/*
 * A copy host to device (htod) or device to host (dtoh) of n bytes on the
 * backend's stream, async or not, by the cheapest path the connection has
 * (copy.c): window_off is where the host memory lies in the shared window,
 * NULL where it does not.  The wire status.
 */
int32_t pvgpu_client_htod(struct pvgpu_client *c, uint64_t dst, const void *src,
			  uint64_t n, uint64_t stream, int async,
			  const uint64_t *window_off);
int32_t pvgpu_client_dtoh(struct pvgpu_client *c, void *dst, uint64_t src,
			  uint64_t n, uint64_t stream, int async,
			  const uint64_t *window_off);

#endif /* PVGPU_CLIENT_H */
