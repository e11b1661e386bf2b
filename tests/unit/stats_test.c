/*
 * stats_test.c - the figures behind `pvgpuctl status` and /metrics, from a
 * session table filled by hand: totals that never go back when sessions
 * end or slots are reused, rates over a tick, the share of GPU time (which
 * no executor fills yet, so only here can it be seen at work), and the
 * Prometheus text.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats.h"

#include "unit_check.h"

static struct pvgpu_accounting *acct;
static struct pvgpu_stats st;
static struct pvgpu_policy policy;
static int vm_a, vm_b, vm_gone, vm_quote;

static struct pvgpu_slot *start(uint32_t i, uint64_t session, int vm)
{
	struct pvgpu_slot *s = &acct->slots[i];

	pvgpu_accounting_release(s);
	s->pid = 1000 + (pid_t)i;
	s->session_id = session;
	atomic_store(&s->vm, vm);
	return s;
}

static void end(struct pvgpu_slot *s)
{
	pvgpu_stats_fold(&st, s);
	pvgpu_accounting_release(s);
}

static struct timespec at(double seconds)
{
	struct timespec t = st.tick;
	long long ns = (long long)(seconds * 1e9) + t.tv_nsec;

	t.tv_sec += ns / 1000000000;
	t.tv_nsec = ns % 1000000000;
	return t;
}

static const struct pvgpu_vm_figures *fig(int vm)
{
	return &st.snap.vms[vm < 0 ? PVGPU_STATS_NO_VM : vm];
}

static void setup(void)
{
	acct = pvgpu_accounting_create(4);
	vm_a = pvgpu_accounting_vm_get(acct, "a");
	vm_b = pvgpu_accounting_vm_get(acct, "b");
	vm_gone = pvgpu_accounting_vm_get(acct, "gone");
	vm_quote = pvgpu_accounting_vm_get(acct, "q\"x\\y");
	atomic_store(&acct->vms[vm_a].quota, 8u << 20);
	policy.nvms = 3;
	policy.vms[0].entry = vm_a;
	policy.vms[1].entry = vm_b;
	policy.vms[2].entry = vm_quote;
	policy.unknown.entry = -1;
	if (pvgpu_stats_init(&st, acct))
		abort();
	pvgpu_stats_set_policy(&st, &policy);
}

static void test_totals_and_share(void)
{
	struct pvgpu_gpu_info gpu = { .name = "test gpu", .mem_total = 16u << 20 };
	struct pvgpu_slot *a = start(0, 1, vm_a), *b = start(1, 2, vm_b);
	struct timespec t;

	pvgpu_stats_set_gpus(&st, 1, &gpu);
	atomic_store(&a->calls, 10);
	atomic_store(&a->gpu_ns, 3000000000ull);
	atomic_store(&a->mem_used[0], 3u << 20);
	atomic_store(&a->gpus_held, 1);
	atomic_store(&b->bytes_h2d, 1000);
	atomic_store(&b->gpu_ns, 1000000000ull);
	t = at(2.0);
	pvgpu_stats_tick(&st, &t);
	CHECK(fig(vm_a)->sessions == 1 && fig(vm_b)->sessions == 1);
	CHECK(fig(vm_a)->mem_used == 3u << 20 && fig(vm_a)->mem_quota == 8u << 20);
	CHECK(st.snap.gpus[0].sessions == 1 && st.snap.gpus[0].mem_used == 3u << 20);
	CHECK(fig(vm_a)->calls == 10 && fabs(fig(vm_a)->calls_rate - 5) < 1e-9);
	CHECK(fabs(fig(vm_b)->h2d_rate - 500) < 1e-9);
	CHECK(fabs(st.snap.interval - 2.0) < 1e-6);
	CHECK(fabs(fig(vm_a)->gpu_share - 0.75) < 1e-9);
	CHECK(fabs(fig(vm_b)->gpu_share - 0.25) < 1e-9);
	CHECK(fig(vm_gone)->gpu_share == 0);

	/* a's session ends; what it did stays a's. */
	end(a);
	pvgpu_stats_update(&st);
	CHECK(fig(vm_a)->sessions == 0 && fig(vm_a)->mem_used == 0);
	CHECK(fig(vm_a)->calls == 10 && fig(vm_a)->gpu_ns == 3000000000ull);
	CHECK(st.snap.gpus[0].sessions == 0);

	/* Its slot, reused by b, starts from zero: nothing counted twice. */
	a = start(0, 3, vm_b);
	atomic_store(&a->calls, 4);
	pvgpu_stats_update(&st);
	CHECK(fig(vm_a)->calls == 10 && fig(vm_b)->calls == 4);
	CHECK(fig(vm_b)->sessions == 2);

	/* No GPU time in an interval: no share, rather than 0% for all. */
	t = at(1.0);
	pvgpu_stats_tick(&st, &t);
	CHECK(isnan(fig(vm_a)->gpu_share) && isnan(fig(vm_b)->gpu_share));
	CHECK(fig(vm_a)->calls_rate == 0 && fabs(fig(vm_b)->calls_rate - 4) < 1e-9);
	end(a);
	end(b);
}

/* A slot named a VM after a look: what came before stays with "-". */
static void test_vm_named_late(void)
{
	struct pvgpu_slot *s = start(2, 10, -1);
	uint64_t dash = fig(-1)->calls, b = fig(vm_b)->calls;

	atomic_store(&s->calls, 1);
	pvgpu_stats_update(&st);
	CHECK(fig(-1)->calls == dash + 1 && fig(-1)->sessions == 1);
	atomic_store(&s->vm, vm_b);
	atomic_store(&s->calls, 3);
	pvgpu_stats_update(&st);
	CHECK(fig(-1)->calls == dash + 1 && fig(-1)->sessions == 0);
	CHECK(fig(vm_b)->calls == b + 2 && fig(vm_b)->sessions == 1);
	/* A VM index no table entry has is "-", never an index. */
	atomic_store(&s->vm, PVGPU_MAX_VM_ENTRIES + 7);
	atomic_store(&s->calls, 4);
	pvgpu_stats_update(&st);
	CHECK(fig(-1)->calls == dash + 2);
	end(s);
}

static void test_format(void)
{
	size_t len = 0;
	char *text;

	pvgpu_stats_update(&st);
	text = pvgpu_snapshot_format(&st.snap, &len);
	CHECK(text && strlen(text) == len);
	if (!text)
		return;
	CHECK(strstr(text, "# TYPE pvgpu_vm_calls_total counter\n"));
	CHECK(strstr(text, "# TYPE pvgpu_vm_sessions gauge\n"));
	CHECK(strstr(text, "\npvgpu_vm_calls_total{vm=\"a\"} 10\n"));
	CHECK(strstr(text, "\npvgpu_vm_gpu_time_seconds_total{vm=\"a\"} 3.000000000\n"));
	CHECK(strstr(text, "\npvgpu_vm_bytes_total{vm=\"b\",direction=\"h2d\"} 1000\n"));
	CHECK(strstr(text, "\npvgpu_vm_memory_quota_bytes{vm=\"a\"} 8388608\n"));
	CHECK(strstr(text, "\npvgpu_vm_gpu_time_share{vm=\"a\"} NaN\n"));
	CHECK(strstr(text, "\npvgpu_gpu_info{gpu=\"0\",name=\"test gpu\"} 1\n"));
	CHECK(strstr(text, "\npvgpu_gpu_memory_total_bytes{gpu=\"0\"} 16777216\n"));
	/* Label values are escaped. */
	CHECK(strstr(text, "\npvgpu_vm_sessions{vm=\"q\\\"x\\\\y\"} 0\n"));
	/* "-" had calls (above), so it stays although a policy is in force. */
	CHECK(strstr(text, "\npvgpu_vm_calls_total{vm=\"-\"} 2\n"));
	/* A VM the policy does not name and that did nothing is left out. */
	CHECK(!strstr(text, "vm=\"gone\""));
	free(text);
}

int main(void)
{
	setup();
	test_totals_and_share();
	test_vm_named_late();
	test_format();
	pvgpu_stats_fini(&st);
	pvgpu_accounting_destroy(acct);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
