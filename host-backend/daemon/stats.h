/*
 * stats.h - the figures `pvgpuctl status` and the metrics endpoint report
 * (sessions, memory, calls, bytes and GPU time per VM and per GPU), taken
 * by the supervisor from the shared accounting table, and their one text
 * form: the Prometheus exposition format.
 *
 * A worker only ever adds to its slot's counters, and a slot is zeroed when
 * its session ends, so the table alone cannot give counters that never go
 * back.  The supervisor keeps per-VM totals here instead: each look at a
 * live slot adds what its session did since the previous look to the VM the
 * session belongs to at that moment, and a session's last figures are added
 * when it ends, before its slot is freed.  The totals only ever grow, as
 * Prometheus counters must, count every call and byte once, and include
 * sessions long gone.  (Every session's VM is set before its worker
 * starts; were one named later, what it did before would stay with the
 * sessions of no VM, "-".)
 *
 * All of this runs in the supervisor, which alone reads the slots' figures;
 * the metrics server formats a copy of the snapshot it is handed.
 */
#ifndef PVGPU_STATS_H
#define PVGPU_STATS_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "accounting.h"
#include "policy.h"

/*
 * The bucket of sessions that have no VM: without --config, every session
 * but a registered VM's.  Reported as vm="-", as the session log lines say
 * "vm -".
 */
#define PVGPU_STATS_NO_VM	PVGPU_MAX_VM_ENTRIES
#define PVGPU_STATS_BUCKETS	(PVGPU_MAX_VM_ENTRIES + 1)
#define PVGPU_STATS_NO_VM_NAME	"-"
/* How often the rates are taken. */
#define PVGPU_STATS_TICK_MS	1000

/* A device as the start-up probe saw it. */
struct pvgpu_gpu_info {
	char name[64];
	uint64_t mem_total;
	/* What a context and a stream take of it (0: not measured). */
	uint64_t ctx_bytes, stream_bytes;
};

struct pvgpu_gpu_figures {
	struct pvgpu_gpu_info info;
	uint32_t sessions;		/* sessions holding a context on it */
	uint64_t mem_used;
	uint64_t busy_ns;		/* kernels in flight, since pvgpud started */
	/* The memory quotas of the policy's VMs that may use it (oversub.h). */
	uint64_t promised;
};

/*
 * A VM is reported while the policy in force names it (the pool of unknown
 * callers if it admits them; "-" when there is no policy), and whenever
 * any of its figures is not zero: a counter, once above zero, never
 * vanishes.
 */
struct pvgpu_vm_figures {
	char name[64];			/* "": not reported */
	uint32_t sessions;
	uint64_t mem_used;		/* charged to its quota and on a device */
	/* Of suspended sessions: in host memory, still charged (suspend.h). */
	uint64_t mem_suspended;
	uint64_t mem_quota;		/* 0: none */
	/* Totals since pvgpud started, live and ended sessions alike. */
	uint64_t calls, bytes_h2d, bytes_d2h, gpu_ns;
	/* Over the last tick's interval. */
	double calls_rate, h2d_rate, d2h_rate;	/* per second */
	double gpu_share;		/* 0..1; NaN: no GPU time measured */
};

struct pvgpu_snapshot {
	double interval;		/* seconds the rates cover; 0: none yet */
	int ngpus;
	struct pvgpu_gpu_figures gpus[PVGPU_MAX_DEVICES];
	struct pvgpu_vm_figures vms[PVGPU_STATS_BUCKETS];
};

struct pvgpu_stats_counters {
	uint64_t calls, bytes_h2d, bytes_d2h, gpu_ns;
};

struct pvgpu_sched;

struct pvgpu_stats {
	struct pvgpu_accounting *acct;
	struct pvgpu_sched *sched;	/* per-GPU busy time; NULL: none */
	/* Per slot: whose figures were last seen there, and what they were. */
	struct pvgpu_stats_seen {
		uint64_t session_id;
		struct pvgpu_stats_counters c;
	} *seen;
	struct pvgpu_stats_counters totals[PVGPU_STATS_BUCKETS];
	unsigned char listed[PVGPU_STATS_BUCKETS];	/* by the policy */
	struct pvgpu_stats_counters at_tick[PVGPU_STATS_BUCKETS];
	struct timespec tick;		/* CLOCK_MONOTONIC of the last tick */
	struct pvgpu_snapshot snap;	/* as of the last update */
};

/* 0, or -1 when out of memory. */
int pvgpu_stats_init(struct pvgpu_stats *st, struct pvgpu_accounting *acct);
void pvgpu_stats_fini(struct pvgpu_stats *st);
/* The devices to report (what the start-up probe found). */
void pvgpu_stats_set_gpus(struct pvgpu_stats *st, int n,
			  const struct pvgpu_gpu_info *gpus);

/* The VMs the policy in force names (NULL: none, every session is "-"). */
void pvgpu_stats_set_policy(struct pvgpu_stats *st,
			    const struct pvgpu_policy *p);
/* A session is ending: add its last figures before its slot is freed. */
void pvgpu_stats_fold(struct pvgpu_stats *st, struct pvgpu_slot *slot);
/* Bring st->snap up to date; the rates stay those of the last tick. */
void pvgpu_stats_update(struct pvgpu_stats *st);
/* Update, and take the rates over the time since the previous tick. */
void pvgpu_stats_tick(struct pvgpu_stats *st, const struct timespec *now);

/*
 * The snapshot in the Prometheus text exposition format (version 0.0.4):
 * a malloc'ed NUL-terminated string and its length in *len, or NULL when
 * out of memory.
 */
char *pvgpu_snapshot_format(const struct pvgpu_snapshot *snap, size_t *len);

#endif /* PVGPU_STATS_H */
