/*
 * gpusched.h - GPU time between VMs follows their policy weights (DESIGN §5).
 *
 * Why the backend has to do this at all: without MPS a GPU runs one
 * context at a time and time-slices roughly equally between the contexts
 * that have work queued.  Every session is a worker process with its own
 * context, so a VM gets GPU time in proportion to how many sessions it
 * keeps busy, whatever its weight: 4 VMs of 4 busy sessions each get 25 %
 * each.  MPS would run the VMs' kernels concurrently, but it is not on
 * every host (not on the project's H100), it shares SMs rather than time,
 * and it gives the VMs a common failure domain; so the weights are
 * enforced here, at launch admission, by weighted time division:
 *
 *   - Per device, one VM holds the turn.  Only its sessions may submit
 *     kernels; a session of another VM that wants to launch waits in
 *     pvgpu_sched_admit() until its VM is given the turn, asleep on a
 *     futex word of its VM in shared memory, so that a hand-over wakes the
 *     sessions that will launch and nobody else.  It does not spin first:
 *     a wait lasts about a turn (milliseconds), a futex wake-up tens of
 *     microseconds.
 *   - A turn lasts quantum x weight (relative to the lightest contending
 *     VM, at most 8 quanta), and ends early when its VM goes idle (nothing
 *     in flight, nothing waiting, no launch for PVGPU_SCHED_IDLE_NS).
 *     When it ends the VM stops submitting and its kernels already on the
 *     GPU drain; only then does the next VM get the turn, so turns never
 *     overlap on the GPU, and the span from the first of its sessions
 *     taking the turn to the hand-over is that VM's GPU time.
 *   - The quantum (--sched-quantum-us, 10 ms by default) is long enough
 *     that a hand-over (a futex wake-up, a launch, a context switch on the
 *     GPU: tens of microseconds) costs well under 1 % of a turn, and short
 *     enough that a weight-1 VM among weights 1:1:2:4 waits some 70 ms
 *     plus drains for its next turn.  Measured on the H100 (BENCHMARKS.md,
 *     16 sessions of 1.5 ms kernels): 5 ms turns kept 89.6 % of one native
 *     process's throughput, 10 ms 90.1 %, 20 ms 90.0 %, with the GPU's own
 *     time slicing between the 16 contexts, without turns, at 90.3 %.
 *   - The next VM is the contending one with the least virtual time; a
 *     VM's virtual time grows by the real length of each of its turns
 *     (drain included) divided by its weight.  Shares therefore follow the
 *     weights however long the drains or the kernels are, and a VM that
 *     comes back from idle starts at the current minimum, so it cannot
 *     have saved up a monopoly.
 *   - Work-conserving: a VM with nobody waiting never gets a turn, and a
 *     VM alone on a device is never held back.  Its sessions check one
 *     shared word per launch (the fast path), and the bookkeeping below is
 *     a few loads and stores on the session's own cache line; no event is
 *     recorded per launch and nothing waits.
 *
 * Bounding what is in flight: while the device is contended a session may
 * have at most PVGPU_SCHED_INFLIGHT (2) launches not yet seen to complete,
 * tracked with an event recorded after each launch.  Two is double
 * buffering: the next kernel is already queued when one finishes, so a VM
 * with a single session keeps the GPU busy, while a turn's drain stays at
 * about two kernels per session.  One would leave the GPU idle for a host
 * round trip after every kernel of a lone session; more only lengthens
 * drains.  When nothing contends, launches are not bounded and no event is
 * recorded at launch: a sparse "mark" (one event covering all launches
 * since the last) is recorded at poll points, at most every 0.5 ms, after
 * the reply to a synchronising call or while the guest is quiet, which is
 * enough to know when the session's work has finished; and a successful
 * context synchronise says so without any event (one that ends on the
 * device's word too, once the word is seen).  Only the contended events,
 * which the worker waits on, are blocking-sync ones: each makes the GPU
 * interrupt the host when it completes.
 *
 * GPU time: struct pvgpu_slot.gpu_ns is the GPU time of the session under
 * processor sharing: while n sessions of a device have work in flight each
 * is charged 1/n of the wall time, which is how the hardware time-slices
 * between contexts.  Under the scheduler only the turn holder's sessions
 * have work in flight, so a VM's sessions add up to the wall time of its
 * turns during which it had work on the GPU.
 *
 * Only kernel launches are gated.  Copies run on the copy engines, not the
 * SMs whose time is being divided, and holding them back would throttle a
 * VM's bandwidth for nothing.
 *
 * Latency class (priority = latency in the policy): a VM whose sessions
 * launch sparse short kernels (batch-1 decode) would otherwise wait up to
 * every other VM's turn, plus drains, for each launch.  When a session of
 * a latency VM waits and a normal VM holds the turn, the holder's turn
 * ends at once: run_vm, the word its sessions check per launch, is
 * cleared, so each stops at its next launch; its work in flight drains
 * (at most PVGPU_SCHED_INFLIGHT launches per session, since the device
 * is contended) and the latency VM gets the turn ahead of virtual-time
 * order.  Its turn ends as anyone's does, when it goes idle
 * (PVGPU_SCHED_IDLE_NS) or after its length, and is charged to its
 * virtual time as anyone's is; the cut-short holder is charged only the
 * time it had, so it is next in virtual-time order and loses no share.
 * The bound: a latency VM goes ahead (preempts, or is picked first) only
 * while its virtual time is at most one of its own full turns ahead of
 * the least virtual time of the VMs that want the device.  A sparse VM
 * comes back from idle at that least virtual time, so it always goes
 * ahead; one that is always busy is charged a turn per turn and, one turn
 * ahead, falls back into virtual-time order, so it can take at most one
 * turn more than its share before the others have theirs, and its
 * weight still sets its share.  One turn (rather than none) lets a
 * latency VM that has just had its turn go ahead again on its next
 * launch after idling; a larger bound would let a busy one take several
 * turns in a row.  A latency holder is never cut short, so two latency
 * VMs follow virtual time between themselves.  Each session's end line
 * says how many turns of others it cut short and how many of its VM's
 * turns were cut short while it had work in them.  In its own turn a
 * latency VM's launches are not bounded (nor marked one by one): its
 * turn is never cut short and ends when its work is done, so a bound
 * would only make each of its kernels wait for a host wake-up.
 *
 * Robustness: the table is shared by every worker (MAP_SHARED before the
 * supervisor forks); the per-device lock is one a stopped holder cannot
 * keep (shlock.h), and a worker that dies is cleaned out of it by the
 * supervisor (pvgpu_sched_slot_gone), which only ever tries it.  Waiters
 * sleep with timeouts and every turn and drain has a deadline, so a
 * session that stops responding, or dies holding the turn, delays the
 * others by at most a turn plus PVGPU_SCHED_DRAIN_MAX quanta.  Nothing a guest sends reaches this file
 * except by launching: it can waste its own turns, not take others'.
 */
#ifndef PVGPU_GPUSCHED_H
#define PVGPU_GPUSCHED_H

#include <stdint.h>

#include "accounting.h"

#define PVGPU_SCHED_QUANTUM_US	10000	/* default --sched-quantum-us */
#define PVGPU_SCHED_INFLIGHT	2	/* launches in flight per session, contended */
#define PVGPU_SCHED_MARKS	8	/* outstanding marks per session */
#define PVGPU_SCHED_TURN_MAX	8	/* a turn is at most this many quanta */
#define PVGPU_SCHED_DRAIN_MAX	20	/* quanta a drain may take before the next VM goes anyway */
#define PVGPU_SCHED_IDLE_NS	2000000ull /* a holder this long without work gives up its turn */

struct pvgpu_sched;			/* the shared table (gpusched.c) */

/* An event recorded after launches, to learn when they are done. */
struct pvgpu_sched_mark {
	uint64_t event;			/* executor event */
	uint64_t ctx;			/* worker handle of its context */
	uint32_t launches;		/* launches it covers */
	int32_t dev;
	int blocking;			/* a blocking-sync event (gpusched.c) */
};

/*
 * Whom a session's scheduling acts for: the table (NULL: nothing is
 * scheduled), the session's slot, and what its marks are made with, the
 * worker's own fields, read at each call: the executor (NULL while the
 * session is suspended), the current context, and whether a stream
 * captures (an event recorded then would join the guest's graph).
 */
struct pvgpu_sched_who {
	struct pvgpu_sched *table;
	struct pvgpu_slot *slot;
	const struct pvgpu_executor_ops *ex_ops;
	struct pvgpu_exec *const *ex;
	const uint64_t *cur_ctx;
	const unsigned int *capturing;
};

/* One session's own scheduling state (worker memory). */
struct pvgpu_sched_session {
	struct pvgpu_sched_who who;
	struct pvgpu_sched_mark marks[PVGPU_SCHED_MARKS];	/* oldest first */
	unsigned int nmarks;
	struct {
		uint64_t event, ctx;
		int blocking;
	} spare[PVGPU_SCHED_MARKS];	/* completed events, for reuse */
	unsigned int nspare;
	uint32_t unmarked[PVGPU_MAX_DEVICES];	/* launched after the newest mark */
	uint64_t last_stream[PVGPU_MAX_DEVICES];	/* executor stream */
	uint64_t last_ctx[PVGPU_MAX_DEVICES];
	uint32_t pending;		/* launches not yet seen done, all devices */
	int32_t admitted;		/* device of the launch being made; -1 */
	uint64_t synced_ctx;		/* synchronised: settled at the next poll; 0 */
	uint64_t admit_ns;		/* when it was admitted */
	uint64_t next_poll;		/* ns: when the launch path next queries marks */
	uint64_t next_flush;		/* ns: when gpu_ns is next brought up to date */
	int warned;			/* a mark could not be recorded (logged once) */
	int free_run;			/* this launch: its latency VM's own turn (gpusched.c) */
	/* For the session-end log line. */
	uint64_t launches, waits, wait_ns, wait_max_ns;
	uint64_t events, blocking_events;	/* marks recorded; of them blocking */
};

/*
 * The supervisor's side.  create maps the table for acct's slots before
 * anything is forked; quantum_us 0 keeps the accounting (gpu_ns) but gates
 * nothing, leaving the GPU's own time slicing.  NULL on failure.
 */
struct pvgpu_sched *pvgpu_sched_create(struct pvgpu_accounting *acct,
				       uint32_t quantum_us);
void pvgpu_sched_destroy(struct pvgpu_sched *s);
/* A VM entry's weight (policy load and SIGHUP); 0 is taken as 1. */
void pvgpu_sched_set_weight(struct pvgpu_sched *s, int vm, uint32_t weight);
/* A VM entry's class: priority = latency (non-zero) or normal. */
void pvgpu_sched_set_priority(struct pvgpu_sched *s, int vm, int latency);
/*
 * The GPUs (bit N) whose sessions are MPS clients ([gpu N] sharing = mps,
 * policy load and SIGHUP): no turns there.  Turns let one VM's launches
 * reach the GPU at a time, which is what MPS exists to undo: measured on
 * the H200 with eight GPT-2 trainers, one VM each, turns on top of MPS
 * ran 42 steps/s in all where MPS alone ran 208 (BENCHMARKS.md).  Their
 * share there is MPS's, by mps_threads; the accounting (gpu_ns) stays.
 */
void pvgpu_sched_set_spatial(struct pvgpu_sched *s, uint32_t gpus);
/*
 * Wall time device dev has had kernels of any session in flight, ns, since
 * the table was made (per GPU: pvgpu_gpu_busy_seconds_total); brought up to
 * date whenever a session's work on it starts or is seen done.
 */
uint64_t pvgpu_sched_busy_ns(struct pvgpu_sched *s, int dev);
/*
 * A worker has exited, however: drop whatever its slot still held.  The
 * supervisor calls this, and waits on no lock a worker can hold: it only
 * tries each device's, watching its holder in watch[device] (zeroed
 * before the first call, kept between calls) to kill one stopped in it
 * past the bound (shlock.h).  0 when done; -EBUSY when a lock was busy:
 * call again later, and keep the slot until then.
 */
int pvgpu_sched_slot_gone(struct pvgpu_sched *s, struct pvgpu_slot *slot,
			  struct pvgpu_shlock_watch watch[PVGPU_MAX_DEVICES]);

/*
 * The worker's side, on its session's state (init first); each does nothing
 * without a table (who->table).
 *
 * Around every kernel launch on device dev, or one driver call that makes
 * n of them (a run, a graph counts as one):
 *	pvgpu_sched_admit(ss, dev, n);	may wait for the VM's turn
 *	st = executor launch ...;
 *	pvgpu_sched_launched(ss, stream, st, n);	st: none reached the GPU
 */
void pvgpu_sched_session_init(struct pvgpu_sched_session *ss,
			      const struct pvgpu_sched_who *who);
void pvgpu_sched_admit(struct pvgpu_sched_session *ss, int dev, uint32_t n);
void pvgpu_sched_launched(struct pvgpu_sched_session *ss, uint64_t stream,
			  int32_t st, uint32_t n);
/*
 * Whether VMs take turns on device dev now (others wait, or did lately):
 * then a turn is measured launch by launch, and launches are not run in
 * groups (host-backend/session/runs.c), which would outlast a turn.
 */
int pvgpu_sched_shared(struct pvgpu_sched_session *ss, int dev);
/* Launches of this session not yet seen to complete? (cheap) */
static inline int pvgpu_sched_pending(const struct pvgpu_sched_session *ss)
{
	return ss->pending != 0;
}
/* Learn which launches have completed (a query per outstanding mark). */
void pvgpu_sched_poll(struct pvgpu_sched_session *ss);
/*
 * The current context synchronised successfully: all its launches are
 * done.  Noted; the next pvgpu_sched_poll() settles them (the worker polls
 * right after the reply while any are pending).
 */
void pvgpu_sched_ctx_synced(struct pvgpu_sched_session *ss);
/* Before a context is destroyed: its marks and events go with it. */
void pvgpu_sched_forget_ctx(struct pvgpu_sched_session *ss, uint64_t ctx);
/* After the executor is closed: the session leaves the table, logs its figures. */
void pvgpu_sched_session_end(struct pvgpu_sched_session *ss);

#endif /* PVGPU_GPUSCHED_H */
