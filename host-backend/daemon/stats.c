/* stats.c - figures for status and metrics (see stats.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpusched.h"
#include "log.h"
#include "stats.h"

int pvgpu_stats_init(struct pvgpu_stats *st, struct pvgpu_accounting *acct)
{
	memset(st, 0, sizeof(*st));
	st->seen = calloc(acct->nslots ? acct->nslots : 1, sizeof(*st->seen));
	if (!st->seen)
		return -1;
	st->acct = acct;
	st->listed[PVGPU_STATS_NO_VM] = 1;
	clock_gettime(CLOCK_MONOTONIC, &st->tick);
	for (int b = 0; b < PVGPU_STATS_BUCKETS; b++)
		st->snap.vms[b].gpu_share = NAN;
	return 0;
}

void pvgpu_stats_fini(struct pvgpu_stats *st)
{
	free(st->seen);
	st->seen = NULL;
}

void pvgpu_stats_set_gpus(struct pvgpu_stats *st, int n,
			  const struct pvgpu_gpu_info *gpus)
{
	if (n < 0)
		n = 0;
	if (n > PVGPU_MAX_DEVICES)
		n = PVGPU_MAX_DEVICES;
	for (int d = 0; d < n; d++)
		st->snap.gpus[d].info = gpus[d];
	st->snap.ngpus = n;
}

void pvgpu_stats_set_policy(struct pvgpu_stats *st,
			    const struct pvgpu_policy *p)
{
	memset(st->listed, 0, sizeof(st->listed));
	for (int d = 0; d < PVGPU_MAX_DEVICES; d++)
		st->snap.gpus[d].promised = 0;
	if (!p) {
		st->listed[PVGPU_STATS_NO_VM] = 1;
		return;
	}
	/* A VM that may use several GPUs is promised its quota on each. */
	for (unsigned int i = 0; i <= p->nvms; i++) {
		const struct pvgpu_vm_policy *vm = i < p->nvms ? &p->vms[i] :
						   &p->unknown;

		if (i == p->nvms && !p->allow_unknown)
			break;
		for (int d = 0; d < PVGPU_MAX_DEVICES; d++)
			if (!vm->gpus || (vm->gpus >> d) & 1)
				st->snap.gpus[d].promised += vm->memory;
	}
	for (unsigned int i = 0; i < p->nvms; i++)
		if (p->vms[i].entry >= 0 && p->vms[i].entry < PVGPU_MAX_VM_ENTRIES)
			st->listed[p->vms[i].entry] = 1;
	if (p->allow_unknown && p->unknown.entry >= 0 &&
	    p->unknown.entry < PVGPU_MAX_VM_ENTRIES)
		st->listed[p->unknown.entry] = 1;
}

/* A worker writes its slot's VM index; never trust it to index an array. */
static int bucket_of(struct pvgpu_slot *slot)
{
	int vm = atomic_load(&slot->vm);

	return vm < 0 || vm >= PVGPU_MAX_VM_ENTRIES ? PVGPU_STATS_NO_VM : vm;
}

/* Counters only grow while a session lives; anything else starts afresh. */
static uint64_t since(uint64_t now, uint64_t then)
{
	return now >= then ? now - then : now;
}

/* Add what slot i's session did since the last look to its VM's totals. */
static void look(struct pvgpu_stats *st, uint32_t i)
{
	struct pvgpu_slot *slot = &st->acct->slots[i];
	struct pvgpu_stats_seen *seen = &st->seen[i];
	struct pvgpu_stats_counters now, *t;

	if (seen->session_id != slot->session_id) {
		/* Another session than last time: nothing of it is counted yet. */
		seen->session_id = slot->session_id;
		memset(&seen->c, 0, sizeof(seen->c));
	}
	now.calls = atomic_load(&slot->calls);
	now.bytes_h2d = atomic_load(&slot->bytes_h2d);
	now.bytes_d2h = atomic_load(&slot->bytes_d2h);
	now.gpu_ns = atomic_load(&slot->gpu_ns);
	t = &st->totals[bucket_of(slot)];
	t->calls += since(now.calls, seen->c.calls);
	t->bytes_h2d += since(now.bytes_h2d, seen->c.bytes_h2d);
	t->bytes_d2h += since(now.bytes_d2h, seen->c.bytes_d2h);
	t->gpu_ns += since(now.gpu_ns, seen->c.gpu_ns);
	seen->c = now;
}

void pvgpu_stats_fold(struct pvgpu_stats *st, struct pvgpu_slot *slot)
{
	uint32_t i = (uint32_t)(slot - st->acct->slots);

	look(st, i);
	/* The slot's next session starts from zero. */
	memset(&st->seen[i], 0, sizeof(st->seen[i]));
}

void pvgpu_stats_update(struct pvgpu_stats *st)
{
	struct pvgpu_accounting *acct = st->acct;
	struct pvgpu_snapshot *snap = &st->snap;

	for (int d = 0; d < snap->ngpus; d++) {
		snap->gpus[d].sessions = 0;
		snap->gpus[d].mem_used = pvgpu_accounting_mem_used(acct, d);
		snap->gpus[d].busy_ns = pvgpu_sched_busy_ns(st->sched, d);
	}
	for (int b = 0; b < PVGPU_STATS_BUCKETS; b++) {
		struct pvgpu_vm_figures *v = &snap->vms[b];

		if (b == PVGPU_STATS_NO_VM) {
			snprintf(v->name, sizeof(v->name), "%s",
				 PVGPU_STATS_NO_VM_NAME);
			v->mem_quota = 0;
		} else {
			snprintf(v->name, sizeof(v->name), "%s",
				 acct->vms[b].name);
			v->mem_quota = atomic_load(&acct->vms[b].quota);
		}
		v->sessions = 0;
		v->mem_used = 0;
		v->mem_suspended = 0;
	}
	for (uint32_t i = 0; i < acct->nslots; i++) {
		struct pvgpu_slot *slot = &acct->slots[i];
		struct pvgpu_vm_figures *v;
		uint32_t devices;

		/* -1: taken, with no session (gone, its slot not yet free). */
		if (slot->pid <= 0)
			continue;
		look(st, i);
		v = &snap->vms[bucket_of(slot)];
		v->sessions++;
		v->mem_used += atomic_load(&slot->mem_pending);
		if (atomic_load(&slot->state) == PVGPU_SLOT_SUSPENDED)
			v->mem_suspended += pvgpu_accounting_slot_mem(slot);
		else
			v->mem_used += pvgpu_accounting_slot_mem(slot);
		devices = atomic_load(&slot->gpus_held);
		for (int d = 0; d < snap->ngpus; d++)
			snap->gpus[d].sessions += (devices >> d) & 1;
	}
	for (int b = 0; b < PVGPU_STATS_BUCKETS; b++) {
		struct pvgpu_stats_counters *t = &st->totals[b];
		struct pvgpu_vm_figures *v = &snap->vms[b];

		v->calls = t->calls;
		v->bytes_h2d = t->bytes_h2d;
		v->bytes_d2h = t->bytes_d2h;
		v->gpu_ns = t->gpu_ns;
		/* Not named by the policy and nothing to say: not reported. */
		if (!st->listed[b] && !v->sessions && !v->mem_used &&
		    !v->mem_suspended &&
		    !t->calls && !t->bytes_h2d && !t->bytes_d2h && !t->gpu_ns)
			v->name[0] = '\0';
	}
}

void pvgpu_stats_tick(struct pvgpu_stats *st, const struct timespec *now)
{
	double dt = (double)(now->tv_sec - st->tick.tv_sec) +
		    (double)(now->tv_nsec - st->tick.tv_nsec) / 1e9;
	uint64_t gpu_sum = 0;

	pvgpu_stats_update(st);
	if (dt <= 0)
		return;
	for (int b = 0; b < PVGPU_STATS_BUCKETS; b++)
		gpu_sum += st->totals[b].gpu_ns - st->at_tick[b].gpu_ns;
	for (int b = 0; b < PVGPU_STATS_BUCKETS; b++) {
		struct pvgpu_stats_counters *t = &st->totals[b], *t0 = &st->at_tick[b];
		struct pvgpu_vm_figures *v = &st->snap.vms[b];

		v->calls_rate = (double)(t->calls - t0->calls) / dt;
		v->h2d_rate = (double)(t->bytes_h2d - t0->bytes_h2d) / dt;
		v->d2h_rate = (double)(t->bytes_d2h - t0->bytes_d2h) / dt;
		/* No GPU time measured at all is "unknown", not everyone's 0%. */
		v->gpu_share = gpu_sum ? (double)(t->gpu_ns - t0->gpu_ns) /
					 (double)gpu_sum : NAN;
		*t0 = *t;
	}
	st->snap.interval = dt;
	st->tick = *now;
}

/* --- the Prometheus text format ------------------------------------------- */

static void family(FILE *f, const char *name, const char *type,
		  const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/*
 * A label value, as the log would show it (a device name comes from the
 * driver or from another node): then backslash and double quote escaped
 * for the exposition format, and no newline left to escape.
 */
static void label(FILE *f, const char *key, const char *value)
{
	/* A name of 63 bytes, each shown as \\xNN. */
	char esc[64 * 5 + 4];

	fprintf(f, "%s=\"%s\"", key,
		pvgpu_escape(esc, sizeof(esc), value, PVGPU_ESC_STR,
			     PVGPU_ESC_LABEL));
}

static void real(FILE *f, double v, const char *fmt)
{
	if (isnan(v))
		fputs("NaN", f);
	else
		fprintf(f, fmt, v);
	fputc('\n', f);
}

enum vm_field { F_SESSIONS, F_MEM_USED, F_MEM_SUSPENDED, F_MEM_QUOTA, F_CALLS, F_H2D, F_D2H,
		F_GPU_S, F_CALLS_RATE, F_H2D_RATE, F_D2H_RATE, F_SHARE };

static void vm_value(FILE *f, const struct pvgpu_vm_figures *v,
		     enum vm_field fld)
{
	switch (fld) {
	case F_SESSIONS:
		fprintf(f, "%u\n", v->sessions);
		break;
	case F_MEM_USED:
		fprintf(f, "%llu\n", (unsigned long long)v->mem_used);
		break;
	case F_MEM_SUSPENDED:
		fprintf(f, "%llu\n", (unsigned long long)v->mem_suspended);
		break;
	case F_MEM_QUOTA:
		fprintf(f, "%llu\n", (unsigned long long)v->mem_quota);
		break;
	case F_CALLS:
		fprintf(f, "%llu\n", (unsigned long long)v->calls);
		break;
	case F_H2D:
		fprintf(f, "%llu\n", (unsigned long long)v->bytes_h2d);
		break;
	case F_D2H:
		fprintf(f, "%llu\n", (unsigned long long)v->bytes_d2h);
		break;
	case F_GPU_S:
		real(f, (double)v->gpu_ns / 1e9, "%.9f");
		break;
	case F_CALLS_RATE:
		real(f, v->calls_rate, "%.3f");
		break;
	case F_H2D_RATE:
		real(f, v->h2d_rate, "%.3f");
		break;
	case F_D2H_RATE:
		real(f, v->d2h_rate, "%.3f");
		break;
	case F_SHARE:
		real(f, v->gpu_share, "%.6f");
		break;
	}
}

/*
 * One family, a line per VM: field h2d alone, or with d2h != h2d, the two
 * directions of one figure under a direction label.
 */
static void vm_family(FILE *f, const struct pvgpu_snapshot *snap,
		      const char *name, const char *type, const char *help,
		      enum vm_field h2d, enum vm_field d2h)
{
	int split = h2d != d2h;

	family(f, name, type, help);
	for (int i = 0; i < PVGPU_STATS_BUCKETS; i++) {
		const struct pvgpu_vm_figures *v = &snap->vms[i];

		if (!v->name[0])
			continue;	/* no VM by this entry */
		for (int k = 0; k <= split; k++) {
			fprintf(f, "%s{", name);
			label(f, "vm", v->name);
			if (split) {
				fputc(',', f);
				label(f, "direction", k ? "d2h" : "h2d");
			}
			fputs("} ", f);
			vm_value(f, v, k ? d2h : h2d);
		}
	}
}

char *pvgpu_snapshot_format(const struct pvgpu_snapshot *snap, size_t *len)
{
	char *text = NULL;
	FILE *f = open_memstream(&text, len);

	if (!f)
		return NULL;
	family(f, "pvgpu_gpu_info", "gauge",
	       "A device this pvgpud serves (always 1; its name is a label).");
	for (int d = 0; d < snap->ngpus; d++) {
		fprintf(f, "pvgpu_gpu_info{gpu=\"%d\",", d);
		label(f, "name", snap->gpus[d].info.name);
		fputs("} 1\n", f);
	}
	family(f, "pvgpu_gpu_sessions", "gauge",
	       "Live sessions holding a context on the device.");
	for (int d = 0; d < snap->ngpus; d++)
		fprintf(f, "pvgpu_gpu_sessions{gpu=\"%d\"} %u\n", d,
			snap->gpus[d].sessions);
	family(f, "pvgpu_gpu_memory_used_bytes", "gauge",
	       "Device memory allocated by live sessions.");
	for (int d = 0; d < snap->ngpus; d++)
		fprintf(f, "pvgpu_gpu_memory_used_bytes{gpu=\"%d\"} %llu\n", d,
			(unsigned long long)snap->gpus[d].mem_used);
	family(f, "pvgpu_gpu_busy_seconds_total", "counter",
	       "Time the device had kernels of any session in flight.");
	for (int d = 0; d < snap->ngpus; d++) {
		fprintf(f, "pvgpu_gpu_busy_seconds_total{gpu=\"%d\"} ", d);
		real(f, (double)snap->gpus[d].busy_ns / 1e9, "%.9f");
	}
	family(f, "pvgpu_gpu_memory_promised_bytes", "gauge",
	       "Memory quotas of the policy's VMs that may use the device (each VM's on each of its devices).");
	for (int d = 0; d < snap->ngpus; d++)
		fprintf(f, "pvgpu_gpu_memory_promised_bytes{gpu=\"%d\"} %llu\n", d,
			(unsigned long long)snap->gpus[d].promised);
	family(f, "pvgpu_gpu_memory_total_bytes", "gauge",
	       "Device memory the device has.");
	for (int d = 0; d < snap->ngpus; d++)
		fprintf(f, "pvgpu_gpu_memory_total_bytes{gpu=\"%d\"} %llu\n", d,
			(unsigned long long)snap->gpus[d].info.mem_total);

	vm_family(f, snap, "pvgpu_vm_sessions", "gauge",
		  "Live sessions of the VM; vm=\"-\": sessions of no VM of the policy.",
		  F_SESSIONS, F_SESSIONS);
	vm_family(f, snap, "pvgpu_vm_memory_used_bytes", "gauge",
		  "Device memory charged to the VM and on a device, all devices.",
		  F_MEM_USED, F_MEM_USED);
	vm_family(f, snap, "pvgpu_vm_suspended_bytes", "gauge",
		  "Device memory of the VM's suspended sessions, held in host memory; still charged to its quota.",
		  F_MEM_SUSPENDED, F_MEM_SUSPENDED);
	vm_family(f, snap, "pvgpu_vm_memory_quota_bytes", "gauge",
		  "The VM's device-memory quota; 0: none.",
		  F_MEM_QUOTA, F_MEM_QUOTA);
	vm_family(f, snap, "pvgpu_vm_calls_total", "counter",
		  "Calls served to the VM's sessions, ended ones included.",
		  F_CALLS, F_CALLS);
	vm_family(f, snap, "pvgpu_vm_bytes_total", "counter",
		  "Bytes copied for the VM: h2d to a device, d2h from one.",
		  F_H2D, F_D2H);
	vm_family(f, snap, "pvgpu_vm_gpu_time_seconds_total", "counter",
		  "GPU busy time attributed to the VM's sessions.",
		  F_GPU_S, F_GPU_S);
	vm_family(f, snap, "pvgpu_vm_calls_per_second", "gauge",
		  "Calls per second over the last sampling interval.",
		  F_CALLS_RATE, F_CALLS_RATE);
	vm_family(f, snap, "pvgpu_vm_bytes_per_second", "gauge",
		  "Bytes copied per second over the last sampling interval.",
		  F_H2D_RATE, F_D2H_RATE);
	vm_family(f, snap, "pvgpu_vm_gpu_time_share", "gauge",
		  "The VM's part (0..1) of the GPU time measured over the last sampling interval; NaN when none was measured.",
		  F_SHARE, F_SHARE);
	family(f, "pvgpu_sampling_interval_seconds", "gauge",
	       "The interval the per-second figures and the GPU time share cover; 0 before the first.");
	fputs("pvgpu_sampling_interval_seconds ", f);
	real(f, snap->interval, "%.3f");
	if (fclose(f)) {
		free(text);
		return NULL;
	}
	return text;
}
