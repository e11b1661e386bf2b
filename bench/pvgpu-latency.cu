/*
 * pvgpu-latency - the small-operation costs that decide how a chatty CUDA
 * program feels through pvgpu, in microseconds (median and p99):
 *
 *   copy     synchronous cudaMemcpy of 1, 4, 16 and 64 bytes, H2D and D2H,
 *            from pageable and pinned host memory;
 *   launch   an empty kernel launch followed by cudaDeviceSynchronize;
 *   async    the asynchronous launch rate: N empty launches, then one
 *            cudaDeviceSynchronize (launches per second);
 *   sync     cudaDeviceSynchronize on an idle device.
 *
 * Every operation is timed on its own with the monotonic wall clock; the
 * data checks happen between timed operations, never inside them.
 *
 * The same binary runs natively or through pvgpu (NVIDIA's runtime is
 * linked in); only LD_LIBRARY_PATH decides which libcuda.so.1 it loads (see
 * bench_common.h, --compare).
 */
#include "bench_common.h"

enum { TEST_COPY = 1, TEST_LAUNCH = 2, TEST_ASYNC = 4, TEST_SYNC = 8,
       TEST_EVENTS = 16, TEST_ALL = 31 };
enum { DIR_H2D, DIR_D2H, NDIRS };
enum { MEM_PAGEABLE, MEM_PINNED, NMEMS };

static const char *const dir_name[NDIRS] = { "h2d", "d2h" };
static const char *const mem_name[NMEMS] = { "pageable", "pinned" };

#define MAX_SIZES 16
#define WARMUP 100		/* untimed iterations before each test */
#define READBACK_EVERY 256	/* H2D copies verified by a read-back */
#define COUNT_LAUNCHES 1000	/* launches of the counting kernel */
#define REWARM 5		/* untimed operations after each turn (--interleave) */

__global__ void empty_kernel(void)
{
}

/* Proves launches really run: each adds one to *counter. */
__global__ void count_kernel(unsigned int *counter)
{
	if (threadIdx.x == 0 && blockIdx.x == 0)
		atomicAdd(counter, 1u);
}

struct options {
	struct common_opts co;
	int tests;
	uint64_t sizes[MAX_SIZES];
	int nsizes;
	int mems[NMEMS];
	int iters;
	int launches;
	int rounds;
	int round_trips;	/* through pvgpu: count and print them */
	int interleave;		/* --interleave N: timed iterations per turn */
};

/* One row of the report. */
struct result {
	char key[64];
	int iters;
	double median_us, p99_us, min_us, mean_us;
	double launches_per_s;		/* async only */
	double enqueue_per_s;		/* async only: launches/s before the sync */
	long long ops;			/* operations run, warm-up included */
	double rt_per_op;		/* wire round trips per operation; NAN: unknown */
	double msgs_per_op;		/* messages sent per operation */
	double wakes_per_op;		/* control ring: the worker woken per operation */
	double sleeps_per_op;		/* control ring: the guest asleep per operation */
};

#define MAX_RESULTS (2 * NMEMS * MAX_SIZES + 7)

static void usage(void)
{
	printf(
"usage: %s [options]\n"
"Latency of small CUDA operations in microseconds (median, p99), natively or\n"
"through pvgpu (whichever libcuda.so.1 the loader finds).\n"
"  --tests LIST         any of copy,launch,async,sync,events (default all)\n"
"  --sizes LIST         copy sizes in bytes (default 1,4,16,64)\n"
"  --memory pageable|pinned|both   host memory for copies (default both)\n"
"  --iters N            timed iterations per test (default 10000)\n"
"  --launches N         launches per async round (default 100000)\n"
"  --rounds N           async rounds, median reported (default 5)\n"
"  --round-trips        (always on) through pvgpu: wire round trips and\n"
"                       messages per operation, also under --compare\n"
"  --interleave N       with --compare: each pair's native and pvgpu runs\n"
"                       go at the same time, taking turns on the GPU every\n"
"                       N timed iterations (every round for async), with %d\n"
"                       untimed operations after each turn; the machine's\n"
"                       drift from second to second then falls on both\n"
"                       sides alike\n"
COMMON_OPTIONS_HELP, g_prog, REWARM);
}

static void parse_args(struct options *o, int argc, char **argv)
{
	int i, k, iters = 0, launches = 0, rounds = 0;

	memset(o, 0, sizeof(*o));
	o->tests = TEST_ALL;
	o->nsizes = 4;
	o->sizes[0] = 1;
	o->sizes[1] = 4;
	o->sizes[2] = 16;
	o->sizes[3] = 64;
	o->mems[MEM_PAGEABLE] = o->mems[MEM_PINNED] = 1;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage();
			exit(EXIT_OK);
		} else if (common_option(&i, argc, argv, &o->co)) {
			continue;
		} else if (!strcmp(a, "--tests")) {
			char *copy = xstrdup(opt_value(&i, argc, argv));
			char *tok, *save = NULL;

			o->tests = 0;
			for (tok = strtok_r(copy, ",", &save); tok;
			     tok = strtok_r(NULL, ",", &save)) {
				if (!strcmp(tok, "copy"))
					o->tests |= TEST_COPY;
				else if (!strcmp(tok, "launch"))
					o->tests |= TEST_LAUNCH;
				else if (!strcmp(tok, "async"))
					o->tests |= TEST_ASYNC;
				else if (!strcmp(tok, "sync"))
					o->tests |= TEST_SYNC;
				else if (!strcmp(tok, "events"))
					o->tests |= TEST_EVENTS;
				else if (!strcmp(tok, "all"))
					o->tests |= TEST_ALL;
				else
					usage_error("--tests: '%s' is not copy, "
						    "launch, async, sync or events", tok);
			}
			free(copy);
			if (!o->tests)
				usage_error("--tests: nothing chosen");
		} else if (!strcmp(a, "--sizes")) {
			char *copy = xstrdup(opt_value(&i, argc, argv));
			char *tok, *save = NULL;

			o->nsizes = 0;
			for (tok = strtok_r(copy, ",", &save); tok;
			     tok = strtok_r(NULL, ",", &save)) {
				uint64_t s;

				if (parse_size(tok, &s) || s == 0 || s > (1 << 20))
					usage_error("--sizes: '%s' is not a size "
						    "from 1 byte to 1M", tok);
				if (o->nsizes == MAX_SIZES)
					usage_error("--sizes: at most %d sizes",
						    MAX_SIZES);
				o->sizes[o->nsizes++] = s;
			}
			free(copy);
			if (!o->nsizes)
				usage_error("--sizes: no sizes given");
		} else if (!strcmp(a, "--memory")) {
			const char *v = opt_value(&i, argc, argv);

			for (k = 0; k < NMEMS; k++)
				o->mems[k] = !strcmp(v, "both") ||
					     !strcmp(v, mem_name[k]);
			if (!o->mems[0] && !o->mems[1])
				usage_error("--memory: '%s' is not pageable, "
					    "pinned or both", v);
		} else if (!strcmp(a, "--iters")) {
			iters = (int)parse_count(a, opt_value(&i, argc, argv),
						 1, 100000000);
		} else if (!strcmp(a, "--launches")) {
			launches = (int)parse_count(a, opt_value(&i, argc, argv),
						    1, 100000000);
		} else if (!strcmp(a, "--round-trips")) {
			o->round_trips = 1;
		} else if (!strcmp(a, "--interleave")) {
			o->interleave = (int)parse_count(a, opt_value(&i, argc, argv),
							 1, 100000000);
		} else if (!strcmp(a, "--rounds")) {
			rounds = (int)parse_count(a, opt_value(&i, argc, argv),
						  1, 1000);
		} else {
			usage_error("unknown option '%s'", a);
		}
	}
	/*
	 * Counting reads pvgpu's counters once before and once after each
	 * test, outside the timed operations: always on through pvgpu.
	 */
	o->round_trips = 1;
	o->iters = iters ? iters : o->co.quick ? 200 : 10000;
	o->launches = launches ? launches : o->co.quick ? 2000 : 100000;
	o->rounds = rounds ? rounds : o->co.quick ? 2 : 5;
	interleave_option_done(o->interleave, &o->co);
	common_options_done(&o->co);
}

/* Summarise samples[0..n) (microseconds) into r; sorts samples. */
static void summarise(struct result *r, double *us, int n)
{
	double sum = 0;
	int i;

	for (i = 0; i < n; i++)
		sum += us[i];
	r->iters = n;
	r->mean_us = sum / n;
	r->p99_us = percentile(us, (size_t)n, 99.0);
	r->median_us = percentile(us, (size_t)n, 50.0);
	r->min_us = us[0];		/* sorted by percentile() */
	r->launches_per_s = NAN;
	r->enqueue_per_s = NAN;
}

/* --interleave: how many untimed operations to run before iteration i. */
static int turn_point(int i, int every)
{
	return bench_turn_point(i, every) ? REWARM : 0;
}

/*
 * Synchronous copies of `size` bytes.  H2D: each iteration's source holds
 * the pattern of (size, iteration), written before the clock starts; every
 * READBACK_EVERY-th copy and the last are read back (untimed) and checked.
 * D2H: the device holds a pattern; the host buffer is poisoned before each
 * copy and checked after it, so every single copy is verified.
 */
static void test_copy(const struct options *o, int dir, int mem,
		      uint64_t size, void *dev, struct result *r, double *us)
{
	unsigned char *host, *check;
	uint64_t tag = 0;
	long long bad, extra = 0;
	double t0;
	int i;

	if (mem == MEM_PINNED)
		CK(cudaMallocHost((void **)&host, size));
	else
		host = (unsigned char *)xmalloc(size);
	check = (unsigned char *)xmalloc(size);
	snprintf(r->key, sizeof(r->key), "copy %s %s %lluB", dir_name[dir],
		 mem_name[mem], (unsigned long long)size);

	if (dir == DIR_D2H) {
		tag = pattern_tag(size, 0xd2);
		pattern_fill(host, size, tag);
		CK(cudaMemcpy(dev, host, size, cudaMemcpyHostToDevice));
	}
	for (i = -WARMUP; i < o->iters; i++) {
		for (int w = turn_point(i, o->interleave); w > 0; w--, extra++)
			CK(dir == DIR_H2D ?
			   cudaMemcpy(dev, host, size, cudaMemcpyHostToDevice) :
			   cudaMemcpy(host, dev, size, cudaMemcpyDeviceToHost));
		if (dir == DIR_H2D) {
			tag = pattern_tag(size, (uint64_t)(i + WARMUP));
			pattern_fill(host, size, tag);
			t0 = now_s();
			CK(cudaMemcpy(dev, host, size, cudaMemcpyHostToDevice));
			if (i >= 0)
				us[i] = (now_s() - t0) * 1e6;
			if (i % READBACK_EVERY == 0 || i == o->iters - 1) {
				memset(check, 0xa5, size);
				CK(cudaMemcpy(check, dev, size,
					      cudaMemcpyDeviceToHost));
				bad = pattern_check(check, size, tag);
				if (bad >= 0)
					die("data mismatch: %s, iteration %d: "
					    "first bad byte at offset %lld",
					    r->key, i, bad);
			}
		} else {
			memset(host, (i & 1) ? 0xa5 : 0x5a, size);
			t0 = now_s();
			CK(cudaMemcpy(host, dev, size, cudaMemcpyDeviceToHost));
			if (i >= 0)
				us[i] = (now_s() - t0) * 1e6;
			bad = pattern_check(host, size, tag);
			if (bad >= 0)
				die("data mismatch: %s, iteration %d: first bad "
				    "byte at offset %lld", r->key, i, bad);
		}
	}
	summarise(r, us, o->iters);
	r->ops = WARMUP + o->iters + extra;	/* H2D read-backs add 1 in 256 */
	if (mem == MEM_PINNED)
		CK(cudaFreeHost(host));
	else
		free(host);
	free(check);
}

/* Empty kernel launch + cudaDeviceSynchronize, each pair timed. */
static void test_launch(const struct options *o, struct result *r, double *us)
{
	double t0;
	long long extra = 0;
	int i;

	snprintf(r->key, sizeof(r->key), "launch+sync");
	for (i = -WARMUP; i < o->iters; i++) {
		for (int w = turn_point(i, o->interleave); w > 0; w--, extra++) {
			empty_kernel<<<1, 1>>>();
			CK(cudaDeviceSynchronize());
		}
		t0 = now_s();
		empty_kernel<<<1, 1>>>();
		CK(cudaDeviceSynchronize());
		if (i >= 0)
			us[i] = (now_s() - t0) * 1e6;
	}
	CK(cudaGetLastError());
	summarise(r, us, o->iters);
	r->ops = WARMUP + o->iters + extra;	/* launch + synchronize pairs */
}

/*
 * Asynchronous launch rate: `launches` empty launches then one synchronize,
 * in `rounds` rounds; the median round is reported.  Afterwards a counting
 * kernel is launched COUNT_LAUNCHES times the same way and its counter read
 * back, which proves that asynchronous launches are all really executed.
 */
static void test_async(const struct options *o, struct result *r, double *us)
{
	double *rate = (double *)xmalloc(o->rounds * sizeof(double));
	double *enq = (double *)xmalloc(o->rounds * sizeof(double));
	unsigned int *counter, count = 0;
	double t0, t1, t2;
	long long extra = 0;
	int round, i;

	snprintf(r->key, sizeof(r->key), "launch async");
	for (i = 0; i < WARMUP; i++)
		empty_kernel<<<1, 1>>>();
	CK(cudaDeviceSynchronize());
	for (round = 0; round < o->rounds; round++) {
		int w = turn_point(round, 1);

		if (w) {
			for (i = 0; i < w; i++)
				empty_kernel<<<1, 1>>>();
			CK(cudaDeviceSynchronize());
			extra += w;
		}
		t0 = now_s();
		for (i = 0; i < o->launches; i++)
			empty_kernel<<<1, 1>>>();
		t1 = now_s();
		CK(cudaDeviceSynchronize());
		t2 = now_s();
		CK(cudaGetLastError());
		rate[round] = o->launches / (t2 - t0);
		enq[round] = o->launches / (t1 - t0);
		us[round] = (t2 - t0) * 1e6 / o->launches;
	}
	summarise(r, us, o->rounds);
	r->p99_us = NAN;	/* a p99 over a handful of rounds means nothing */
	r->iters = o->rounds * o->launches;
	r->launches_per_s = percentile(rate, (size_t)o->rounds, 50.0);
	r->enqueue_per_s = percentile(enq, (size_t)o->rounds, 50.0);

	CK(cudaMalloc((void **)&counter, sizeof(*counter)));
	CK(cudaMemset(counter, 0, sizeof(*counter)));
	for (i = 0; i < COUNT_LAUNCHES; i++)
		count_kernel<<<1, 1>>>(counter);
	CK(cudaDeviceSynchronize());
	CK(cudaGetLastError());
	CK(cudaMemcpy(&count, counter, sizeof(count), cudaMemcpyDeviceToHost));
	if (count != COUNT_LAUNCHES)
		die("launch check: %d asynchronous launches of a counting kernel "
		    "counted %u", COUNT_LAUNCHES, count);
	CK(cudaFree(counter));
	r->ops = WARMUP + (long long)o->rounds * o->launches + COUNT_LAUNCHES +
		 extra;
	free(rate);
	free(enq);
}

/* cudaDeviceSynchronize with nothing outstanding. */
static void test_sync(const struct options *o, struct result *r, double *us)
{
	double t0;
	long long extra = 0;
	int i;

	snprintf(r->key, sizeof(r->key), "sync idle");
	CK(cudaDeviceSynchronize());
	for (i = -WARMUP; i < o->iters; i++) {
		for (int w = turn_point(i, o->interleave); w > 0; w--, extra++)
			CK(cudaDeviceSynchronize());
		t0 = now_s();
		CK(cudaDeviceSynchronize());
		if (i >= 0)
			us[i] = (now_s() - t0) * 1e6;
	}
	summarise(r, us, o->iters);
	r->ops = WARMUP + o->iters + 1 + extra;
}

/*
 * What a framework does between launches (PyTorch's caching allocator and
 * its streams): record an event on a stream, ask whether an event recorded
 * just before is done, ask whether a stream with nothing outstanding is.
 * An event's query may find it not yet done; both answers are right.
 */
enum { EV_RECORD, EV_QUERY, EV_STREAM_QUERY };

static void event_op_ok(cudaError_t e)
{
	if (e != cudaSuccess && e != cudaErrorNotReady)
		CK(e);
}

static void test_event(const struct options *o, int what, struct result *r,
		       double *us)
{
	static const char *const name[] = { "event record", "event query",
					     "stream query idle" };
	cudaStream_t s;
	cudaEvent_t ev;
	double t0 = 0;
	long long extra = 0;
	int i;

	snprintf(r->key, sizeof(r->key), "%s", name[what]);
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
	CK(cudaStreamSynchronize(s));
	for (i = -WARMUP; i < o->iters; i++) {
		for (int w = turn_point(i, o->interleave); w > 0; w--, extra++)
			CK(cudaEventRecord(ev, s));
		if (what == EV_RECORD)
			t0 = now_s();
		if (what != EV_STREAM_QUERY)
			CK(cudaEventRecord(ev, s));
		if (what == EV_QUERY) {
			t0 = now_s();
			event_op_ok(cudaEventQuery(ev));
		} else if (what == EV_STREAM_QUERY) {
			t0 = now_s();
			event_op_ok(cudaStreamQuery(s));
		}
		if (i >= 0)
			us[i] = (now_s() - t0) * 1e6;
	}
	CK(cudaStreamSynchronize(s));
	CK(cudaGetLastError());
	summarise(r, us, o->iters);
	r->ops = WARMUP + o->iters + extra;
	CK(cudaEventDestroy(ev));
	CK(cudaStreamDestroy(s));
}

/*
 * Through pvgpu, pvgpu's libcuda.so.1 exports pvgpu_wire_stats (what
 * went over the wire so far); natively there is none.  Calls [1] are round
 * trips, sends [0] messages.
 */
typedef int (*wire_stats_fn)(unsigned long long out[5]);
/* pvgpu_ring_wakes: over the control ring, [0] the times the guest woke its
 * worker (asleep when a message came) and [1] the guest's own waits that
 * slept; returns the backends with the ring.  A wake-up costs
 * microseconds: where they are, they show. */
typedef int (*ring_wakes_fn)(unsigned long long out[2]);

static void *pvgpu_export(const char *name)
{
	void *fn = dlsym(RTLD_DEFAULT, name);
	void *h;

	/*
	 * NVIDIA's runtime dlopens libcuda.so.1 on its own (RTLD_LOCAL):
	 * pvgpu's driver front-end is found through its handle.
	 */
	if (!fn && (h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD))) {
		fn = dlsym(h, name);
		dlclose(h);
	}
	return fn;
}

static wire_stats_fn wire_stats(void)
{
	return (wire_stats_fn)pvgpu_export("pvgpu_wire_stats");
}

static ring_wakes_fn ring_wakes(void)
{
	return (ring_wakes_fn)pvgpu_export("pvgpu_ring_wakes");
}

static void print_json(const struct lib_info *li, const struct dev_info *di,
		       const struct result *res, int n)
{
	int i;

	printf("{");
	json_run_header(stdout, li, di);
	if (g_turns.n)
		json_turns(stdout);
	printf("\"units\":\"microseconds\",\"results\":[");
	for (i = 0; i < n; i++) {
		printf("%s{\"key\":", i ? "," : "");
		json_str(stdout, res[i].key);
		printf(",\"iterations\":%d,\"median_us\":", res[i].iters);
		json_num(stdout, res[i].median_us);
		printf(",\"p99_us\":");
		json_num(stdout, res[i].p99_us);
		printf(",\"min_us\":");
		json_num(stdout, res[i].min_us);
		printf(",\"mean_us\":");
		json_num(stdout, res[i].mean_us);
		if (isfinite(res[i].launches_per_s)) {
			printf(",\"launches_per_s\":");
			json_num(stdout, res[i].launches_per_s);
			printf(",\"enqueue_per_s\":");
			json_num(stdout, res[i].enqueue_per_s);
		}
		if (isfinite(res[i].rt_per_op)) {
			printf(",\"round_trips_per_op\":");
			json_num(stdout, res[i].rt_per_op);
			printf(",\"messages_per_op\":");
			json_num(stdout, res[i].msgs_per_op);
		}
		if (isfinite(res[i].wakes_per_op)) {
			printf(",\"worker_wakeups_per_op\":");
			json_num(stdout, res[i].wakes_per_op);
			printf(",\"guest_sleeps_per_op\":");
			json_num(stdout, res[i].sleeps_per_op);
		}
		printf(",\"verified\":true}");
	}
	printf("]}\n");
}

static void print_table(const struct result *res, int n)
{
	int i;

	printf("%-26s %10s %10s %10s %14s\n", "test", "median us", "p99 us",
	       "min us", "launches/s");
	for (i = 0; i < n; i++) {
		printf("%-26s %10.2f", res[i].key, res[i].median_us);
		if (isfinite(res[i].p99_us))
			printf(" %10.2f", res[i].p99_us);
		else
			printf(" %10s", "-");
		printf(" %10.2f", res[i].min_us);
		if (isfinite(res[i].launches_per_s))
			printf(" %14.0f", res[i].launches_per_s);
		printf("\n");
	}
	printf("(launch async: us per launch over a round of launches + one "
	       "synchronize)\n");
	for (i = 0; i < n && !isfinite(res[i].rt_per_op); i++)
		;
	if (i == n)
		return;
	printf("\nthrough pvgpu, per operation (one runtime call; launch: the launch and\n"
	       "its synchronize; async: a round of launches and one synchronize):\n");
	printf("%-26s %14s %14s %14s %14s\n", "test", "round trips/op",
	       "messages/op", "worker woken", "guest slept");
	for (i = 0; i < n; i++) {
		if (!isfinite(res[i].rt_per_op))
			continue;
		printf("%-26s %14.3f %14.3f", res[i].key, res[i].rt_per_op,
		       res[i].msgs_per_op);
		if (isfinite(res[i].wakes_per_op))
			printf(" %14.3f %14.3f", res[i].wakes_per_op,
			       res[i].sleeps_per_op);
		printf("\n");
	}
}

/* Run one test, counting what it sent over the wire when asked. */
#define COUNTED(o, r, call) do {					\
	wire_stats_fn ws_ = (o)->round_trips ? wire_stats() : NULL;	\
	ring_wakes_fn rw_ = (o)->round_trips ? ring_wakes() : NULL;	\
	unsigned long long a_[5], b_[5], c_[2], d_[2];			\
	int ok_ = ws_ && ws_(a_) >= 0;					\
	int rok_ = rw_ && rw_(c_) > 0;	/* with the control ring */	\
									\
	call;								\
	(r)->rt_per_op = (r)->msgs_per_op = NAN;			\
	(r)->wakes_per_op = (r)->sleeps_per_op = NAN;			\
	if (ok_ && ws_(b_) >= 0 && (r)->ops > 0) {			\
		(r)->rt_per_op = (double)(b_[1] - a_[1]) / (r)->ops;	\
		(r)->msgs_per_op = (double)(b_[0] - a_[0]) / (r)->ops;	\
	}								\
	if (rok_ && rw_(d_) >= 0 && (r)->ops > 0) {			\
		(r)->wakes_per_op = (double)(d_[0] - c_[0]) / (r)->ops;	\
		(r)->sleeps_per_op = (double)(d_[1] - c_[1]) / (r)->ops; \
	}								\
} while (0)


static int run_here(const struct options *o)
{
	struct lib_info li;
	struct dev_info di;
	struct result res[MAX_RESULTS];
	int n = 0, d, m, s;
	int nsamples = o->iters > o->rounds ? o->iters : o->rounds;
	double *us = (double *)xmalloc(nsamples * sizeof(double));
	void *dev;

	lib_identify(&li);
	device_open(o->co.device, &di);
	lib_identify_driver(&li);	/* the runtime has loaded it now */
	memset(res, 0, sizeof(res));
	CK(cudaMalloc(&dev, 1 << 20));
	bench_turns_open();		/* --interleave: the GPU by turns */
	bench_turn_wait();
	if (o->tests & TEST_COPY)
		for (d = 0; d < NDIRS; d++)
			for (m = 0; m < NMEMS; m++)
				for (s = 0; o->mems[m] && s < o->nsizes; s++, n++)
					COUNTED(o, &res[n],
						test_copy(o, d, m, o->sizes[s],
							  dev, &res[n], us));
	if (o->tests & TEST_LAUNCH) {
		COUNTED(o, &res[n], test_launch(o, &res[n], us));
		n++;
	}
	if (o->tests & TEST_ASYNC) {
		COUNTED(o, &res[n], test_async(o, &res[n], us));
		n++;
	}
	if (o->tests & TEST_SYNC) {
		COUNTED(o, &res[n], test_sync(o, &res[n], us));
		n++;
	}
	if (o->tests & TEST_EVENTS)
		for (int e = EV_RECORD; e <= EV_STREAM_QUERY; e++, n++)
			COUNTED(o, &res[n], test_event(o, e, &res[n], us));
	bench_turn_pass();
	bench_turns_end();
	CK(cudaFree(dev));
	free(us);

	if (o->co.json) {
		print_json(&li, &di, res, n);
	} else {
		table_run_header(&li, &di);
		print_table(res, n);
	}
	return EXIT_OK;
}

/* The pvgpu child's wire round trips per operation, where it counted them. */
static void print_compare_round_trips(const struct compare_runs *cs)
{
	const struct jval *res = jget(cs->pv[0].json, "results");
	int i, head = 0;

	for (i = 0; res && res->type == J_ARR && i < res->n; i++) {
		const char *key = jstr(&res->items[i], "key");
		double rt = key ? compare_stat(cs->pv, cs->pairs, key,
					       "round_trips_per_op", NULL, NULL)
				: NAN;
		double msgs = key ? compare_stat(cs->pv, cs->pairs, key,
						 "messages_per_op", NULL, NULL)
				  : NAN;
		double wlo = NAN, whi = NAN;
		double wakes = key ? compare_stat(cs->pv, cs->pairs, key,
						  "worker_wakeups_per_op",
						  &wlo, &whi)
				   : NAN;

		if (!key || !isfinite(rt))
			continue;
		if (!head++)
			printf("\n%-26s %14s %14s %21s  (pvgpu, per operation%s)\n",
			       "test", "round trips", "messages",
			       cs->pairs > 1 ? "worker woken min..max" : "worker woken",
			       cs->pairs > 1 ? ", median of the runs" : "");
		printf("%-26s %14.3f %14.3f", key, rt, msgs);
		/* Over --pairs, the spread: a process that pays wake-ups shows. */
		if (isfinite(wakes) && cs->pairs > 1)
			print_spread(wlo, whi);
		else if (isfinite(wakes))
			printf(" %21.3f", wakes);
		printf("\n");
	}
}

static int run_compare(struct options *o, int argc, char **argv)
{
	static const struct cmp_field fields[] = {
		{ "median_us", "median us", 1, 1 },
		{ "p99_us", "p99 us", 1, 1 },
		{ "launches_per_s", "launches/s", 0, 1 },
		{ "min_us", "min us", 1, 0 },
	};
	struct compare_runs cs;
	struct argvec args;

	compare_resolve_libdirs(&o->co);
	memset(&args, 0, sizeof(args));
	child_args(&args, argc, argv, NULL, NULL);
	if (o->interleave)
		compare_run_interleaved(&cs, &o->co, args.v, o->interleave);
	else
		compare_run_all(&cs, &o->co, args.v, args.v);
	if (o->co.json) {
		compare_json(fields, 4, &cs);
		printf("}\n");
	} else {
		compare_table(fields, 4, &cs);
		print_compare_round_trips(&cs);
	}
	compare_runs_free(&cs);
	argv_free(&args);
	return EXIT_OK;
}

int main(int argc, char **argv)
{
	struct options o;

	g_prog = "pvgpu-latency";
	parse_args(&o, argc, argv);
	if (o.co.compare)
		return run_compare(&o, argc, argv);
	return run_here(&o);
}
