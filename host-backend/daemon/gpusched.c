/* gpusched.c - weighted time division of each GPU between VMs (see gpusched.h). */
#include <cuda.h>
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "gpusched.h"
#include "wait.h"

/*
 * How often the launch path looks at outstanding marks (and marks what is
 * unmarked), and publishes gpu_ns.  Uncontended, this is the only event
 * work the launch path does: at most one query and one record per period.
 */
#define POLL_NS		500000ull
#define FLUSH_NS	10000000ull
/* Virtual time is ns x VT_SCALE / weight, so that large weights keep precision. */
#define VT_SCALE	65536ull

/*
 * One device.  The lock guards every field that is not _Atomic; the
 * atomics are what the fast path reads without it.
 */
struct sched_dev {
	struct pvgpu_shlock lock;
	_Atomic int32_t run_vm;		/* VM whose sessions may submit now; -1: none */
	_Atomic uint32_t nwaiting;	/* sessions waiting for a turn here */
	_Atomic uint64_t turn_end;	/* ns: when the holder's turn is over */
	_Atomic uint64_t contended_until; /* ns: bound what is in flight until then */
	_Atomic int spatial;		/* MPS clients: no turns (pvgpu_sched_set_spatial) */
	int32_t holder;			/* VM of the turn running or draining; -1 none */
	int draining;			/* the holder's turn is over, its work drains */
	int started;			/* a session of the holder has taken its turn */
	uint64_t turn_start;		/* charged from here */
	uint64_t turn_len;
	uint64_t drain_end;
	/* Processor sharing between the sessions with work in flight (gpu_ns). */
	uint64_t ps_clock;		/* GPU ns per busy session, cumulative */
	_Atomic uint64_t busy_ns;	/* wall ns with any session's work in flight */
	uint64_t ps_last;
	uint32_t ps_busy;
	uint64_t vtime[PVGPU_MAX_VM_ENTRIES];
	/*
	 * Futex words, one per VM: a VM's waiting sessions sleep on its own,
	 * so that a hand-over wakes the sessions that will launch and not
	 * every waiter of every VM.
	 */
	_Atomic uint32_t seq[PVGPU_MAX_VM_ENTRIES];
};

/* One session slot: the same index as in the accounting table. */
struct sched_slot {
	/* Written by the session's worker; the supervisor zeroes them when it is gone. */
	_Atomic uint32_t inflight[PVGPU_MAX_DEVICES];	/* admitted, not seen done */
	_Atomic uint64_t last_launch[PVGPU_MAX_DEVICES];
	/* Under the lock of the device concerned. */
	_Atomic int32_t waiting;	/* device it waits for a turn on; -1 */
	uint8_t busy[PVGPU_MAX_DEVICES];
	uint64_t ps_start[PVGPU_MAX_DEVICES];
	/* Turns cut short by a latency VM, for the session-end line. */
	_Atomic uint32_t preempts;	/* its VM's, for it to wait less */
	_Atomic uint32_t preempted;	/* its VM's, while it had work in them */
} __attribute__((aligned(64)));	/* each worker writes its own line */

struct pvgpu_sched {
	struct pvgpu_accounting *acct;	/* same address in every process (forked) */
	size_t size;
	uint64_t quantum_ns;		/* 0: account, gate nothing */
	_Atomic uint32_t weight[PVGPU_MAX_VM_ENTRIES];
	_Atomic uint32_t latency[PVGPU_MAX_VM_ENTRIES];	/* priority = latency */
	struct sched_dev dev[PVGPU_MAX_DEVICES];
	struct sched_slot slots[];
};

/* --- the shared table ------------------------------------------------------ */

struct pvgpu_sched *pvgpu_sched_create(struct pvgpu_accounting *acct,
				       uint32_t quantum_us)
{
	size_t size = sizeof(struct pvgpu_sched) +
		      (size_t)acct->nslots * sizeof(struct sched_slot);
	struct pvgpu_sched *s;

	s = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		 -1, 0);
	if (s == MAP_FAILED)
		return NULL;
	s->acct = acct;
	s->size = size;
	s->quantum_ns = (uint64_t)quantum_us * 1000;
	for (int v = 0; v < PVGPU_MAX_VM_ENTRIES; v++)
		s->weight[v] = 1;
	for (uint32_t i = 0; i < acct->nslots; i++)
		s->slots[i].waiting = -1;
	for (int d = 0; d < PVGPU_MAX_DEVICES; d++) {
		char name[48];

		s->dev[d].run_vm = -1;
		s->dev[d].holder = -1;
		snprintf(name, sizeof(name), "scheduler lock of device %d", d);
		if (pvgpu_shlock_init(&s->dev[d].lock, name)) {
			munmap(s, size);
			return NULL;
		}
	}
	return s;
}

void pvgpu_sched_destroy(struct pvgpu_sched *s)
{
	if (s)
		munmap(s, s->size);
}

uint64_t pvgpu_sched_busy_ns(struct pvgpu_sched *s, int dev)
{
	if (!s || dev < 0 || dev >= PVGPU_MAX_DEVICES)
		return 0;
	return atomic_load(&s->dev[dev].busy_ns);
}

void pvgpu_sched_set_weight(struct pvgpu_sched *s, int vm, uint32_t weight)
{
	if (s && vm >= 0 && vm < PVGPU_MAX_VM_ENTRIES)
		atomic_store(&s->weight[vm], weight ? weight : 1);
}

void pvgpu_sched_set_priority(struct pvgpu_sched *s, int vm, int latency)
{
	if (s && vm >= 0 && vm < PVGPU_MAX_VM_ENTRIES)
		atomic_store(&s->latency[vm], latency ? 1 : 0);
}

void pvgpu_sched_set_spatial(struct pvgpu_sched *s, uint32_t gpus)
{
	if (!s)
		return;
	for (int d = 0; d < PVGPU_MAX_DEVICES; d++)
		atomic_store(&s->dev[d].spatial, d < 32 && (gpus >> d & 1));
}

/* Whether VMs take turns on device dv at all (gpusched.h). */
static int takes_turns(const struct pvgpu_sched *s, struct sched_dev *dv)
{
	return s->quantum_ns && !atomic_load(&dv->spatial);
}

static uint32_t weight_of(struct pvgpu_sched *s, int vm)
{
	uint32_t w = atomic_load(&s->weight[vm]);

	return w ? w : 1;
}

static uint32_t slot_index(struct pvgpu_sched *s, struct pvgpu_slot *slot)
{
	return (uint32_t)(slot - s->acct->slots);
}

/* --- the device lock and waking -------------------------------------------- */

/* Counts kept beside the slots, rebuilt from them after a crash. */
static void recount(struct pvgpu_sched *s, int d)
{
	uint32_t waiting = 0, busy = 0;

	for (uint32_t i = 0; i < s->acct->nslots; i++) {
		waiting += atomic_load(&s->slots[i].waiting) == d;
		busy += s->slots[i].busy[d];
	}
	atomic_store(&s->dev[d].nwaiting, waiting);
	s->dev[d].ps_busy = busy;
}

/* Workers' side: waits, and kills a holder stopped in it (shlock.h). */
static void dev_lock(struct pvgpu_sched *s, int d)
{
	/* A worker died in here: what it was changing may be half done. */
	if (pvgpu_shlock_take(&s->dev[d].lock, s->acct) == PVGPU_SHLOCK_REPAIR)
		recount(s, d);
}

/* The supervisor's side: never waits.  0, or -EBUSY. */
static int dev_trylock(struct pvgpu_sched *s, int d,
		       struct pvgpu_shlock_watch *w)
{
	int rc = pvgpu_shlock_try(&s->dev[d].lock, w, s->acct);

	if (rc == PVGPU_SHLOCK_REPAIR)
		recount(s, d);
	return rc < 0 ? rc : 0;
}

static void dev_unlock(struct pvgpu_sched *s, int d)
{
	pvgpu_shlock_give(&s->dev[d].lock);
}

/* The word lives in memory shared between processes: no FUTEX_PRIVATE_FLAG. */
static void futex_wait(_Atomic uint32_t *word, uint32_t seen, uint64_t ns)
{
	struct timespec t = {
		.tv_sec = (time_t)(ns / 1000000000u),
		.tv_nsec = (long)(ns % 1000000000u),
	};

	syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, seen, &t, NULL, 0);
}

/* Make n waiting sessions of vm look at the device again. */
static void kick(struct sched_dev *dv, int vm, int n)
{
	atomic_fetch_add(&dv->seq[vm], 1);
	syscall(SYS_futex, (uint32_t *)&dv->seq[vm], FUTEX_WAKE, n, NULL, NULL, 0);
}

/* --- GPU time: processor sharing between busy sessions (under the lock) ---- */

static void ps_advance(struct sched_dev *dv, uint64_t now)
{
	if (now <= dv->ps_last)
		return;
	if (dv->ps_busy) {
		dv->ps_clock += (now - dv->ps_last) / dv->ps_busy;
		atomic_fetch_add(&dv->busy_ns, now - dv->ps_last);
	}
	dv->ps_last = now;
}

static void ps_charge(struct pvgpu_sched *s, uint32_t i, int d)
{
	struct sched_slot *me = &s->slots[i];
	uint64_t clock = s->dev[d].ps_clock;

	atomic_fetch_add(&s->acct->slots[i].gpu_ns, clock - me->ps_start[d]);
	me->ps_start[d] = clock;
}

static void ps_set(struct pvgpu_sched *s, uint32_t i, int d, int busy,
		   uint64_t now)
{
	struct sched_dev *dv = &s->dev[d];
	struct sched_slot *me = &s->slots[i];

	if (me->busy[d] == busy)
		return;
	ps_advance(dv, now);
	if (busy) {
		dv->ps_busy++;
		me->ps_start[d] = dv->ps_clock;
	} else {
		ps_charge(s, i, d);
		if (dv->ps_busy)
			dv->ps_busy--;
	}
	me->busy[d] = (uint8_t)busy;
}

/* --- turns (under the lock) ------------------------------------------------ */

/* Who wants device d, as far as turns are concerned. */
struct scan {
	uint16_t waiting[PVGPU_MAX_VM_ENTRIES];	/* sessions waiting, per VM */
	int others;			/* a VM other than the holder waits */
	int holder_waiting;		/* a session of the holder waits */
	uint32_t holder_inflight;
	uint64_t holder_last;		/* its latest launch, ns */
};

static void scan(struct pvgpu_sched *s, int d, struct scan *sc)
{
	int holder = s->dev[d].holder;

	memset(sc, 0, sizeof(*sc));
	for (uint32_t i = 0; i < s->acct->nslots; i++) {
		struct sched_slot *ss = &s->slots[i];
		int vm = atomic_load(&s->acct->slots[i].vm);
		uint64_t last;

		if (vm < 0 || vm >= PVGPU_MAX_VM_ENTRIES)
			continue;
		if (atomic_load(&ss->waiting) == d) {
			sc->waiting[vm]++;
			if (vm == holder)
				sc->holder_waiting = 1;
			else
				sc->others = 1;
		}
		if (vm != holder)
			continue;
		sc->holder_inflight += atomic_load(&ss->inflight[d]);
		last = atomic_load(&ss->last_launch[d]);
		if (last > sc->holder_last)
			sc->holder_last = last;
	}
}

/* Launches of vm admitted on d and not seen done (read after run_vm changed). */
static uint32_t vm_inflight(struct pvgpu_sched *s, int d, int vm)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->acct->nslots; i++)
		if (atomic_load(&s->acct->slots[i].vm) == vm)
			n += atomic_load(&s->slots[i].inflight[d]);
	return n;
}

static int holder_idle(const struct scan *sc, uint64_t now)
{
	return !sc->holder_inflight && !sc->holder_waiting &&
	       now >= sc->holder_last + PVGPU_SCHED_IDLE_NS;
}

/*
 * The turn of vm: quantum x its weight over the lightest weight that
 * contends, within [1, PVGPU_SCHED_TURN_MAX] quanta.  Weights already set
 * the shares through virtual time; longer turns for heavier VMs only save
 * hand-overs.
 */
static uint64_t turn_len(struct pvgpu_sched *s, int vm, const struct scan *sc)
{
	uint32_t w = weight_of(s, vm), wmin = w;
	uint64_t n;

	for (int v = 0; v < PVGPU_MAX_VM_ENTRIES; v++)
		if (sc->waiting[v] && weight_of(s, v) < wmin)
			wmin = weight_of(s, v);
	n = w / wmin;
	if (n > PVGPU_SCHED_TURN_MAX)
		n = PVGPU_SCHED_TURN_MAX;
	return (n ? n : 1) * s->quantum_ns;
}

static void grant(struct pvgpu_sched *s, int d, int vm, const struct scan *sc,
		  uint64_t now)
{
	struct sched_dev *dv = &s->dev[d];
	uint64_t end = now + turn_len(s, vm, sc);
	int others = 0;

	for (int v = 0; v < PVGPU_MAX_VM_ENTRIES; v++)
		others |= v != vm && sc->waiting[v];
	dv->holder = vm;
	dv->draining = 0;
	dv->started = 0;
	dv->turn_start = now;
	dv->turn_len = end - now;
	atomic_store(&dv->turn_end, end);
	if (others)
		atomic_store(&dv->contended_until, end + s->quantum_ns);
	/* Last: a session that sees run_vm == vm sees this turn's end too. */
	atomic_store(&dv->run_vm, vm);
	kick(dv, vm, INT_MAX);
}

/*
 * The first session of the holder to take its turn starts the clock: the
 * time its waiters took to wake up is nobody's GPU time, and charging it
 * would cost a VM of short turns more than one of long turns.
 */
static void start_turn(struct pvgpu_sched *s, int d, uint64_t now)
{
	struct sched_dev *dv = &s->dev[d];

	if (dv->started)
		return;
	dv->started = 1;
	dv->turn_start = now;
	atomic_store(&dv->turn_end, now + dv->turn_len);
	if (atomic_load(&dv->contended_until) > now)
		atomic_store(&dv->contended_until, now + dv->turn_len + s->quantum_ns);
}

/* Every waiting session of the device looks again (someone left). */
static void kick_all(struct pvgpu_sched *s, int d)
{
	for (int v = 0; v < PVGPU_MAX_VM_ENTRIES; v++)
		for (uint32_t i = 0; i < s->acct->nslots; i++)
			if (atomic_load(&s->slots[i].waiting) == d &&
			    atomic_load(&s->acct->slots[i].vm) == v) {
				kick(&s->dev[d], v, INT_MAX);
				break;
			}
}

/*
 * Whether latency VM vm may go ahead of virtual time: not more than one
 * of its full turns ahead of the least virtual time of the VMs that want
 * the device (gpusched.h says why).
 */
static int ahead_ok(struct pvgpu_sched *s, int d, const struct scan *sc, int vm)
{
	struct sched_dev *dv = &s->dev[d];
	uint64_t vmin = dv->vtime[vm];

	for (int v = 0; v < PVGPU_MAX_VM_ENTRIES; v++)
		if ((sc->waiting[v] || v == dv->holder) && dv->vtime[v] < vmin)
			vmin = dv->vtime[v];
	return dv->vtime[vm] - vmin <=
	       turn_len(s, vm, sc) * VT_SCALE / weight_of(s, vm);
}

/*
 * Least virtual time among the VMs waiting (latency: only those that
 * may go ahead); ties round-robin after the holder.  -1: none.
 */
static int pick_of(struct pvgpu_sched *s, int d, const struct scan *sc,
		   int latency)
{
	struct sched_dev *dv = &s->dev[d];
	int start = dv->holder < 0 ? 0 : dv->holder + 1, best = -1;

	for (int k = 0; k < PVGPU_MAX_VM_ENTRIES; k++) {
		int v = (start + k) % PVGPU_MAX_VM_ENTRIES;

		if (!sc->waiting[v] ||
		    (latency && (!atomic_load(&s->latency[v]) ||
				 !ahead_ok(s, d, sc, v))))
			continue;
		if (best < 0 || dv->vtime[v] < dv->vtime[best])
			best = v;
	}
	return best;
}

/* The next VM: a latency VM that may go ahead first, else virtual time. */
static int pick(struct pvgpu_sched *s, int d, const struct scan *sc)
{
	int best = pick_of(s, d, sc, 1);

	return best >= 0 ? best : pick_of(s, d, sc, 0);
}

/*
 * The latency VM that ends a normal holder's turn now, or -1: one waits
 * and may go ahead.  A latency holder is never cut short (two latency
 * VMs follow virtual time between themselves).
 */
static int preemptor(struct pvgpu_sched *s, int d, const struct scan *sc)
{
	int holder = s->dev[d].holder;

	if (holder < 0 || atomic_load(&s->latency[holder]))
		return -1;
	return pick_of(s, d, sc, 1);
}

/*
 * Count a cut-short turn: for one waiting session of the latency VM lv,
 * and for each session of the holder that had work in the turn.
 */
static void count_preemption(struct pvgpu_sched *s, int d, int lv)
{
	struct sched_dev *dv = &s->dev[d];
	int credited = 0;

	for (uint32_t i = 0; i < s->acct->nslots; i++) {
		struct sched_slot *ss = &s->slots[i];
		int vm = atomic_load(&s->acct->slots[i].vm);

		if (vm == lv && !credited && atomic_load(&ss->waiting) == d) {
			atomic_fetch_add(&ss->preempts, 1);
			credited = 1;
		} else if (vm == dv->holder &&
			   (atomic_load(&ss->inflight[d]) ||
			    atomic_load(&ss->last_launch[d]) >= dv->turn_start)) {
			atomic_fetch_add(&ss->preempted, 1);
		}
	}
}

/*
 * Move device d's turn along as far as now allows: end a turn that is over
 * (or whose VM went idle) while others wait, hand over once its work has
 * drained (or the drain took too long), and give an unheld device to the
 * next VM waiting for it.
 */
static void advance(struct pvgpu_sched *s, int d, uint64_t now)
{
	struct sched_dev *dv = &s->dev[d];
	struct scan sc;
	int next;

	scan(s, d, &sc);
	if (dv->holder >= 0 && !dv->draining) {
		int lv = -1;

		if (!sc.others)
			return;		/* nobody else wants this GPU */
		if (now < atomic_load(&dv->turn_end) && !holder_idle(&sc, now)) {
			lv = preemptor(s, d, &sc);
			if (lv < 0)
				return;
			count_preemption(s, d, lv);
		}
		dv->draining = 1;
		dv->drain_end = now + PVGPU_SCHED_DRAIN_MAX * s->quantum_ns;
		/*
		 * Stop the holder's launches, then count what is in flight:
		 * a session of it either sees run_vm change and backs off,
		 * or its admission is counted below (both sides are seq_cst).
		 */
		atomic_store(&dv->run_vm, -1);
	}
	if (dv->holder >= 0) {
		if (vm_inflight(s, d, dv->holder) && now < dv->drain_end)
			return;
		if (now > dv->turn_start)
			dv->vtime[dv->holder] += (now - dv->turn_start) * VT_SCALE /
						 weight_of(s, dv->holder);
	}
	next = pick(s, d, &sc);
	if (next >= 0) {
		grant(s, d, next, &sc, now);
	} else {
		dv->holder = -1;
		dv->draining = 0;
		atomic_store(&dv->run_vm, -1);
	}
}

/* A session of vm starts to wait on d: maybe contention starts now. */
static void enlist(struct pvgpu_sched *s, int d, uint32_t i, int vm,
		   uint64_t now)
{
	struct sched_dev *dv = &s->dev[d];
	uint64_t vmin = UINT64_MAX;
	struct scan sc;

	scan(s, d, &sc);
	atomic_store(&s->slots[i].waiting, d);
	atomic_fetch_add(&dv->nwaiting, 1);
	/*
	 * A holder past its turn with nobody waiting had the GPU to itself,
	 * which is not charged: its turn, with someone waiting, starts now.
	 * (Within its turn it is charged from the grant, as always: a VM
	 * that was granted the turn does not get it again for free because
	 * the others were slow to come back.)
	 */
	if (dv->holder >= 0 && dv->holder != vm && !dv->draining && !sc.others &&
	    now >= atomic_load(&dv->turn_end)) {
		sc.waiting[vm]++;
		dv->turn_start = now;
		dv->turn_len = turn_len(s, dv->holder, &sc);
		atomic_store(&dv->turn_end, now + dv->turn_len);
		sc.waiting[vm]--;
	}
	/* Back from idle: no credit for the time it did not want the GPU. */
	if (!sc.waiting[vm] && dv->holder != vm) {
		for (int v = 0; v < PVGPU_MAX_VM_ENTRIES; v++)
			if ((sc.waiting[v] || v == dv->holder) &&
			    dv->vtime[v] < vmin)
				vmin = dv->vtime[v];
		if (vmin != UINT64_MAX && dv->vtime[vm] < vmin)
			dv->vtime[vm] = vmin;
	}
}

static void delist(struct pvgpu_sched *s, int d, uint32_t i)
{
	if (atomic_load(&s->slots[i].waiting) != d)
		return;
	atomic_store(&s->slots[i].waiting, -1);
	if (atomic_load(&s->dev[d].nwaiting))
		atomic_fetch_sub(&s->dev[d].nwaiting, 1);
}

/*
 * When a waiting session of vm should look again even if nobody wakes it.
 * The holder's own sessions end its turn when they see it is over, and
 * hand over when its work has drained; the timers are for a holder that
 * went quiet.  Only the VM next in line watches them closely, so that the
 * end of a turn does not wake every waiter at once.
 */
static uint64_t wake_time(struct pvgpu_sched *s, int d, int vm, uint64_t now)
{
	struct sched_dev *dv = &s->dev[d];
	uint64_t t;
	struct scan sc;

	if (dv->holder < 0)
		return now + s->quantum_ns;
	if (dv->draining)
		return dv->drain_end;
	t = atomic_load(&dv->turn_end);
	scan(s, d, &sc);
	if (pick(s, d, &sc) != vm)
		return t + PVGPU_SCHED_DRAIN_MAX * s->quantum_ns;
	if (!sc.holder_inflight && !sc.holder_waiting &&
	    sc.holder_last + PVGPU_SCHED_IDLE_NS < t)
		t = sc.holder_last + PVGPU_SCHED_IDLE_NS;
	return t;
}

/* --- one session's marks (worker memory) ----------------------------------- */

/* The marks' events, through the session's executor (executor.h). */
static int32_t ev_create(struct pvgpu_sched_session *ss, unsigned int flags,
			 uint64_t *event)
{
	return pvgpu_exec_event_create(ss->who.ex_ops, *ss->who.ex, flags, event);
}

static int32_t ev_record(struct pvgpu_sched_session *ss, uint64_t event,
			 uint64_t stream)
{
	return pvgpu_exec_event_record(ss->who.ex_ops, *ss->who.ex, event, stream);
}

static void ev_destroy(struct pvgpu_sched_session *ss, uint64_t event)
{
	pvgpu_exec_event_destroy(ss->who.ex_ops, *ss->who.ex, event);
}

static int32_t ev_query(struct pvgpu_sched_session *ss, uint64_t event)
{
	return pvgpu_exec_event_query(ss->who.ex_ops, *ss->who.ex, event);
}

static void ev_synchronize(struct pvgpu_sched_session *ss, uint64_t event)
{
	pvgpu_exec_event_synchronize(ss->who.ex_ops, *ss->who.ex, event);
}

static void spare_put(struct pvgpu_sched_session *ss,
		      const struct pvgpu_sched_mark *m)
{

	if (ss->nspare == PVGPU_SCHED_MARKS) {
		ev_destroy(ss, m->event);
		return;
	}
	ss->spare[ss->nspare].event = m->event;
	ss->spare[ss->nspare].ctx = m->ctx;
	ss->spare[ss->nspare].blocking = m->blocking;
	ss->nspare++;
}

/*
 * An event of the current context, reused where one of the kind is spare.
 * A blocking one makes the GPU interrupt the host when it completes, so
 * that a worker waiting for it sleeps instead of spinning: only marks that
 * will be waited on (contended, after each launch) are blocking.  One per
 * synchronize of a program alone on its GPU cost a thread on the CPU that
 * takes the GPU's interrupts 15-20 us per call
 * (docs/benchmarks-history.md, 2026-11-28, night).
 */
static int32_t event_get(struct pvgpu_sched_session *ss, int blocking,
			 uint64_t *event)
{
	unsigned int flags = CU_EVENT_DISABLE_TIMING;

	for (unsigned int k = 0; k < ss->nspare; k++) {
		if (ss->spare[k].ctx != *ss->who.cur_ctx ||
		    ss->spare[k].blocking != blocking)
			continue;
		*event = ss->spare[k].event;
		ss->spare[k] = ss->spare[--ss->nspare];
		return CUDA_SUCCESS;
	}
	if (blocking)
		flags |= CU_EVENT_BLOCKING_SYNC;
	return ev_create(ss, flags, event);
}

/*
 * Record a mark on stream covering n launches of device d; 0, or -1.
 * Failing after a launch is worth a warning (the session's work is then
 * not tracked); failing later, on a stream the guest has since destroyed,
 * is not.  Marks after a launch are the contended ones, waited on by
 * bound(): blocking.
 */
static int mark(struct pvgpu_sched_session *ss, int d, uint64_t stream,
		uint32_t n, int after_launch)
{
	struct pvgpu_sched_mark *m;
	uint64_t event;
	int32_t st;

	if (ss->nmarks == PVGPU_SCHED_MARKS || !*ss->who.cur_ctx)
		return -1;
	/* An event recorded now would become a node of the guest's graph. */
	if (*ss->who.capturing)
		return -1;
	st = event_get(ss, after_launch, &event);
	if (!st) {
		st = ev_record(ss, event, stream);
		if (st)
			ev_destroy(ss, event);
	}
	if (st) {
		if (after_launch && !ss->warned)
			log_warn("scheduler: cannot record an event after a launch (CUresult %d): this session's work on the GPU is not tracked",
				 st);
		ss->warned |= after_launch;
		return -1;
	}
	m = &ss->marks[ss->nmarks++];
	m->event = event;
	m->ctx = *ss->who.cur_ctx;
	m->launches = n;
	m->dev = d;
	m->blocking = after_launch;
	ss->events++;
	ss->blocking_events += (uint64_t)after_launch;
	return 0;
}

struct mark_query {
	struct pvgpu_sched_session *ss;
	const struct pvgpu_sched_mark *m;
};

static int mark_done(void *arg)
{
	const struct mark_query *q = arg;

	return ev_query(q->ss, q->m->event) != CUDA_ERROR_NOT_READY;
}

/*
 * Until mark m's launches are done (or failed): asleep in the driver for a
 * blocking mark, else spinning, yielding, then napping (a mark made while
 * the session was alone, waited on only when contention starts).
 */
static void mark_wait(struct pvgpu_sched_session *ss,
		      const struct pvgpu_sched_mark *m)
{
	struct mark_query q = { ss, m };

	if (m->blocking)
		ev_synchronize(ss, m->event);
	else
		(void)pvgpu_spin_wait(mark_done, NULL, &q, UINT64_MAX);
}

static struct pvgpu_sched_mark *oldest_mark(struct pvgpu_sched_session *ss,
					    int d)
{
	for (unsigned int k = 0; k < ss->nmarks; k++)
		if (ss->marks[k].dev == d)
			return &ss->marks[k];
	return NULL;
}

static uint32_t outstanding(struct pvgpu_sched_session *ss, int d)
{
	uint32_t n = ss->unmarked[d];

	for (unsigned int k = 0; k < ss->nmarks; k++)
		if (ss->marks[k].dev == d)
			n += ss->marks[k].launches;
	return n;
}

static void remove_mark(struct pvgpu_sched_session *ss, unsigned int k)
{
	memmove(&ss->marks[k], &ss->marks[k + 1],
		(ss->nmarks - k - 1) * sizeof(ss->marks[0]));
	ss->nmarks--;
}

/*
 * n launches of this session on d are done (or failed): when none is left
 * the session stops counting as busy there, and a turn waiting for its
 * work to drain may move on.
 */
static void settle(struct pvgpu_sched_session *ss, int d, uint32_t n,
		   uint64_t now)
{
	struct pvgpu_sched *s = ss->who.table;
	uint32_t i = slot_index(s, ss->who.slot);
	struct sched_dev *dv = &s->dev[d];
	int vm = atomic_load(&ss->who.slot->vm);
	uint32_t old;

	if (!n)
		return;
	old = atomic_fetch_sub(&s->slots[i].inflight[d], n);
	if (old != n)
		return;
	dev_lock(s, d);
	/* Read the clock again: under the lock, the table's times are not after it. */
	now = pvgpu_now_ns();
	ps_set(s, i, d, 0, now);
	if (vm >= 0 && dv->draining && dv->holder == vm) {
		advance(s, d, now);	/* perhaps the last of its turn */
	} else if (vm >= 0 && atomic_load(&dv->run_vm) == vm &&
		   atomic_load(&dv->nwaiting)) {
		struct scan sc;
		int next;

		/* Perhaps idle: one session of the VM next in line watches. */
		scan(s, d, &sc);
		next = pick(s, d, &sc);
		if (next >= 0 && next != vm)
			kick(dv, next, 1);
	}
	dev_unlock(s, d);
}

/* Which marks have completed; launches not covered by one get one now. */
static void retire(struct pvgpu_sched_session *ss, uint64_t now)
{
	uint32_t done[PVGPU_MAX_DEVICES] = { 0 };

	for (unsigned int k = 0; k < ss->nmarks;) {
		struct pvgpu_sched_mark *m = &ss->marks[k];

		/* Done, or failed (a faulted context): either way not running. */
		if (ev_query(ss, m->event) == CUDA_ERROR_NOT_READY) {
			k++;
			continue;
		}
		done[m->dev] += m->launches;
		spare_put(ss, m);
		remove_mark(ss, k);
	}
	for (int d = 0; d < PVGPU_MAX_DEVICES; d++) {
		if (ss->unmarked[d] && !oldest_mark(ss, d)) {
			/* Only a stream of the current context takes a mark. */
			if (ss->last_ctx[d] != *ss->who.cur_ctx ||
			    mark(ss, d, ss->last_stream[d], ss->unmarked[d], 0))
				done[d] += ss->unmarked[d];
			ss->unmarked[d] = 0;
		}
		if (done[d]) {
			ss->pending -= done[d];
			settle(ss, d, done[d], now);
		}
	}
	ss->next_poll = now + POLL_NS;
}

/* Bring gpu_ns up to date for a session busy for long stretches. */
static void flush(struct pvgpu_sched_session *ss, uint64_t now)
{
	struct pvgpu_sched *s = ss->who.table;
	uint32_t i = slot_index(s, ss->who.slot);

	for (int d = 0; d < PVGPU_MAX_DEVICES; d++) {
		if (!s->slots[i].busy[d])
			continue;
		dev_lock(s, d);
		ps_advance(&s->dev[d], now);
		if (s->slots[i].busy[d])
			ps_charge(s, i, d);
		dev_unlock(s, d);
	}
	ss->next_flush = now + FLUSH_NS;
}

/* --- the worker's side ------------------------------------------------------ */

static int contended(struct sched_dev *dv, uint64_t now)
{
	return atomic_load(&dv->nwaiting) ||
	       now < atomic_load(&dv->contended_until);
}

/* The fast path: this VM holds the turn, and it is not over for anyone waiting. */
static int may_go(struct sched_dev *dv, int vm, uint64_t now)
{
	if (atomic_load(&dv->run_vm) != vm)
		return 0;
	if (!atomic_load(&dv->nwaiting))
		return 1;
	return now < atomic_load(&dv->turn_end);
}

/* Contended: wait for our own kernels until fewer than the bound are in flight. */
static void bound(struct pvgpu_sched_session *ss, int d)
{

	while (outstanding(ss, d) >= PVGPU_SCHED_INFLIGHT) {
		struct pvgpu_sched_mark *m = oldest_mark(ss, d);

		if (m)
			mark_wait(ss, m);
		retire(ss, pvgpu_now_ns());	/* marks unmarked launches, if any */
		if (!m && !oldest_mark(ss, d))
			break;		/* nothing to wait on: counted as done */
	}
}

/* Wait for vm's turn on d; returns with these n launches counted in flight. */
static void wait_turn(struct pvgpu_sched_session *ss, int d, int vm, uint32_t n)
{
	struct pvgpu_sched *s = ss->who.table;
	uint32_t i = slot_index(s, ss->who.slot);
	struct sched_dev *dv = &s->dev[d];
	uint64_t t0 = pvgpu_now_ns(), now;
	int enlisted = 0, waited = 0;

	for (;;) {
		struct pvgpu_sched_mark *m;
		uint64_t wake;
		uint32_t seq;

		dev_lock(s, d);
		now = pvgpu_now_ns();
		if (!enlisted)
			enlist(s, d, i, vm, now);
		enlisted = 1;
		advance(s, d, now);
		if (atomic_load(&dv->run_vm) == vm) {
			atomic_fetch_add(&s->slots[i].inflight[d], n);
			delist(s, d, i);
			start_turn(s, d, now);
			dev_unlock(s, d);
			break;
		}
		wake = wake_time(s, d, vm, now);
		seq = atomic_load(&dv->seq[vm]);
		dev_unlock(s, d);
		waited = 1;
		/* Our own kernels of a past turn first: a drain may wait for them. */
		m = oldest_mark(ss, d);
		if (m) {
			mark_wait(ss, m);
			retire(ss, pvgpu_now_ns());
			continue;
		}
		if (ss->unmarked[d]) {
			retire(ss, now);
			continue;
		}
		futex_wait(&dv->seq[vm], seq, wake > now + 20000 ? wake - now : 20000);
	}
	/* Taking an unheld device is not waiting. */
	if (waited) {
		uint64_t ns = pvgpu_now_ns() - t0;

		ss->waits++;
		ss->wait_ns += ns;
		if (ns > ss->wait_max_ns)
			ss->wait_max_ns = ns;
	}
}

void pvgpu_sched_session_init(struct pvgpu_sched_session *ss,
			      const struct pvgpu_sched_who *who)
{
	struct pvgpu_sched *s = who->table;

	memset(ss, 0, sizeof(*ss));
	ss->who = *who;
	ss->admitted = -1;
	if (s) {
		struct sched_slot *me = &s->slots[slot_index(s, who->slot)];

		atomic_store(&me->preempts, 0);
		atomic_store(&me->preempted, 0);
	}
}

void pvgpu_sched_admit(struct pvgpu_sched_session *ss, int d, uint32_t n)
{
	struct pvgpu_sched *s = ss->who.table;
	struct sched_dev *dv;
	uint32_t i;
	uint64_t now;
	int vm, gate;

	if (!s || d < 0 || d >= PVGPU_MAX_DEVICES)
		return;
	i = slot_index(s, ss->who.slot);
	dv = &s->dev[d];
	vm = atomic_load(&ss->who.slot->vm);
	gate = vm >= 0 && vm < PVGPU_MAX_VM_ENTRIES && takes_turns(s, dv);
	now = pvgpu_now_ns();
	if (ss->pending && now >= ss->next_poll)
		retire(ss, now);
	/*
	 * A latency VM in its own turn is not bounded: its turns are never
	 * cut short and end when it goes idle, so the bound's purpose (a
	 * short drain when a turn ends) costs it more than it saves the
	 * others: bounded, each of the hundred small kernels of a batch-1
	 * decode step waits for a host wake-up.
	 */
	ss->free_run = gate && atomic_load(&s->latency[vm]) &&
		       atomic_load(&dv->run_vm) == vm;
	if (gate && contended(dv, now) && !ss->free_run)
		bound(ss, d);
	/* Counted before looking, so a turn ending now waits for this launch. */
	atomic_fetch_add(&s->slots[i].inflight[d], n);
	if (gate && !may_go(dv, vm, now)) {
		atomic_fetch_sub(&s->slots[i].inflight[d], n);
		wait_turn(ss, d, vm, n);
		now = pvgpu_now_ns();
	}
	if (!s->slots[i].busy[d]) {
		dev_lock(s, d);
		ps_set(s, i, d, 1, now);
		dev_unlock(s, d);
	} else if (now >= ss->next_flush) {
		flush(ss, now);
	}
	ss->admitted = d;
	ss->admit_ns = now;
}

int pvgpu_sched_shared(struct pvgpu_sched_session *ss, int d)
{
	struct pvgpu_sched *s = ss->who.table;

	return s && d >= 0 && d < PVGPU_MAX_DEVICES &&
	       takes_turns(s, &s->dev[d]) &&
	       contended(&s->dev[d], pvgpu_now_ns());
}

void pvgpu_sched_launched(struct pvgpu_sched_session *ss, uint64_t stream,
			  int32_t st, uint32_t count)
{
	struct pvgpu_sched *s = ss->who.table;
	int d = ss->admitted;
	uint64_t now;
	uint32_t n;

	if (!s || d < 0)
		return;
	ss->admitted = -1;
	/*
	 * Uncontended, the time of admission will do (one clock read per
	 * launch); contended, idle detection wants the end of the launch.
	 */
	now = ss->admit_ns;
	if (contended(&s->dev[d], now))
		now = pvgpu_now_ns();
	atomic_store(&s->slots[slot_index(s, ss->who.slot)].last_launch[d], now);
	if (st != CUDA_SUCCESS) {
		settle(ss, d, count, now);	/* nothing reached the GPU */
		return;
	}
	ss->launches += count;
	ss->pending += count;
	ss->last_stream[d] = stream;
	ss->last_ctx[d] = *ss->who.cur_ctx;
	/*
	 * Contended: a mark after every launch, for the bound.  Alone, none
	 * here: the next poll (at most POLL_NS away, right after the reply of
	 * a synchronising call, or while the guest is quiet) marks whatever
	 * is unmarked, and a context synchronise needs no mark at all.
	 */
	if (!contended(&s->dev[d], now) || ss->free_run) {
		ss->unmarked[d] += count;
		return;
	}
	n = ss->unmarked[d] + count;
	ss->unmarked[d] = 0;
	if (mark(ss, d, stream, n, 1)) {
		ss->pending -= n;	/* cannot tell when they finish */
		settle(ss, d, n, now);
	}
}

/* Every launch in context ctx is done (it synchronised): settle them. */
static void settle_ctx(struct pvgpu_sched_session *ss, uint64_t ctx,
		       uint64_t now)
{
	uint32_t done[PVGPU_MAX_DEVICES] = { 0 };

	for (unsigned int k = 0; k < ss->nmarks;) {
		if (ss->marks[k].ctx != ctx) {
			k++;
			continue;
		}
		done[ss->marks[k].dev] += ss->marks[k].launches;
		spare_put(ss, &ss->marks[k]);
		remove_mark(ss, k);
	}
	for (int d = 0; d < PVGPU_MAX_DEVICES; d++) {
		if (ss->last_ctx[d] == ctx) {
			done[d] += ss->unmarked[d];
			ss->unmarked[d] = 0;
		}
		if (done[d]) {
			ss->pending -= done[d];
			settle(ss, d, done[d], now);
		}
	}
}

void pvgpu_sched_poll(struct pvgpu_sched_session *ss)
{
	uint64_t now;

	if (!ss->who.table)
		return;
	now = pvgpu_now_ns();
	if (ss->synced_ctx) {
		settle_ctx(ss, ss->synced_ctx, now);
		ss->synced_ctx = 0;
	}
	if (ss->pending)
		retire(ss, now);
	if (now >= ss->next_flush)
		flush(ss, now);
}

void pvgpu_sched_ctx_synced(struct pvgpu_sched_session *ss)
{
	/*
	 * Settled by the next poll, which the worker makes right after the
	 * reply: the table's lock is not on the way back to the guest.  No
	 * launch comes in between (the worker reads no message before it).
	 */
	if (ss->who.table && ss->pending)
		ss->synced_ctx = *ss->who.cur_ctx;
}

void pvgpu_sched_forget_ctx(struct pvgpu_sched_session *ss, uint64_t ctx)
{
	uint32_t done[PVGPU_MAX_DEVICES] = { 0 };
	uint64_t now = pvgpu_now_ns();

	if (!ss->who.table)
		return;
	/* Its work dies with it. */
	for (unsigned int k = 0; k < ss->nmarks;) {
		if (ss->marks[k].ctx != ctx) {
			k++;
			continue;
		}
		done[ss->marks[k].dev] += ss->marks[k].launches;
		ev_destroy(ss, ss->marks[k].event);
		remove_mark(ss, k);
	}
	for (unsigned int k = 0; k < ss->nspare;) {
		if (ss->spare[k].ctx != ctx) {
			k++;
			continue;
		}
		ev_destroy(ss, ss->spare[k].event);
		ss->spare[k] = ss->spare[--ss->nspare];
	}
	for (int d = 0; d < PVGPU_MAX_DEVICES; d++) {
		if (ss->last_ctx[d] == ctx) {
			done[d] += ss->unmarked[d];
			ss->unmarked[d] = 0;
			ss->last_ctx[d] = 0;
		}
		if (done[d]) {
			ss->pending -= done[d];
			settle(ss, d, done[d], now);
		}
	}
}

/*
 * Drop what slot still holds on each device.  watch NULL: a worker's own
 * end, which waits for each lock; else the supervisor's, which only
 * tries, watching each device's lock in watch[d]: 0 when done, -EBUSY
 * when a device is left for another try.
 */
static int slot_gone(struct pvgpu_sched *s, struct pvgpu_slot *slot,
		     struct pvgpu_shlock_watch *watch)
{
	uint32_t i = slot_index(s, slot);
	int rc = 0;

	for (int d = 0; d < PVGPU_MAX_DEVICES; d++) {
		struct sched_slot *me = &s->slots[i];
		struct sched_dev *dv = &s->dev[d];
		uint64_t now;

		if (!me->busy[d] && !atomic_load(&me->inflight[d]) &&
		    atomic_load(&me->waiting) != d)
			continue;
		if (!watch)
			dev_lock(s, d);
		else if (dev_trylock(s, d, &watch[d])) {
			rc = -EBUSY;
			continue;
		}
		now = pvgpu_now_ns();
		ps_set(s, i, d, 0, now);
		atomic_store(&me->inflight[d], 0);
		atomic_store(&me->last_launch[d], 0);
		delist(s, d, i);
		/* A drain may have been waiting for it, or a turn be its VM's. */
		if (dv->holder >= 0)
			kick_all(s, d);
		dev_unlock(s, d);
	}
	return rc;
}

void pvgpu_sched_session_end(struct pvgpu_sched_session *ss)
{
	struct pvgpu_sched *s = ss->who.table;
	struct sched_slot *me;

	if (!s)
		return;
	me = &s->slots[slot_index(s, ss->who.slot)];
	/* The executor is closed: its events went with it. */
	ss->nmarks = ss->nspare = 0;
	slot_gone(s, ss->who.slot, NULL);
	if (ss->launches)
		log_info("scheduler: %llu launches, waited %llu times for a turn (%.1f ms in all), GPU time %.1f ms, %llu events recorded to follow them (%llu blocking); longest wait %.1f ms, cut %u turns of others short, had %u turns cut short",
			 (unsigned long long)ss->launches,
			 (unsigned long long)ss->waits, (double)ss->wait_ns / 1e6,
			 (double)atomic_load(&ss->who.slot->gpu_ns) / 1e6,
			 (unsigned long long)ss->events,
			 (unsigned long long)ss->blocking_events,
			 (double)ss->wait_max_ns / 1e6,
			 (unsigned int)atomic_load(&me->preempts),
			 (unsigned int)atomic_load(&me->preempted));
}

int pvgpu_sched_slot_gone(struct pvgpu_sched *s, struct pvgpu_slot *slot,
			  struct pvgpu_shlock_watch watch[PVGPU_MAX_DEVICES])
{
	return s ? slot_gone(s, slot, watch) : 0;
}
