/*
 * pvgpu-fair - one session of the fairness measurement (GPU time between
 * VMs by weight, host-backend/daemon/gpusched.h).
 *
 * A compute-bound kernel in a loop: every launch fills the whole GPU (by
 * default one full wave, SMs x resident blocks per SM) with threads that
 * each run four independent FMA chains, so a launch is pure SM time and
 * two launches of any sessions cannot share the GPU except by taking
 * turns.  The loop keeps --queue launches queued (events) and runs for
 * --seconds, or for exactly --count launches (the "same total work" run of
 * one native process).  It reports how many kernels completed before the
 * deadline: with every kernel the same work, a VM's share of the kernels
 * completed by all sessions over the same window is its share of GPU time.
 *
 * scripts/fairness.py runs one per session, 4 VMs x 4 sessions at once,
 * started together with --wait-go (each prints "ready" after its warm-up
 * and starts its clock on a line on stdin), and compares the shares with
 * the VMs' weights.
 *
 * --calibrate picks the kernel's loop count natively so that one launch
 * takes --kernel-ms, and prints it; every session of a measurement then
 * runs the same --iters and --blocks.
 *
 * The same binary runs natively or through pvgpu; only LD_LIBRARY_PATH
 * decides (bench_common.h).  Every run checks what the kernel wrote
 * against the host's own FMA chain, bit for bit.
 */
#include "bench_common.h"

#define FAIR_A 0.999f		/* x -> a*x + b converges to 1: stays finite */
#define FAIR_B 0.001f
#define FAIR_X0 0.5f
#define MAX_QUEUE 64

/*
 * Four independent chains per thread keep the FMA pipes full without
 * needing more warps than one wave gives; the sum is written so that none
 * of the work can be optimised away.  Every thread computes the same
 * value, so the host (and the sim's CPU twin) can check it cheaply.
 */
__global__ void fair_kernel(float *out, int iters, float x0)
{
	float x = x0, y = x0 + 0.25f, z = x0 + 0.5f, v = x0 + 0.75f;

	for (int k = 0; k < iters; k++) {
		x = fmaf(x, FAIR_A, FAIR_B);
		y = fmaf(y, FAIR_A, FAIR_B);
		z = fmaf(z, FAIR_A, FAIR_B);
		v = fmaf(v, FAIR_A, FAIR_B);
	}
	out[(size_t)blockIdx.x * blockDim.x + threadIdx.x] = x + y + z + v;
}

/* What every element must hold after a launch of `iters` iterations. */
static float expected_value(int iters)
{
	float x = FAIR_X0, y = FAIR_X0 + 0.25f, z = FAIR_X0 + 0.5f,
	      v = FAIR_X0 + 0.75f;

	for (int k = 0; k < iters; k++) {
		x = fmaf(x, FAIR_A, FAIR_B);
		y = fmaf(y, FAIR_A, FAIR_B);
		z = fmaf(z, FAIR_A, FAIR_B);
		v = fmaf(v, FAIR_A, FAIR_B);
	}
	return x + y + z + v;
}

struct options {
	struct common_opts co;
	double seconds;
	long long count;		/* 0: run for --seconds */
	int iters;			/* 0: calibrate to kernel_ms */
	double kernel_ms;
	int blocks;			/* 0: one full wave */
	int threads;
	int queue;
	double gap_ms;			/* after each completion, before the next launch */
	int calibrate;
	int wait_go;
	const char *label;
};

struct result {
	long long kernels;		/* completed before the deadline */
	long long kernels_total;	/* everything launched, drained */
	double seconds;			/* go -> deadline (or -> last, --count) */
	double wall_s;			/* go -> last kernel done */
	double event_ms_sum;		/* kernels' cudaEvent times, summed */
	double go_unix, end_unix;	/* CLOCK_REALTIME, for the driver */
};

static float *g_out;

/* CLOCK_REALTIME, s: comparable between the sessions' processes. */
static double wall_unix(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(void)
{
	printf(
"usage: %s [options]\n"
"One session of the fairness measurement: a compute-bound kernel that fills\n"
"the GPU, launched in a loop; prints the kernels completed.\n"
"  --seconds S          run the loop for S seconds (default 10)\n"
"  --count N            run exactly N launches instead (same-work runs)\n"
"  --iters N            FMA loop iterations per thread (default: calibrate)\n"
"  --kernel-ms MS       calibration target for one launch (default 1.5)\n"
"  --blocks N           grid size (default: one full wave, SMs x resident\n"
"                       blocks per SM)\n"
"  --threads N          block size (default 256)\n"
"  --queue N            launches kept queued (default 4)\n"
"  --gap-ms MS          pause after each completed launch (default 0): a\n"
"                       sparse tenant, like batch-1 decode, with --queue 1\n"
"  --calibrate          only choose --iters and --blocks, print them\n"
"  --wait-go            after the warm-up print \"ready\" and start on a\n"
"                       line from stdin (to start many sessions together)\n"
"  --label NAME         a name echoed in the output (the VM, say)\n"
"  --json               one JSON object on stdout instead of a table\n"
"  --quick              a short run (CI): 1 s unless --seconds is given\n"
"  --device N           CUDA device index (default 0)\n"
"  --help               this text\n"
"Exit status: 0 success, 1 runtime failure (incl. a wrong result), 2 bad usage.\n",
	       g_prog);
}

static void parse_args(struct options *o, int argc, char **argv)
{
	int seconds_given = 0;

	memset(o, 0, sizeof(*o));
	o->seconds = 10;
	o->kernel_ms = 1.5;
	o->threads = 256;
	o->queue = 4;
	o->label = "";
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage();
			exit(EXIT_OK);
		} else if (!strcmp(a, "--seconds")) {
			o->seconds = parse_real(a, opt_value(&i, argc, argv),
						0.01, 86400);
			seconds_given = 1;
		} else if (!strcmp(a, "--count")) {
			o->count = parse_count(a, opt_value(&i, argc, argv), 1,
					       1LL << 40);
		} else if (!strcmp(a, "--iters")) {
			o->iters = (int)parse_count(a, opt_value(&i, argc, argv),
						    1, INT_MAX);
		} else if (!strcmp(a, "--kernel-ms")) {
			o->kernel_ms = parse_real(a, opt_value(&i, argc, argv),
						  0.01, 10000);
		} else if (!strcmp(a, "--blocks")) {
			o->blocks = (int)parse_count(a, opt_value(&i, argc, argv),
						     1, 1 << 24);
		} else if (!strcmp(a, "--threads")) {
			o->threads = (int)parse_count(a, opt_value(&i, argc, argv),
						      32, 1024);
		} else if (!strcmp(a, "--queue")) {
			o->queue = (int)parse_count(a, opt_value(&i, argc, argv),
						    1, MAX_QUEUE);
		} else if (!strcmp(a, "--gap-ms")) {
			o->gap_ms = parse_real(a, opt_value(&i, argc, argv),
					       0, 10000);
		} else if (!strcmp(a, "--calibrate")) {
			o->calibrate = 1;
		} else if (!strcmp(a, "--wait-go")) {
			o->wait_go = 1;
		} else if (!strcmp(a, "--label")) {
			o->label = opt_value(&i, argc, argv);
		} else if (common_option(&i, argc, argv, &o->co)) {
			if (o->co.compare)
				usage_error("--compare: run natively and through pvgpu with scripts/fairness.py");
		} else {
			usage_error("unknown option '%s'", a);
		}
	}
	if (o->co.quick && !seconds_given)
		o->seconds = 1;
	common_options_done(&o->co);
}

static void launch(const struct options *o, int iters)
{
	fair_kernel<<<o->blocks, o->threads>>>(g_out, iters, FAIR_X0);
}

/* Median cudaEvent time of `reps` launches, ms. */
static double time_launch(const struct options *o, int iters, int reps)
{
	cudaEvent_t a, b;
	double t[16];
	float ms;
	int r;

	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	for (r = 0; r < reps && r < 16; r++) {
		CK(cudaEventRecord(a, 0));
		launch(o, iters);
		CK(cudaEventRecord(b, 0));
		CK(cudaEventSynchronize(b));
		CK(cudaEventElapsedTime(&ms, a, b));
		t[r] = ms;
	}
	CK(cudaGetLastError());
	CK(cudaEventDestroy(a));
	CK(cudaEventDestroy(b));
	return percentile(t, (size_t)r, 50.0);
}

/* --iters for one launch of --kernel-ms: grow until measurable, then scale. */
static double calibrate(struct options *o)
{
	double t, target = o->kernel_ms;
	long long it = 256;

	time_launch(o, 1, 2);	/* warm-up: module load, clocks */
	for (;;) {
		t = time_launch(o, (int)it, 3);
		if (t >= target / 8 || it >= INT_MAX / 8)
			break;
		it *= 8;
	}
	it = (long long)((double)it * target / (t > 0 ? t : 1e-3));
	if (it < 1)
		it = 1;
	if (it > INT_MAX)
		it = INT_MAX;
	o->iters = (int)it;
	return time_launch(o, o->iters, 5);
}

/* The loop: keep `queue` launches queued until the deadline, then drain. */
static void run_loop(const struct options *o, struct result *r)
{
	cudaEvent_t start[MAX_QUEUE], stop[MAX_QUEUE];
	long long launched = 0, completed = 0;
	double t0, t_end, t;
	int stopping = 0;

	memset(r, 0, sizeof(*r));
	for (int k = 0; k < o->queue; k++) {
		CK(cudaEventCreate(&start[k]));
		/* Blocking: a waiting session sleeps instead of spinning a core. */
		CK(cudaEventCreateWithFlags(&stop[k], cudaEventBlockingSync));
	}
	r->go_unix = wall_unix();
	t0 = now_s();
	t_end = t0 + o->seconds;
	r->seconds = o->seconds;
	for (;;) {
		if (!stopping) {
			t = now_s();
			if (o->count ? launched >= o->count : t >= t_end) {
				stopping = 1;
				if (o->count)
					r->seconds = t - t0;
			}
		}
		if (stopping || launched - completed >= o->queue) {
			int k = (int)(completed % o->queue);
			float ms;

			if (launched == completed)
				break;
			CK(cudaEventSynchronize(stop[k]));
			CK(cudaEventElapsedTime(&ms, start[k], stop[k]));
			r->event_ms_sum += ms;
			completed++;
			if (!stopping || o->count)
				r->kernels++;
			if (o->gap_ms > 0 && !stopping) {
				struct timespec gap = {
					(time_t)(o->gap_ms / 1e3),
					(long)(fmod(o->gap_ms, 1e3) * 1e6) };

				nanosleep(&gap, NULL);
			}
			continue;
		}
		CK(cudaEventRecord(start[launched % o->queue], 0));
		launch(o, o->iters);
		CK(cudaEventRecord(stop[launched % o->queue], 0));
		launched++;
	}
	CK(cudaGetLastError());
	r->wall_s = now_s() - t0;
	if (o->count)
		r->seconds = r->wall_s;
	r->end_unix = wall_unix();
	r->kernels_total = completed;
	for (int k = 0; k < o->queue; k++) {
		CK(cudaEventDestroy(start[k]));
		CK(cudaEventDestroy(stop[k]));
	}
}

/* Every element of the last launch's output, against the host's chain. */
static void verify(const struct options *o)
{
	size_t n = (size_t)o->blocks * o->threads;
	float *h = (float *)xmalloc(n * sizeof(float)), want;

	CK(cudaMemcpy(h, g_out, n * sizeof(float), cudaMemcpyDeviceToHost));
	want = expected_value(o->iters);
	for (size_t i = 0; i < n; i++)
		if (memcmp(&h[i], &want, sizeof(want)))
			die("wrong result: element %zu is %.9g, the FMA chain of %d iterations gives %.9g",
			    i, (double)h[i], o->iters, (double)want);
	free(h);
}

static void wait_for_go(void)
{
	char line[64];

	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		die("--wait-go: stdin closed before the start");
}

int main(int argc, char **argv)
{
	struct options o;
	struct lib_info li;
	struct dev_info di;
	struct result r;
	double kernel_ms = NAN;
	int sms = 0, per_sm = 0;

	g_prog = "pvgpu-fair";
	parse_args(&o, argc, argv);
	lib_identify(&li);
	device_open(o.co.device, &di);
	lib_identify_driver(&li);	/* the runtime has loaded it now */
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount,
				  o.co.device));
	CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fair_kernel,
							 o.threads, 0));
	if (!o.blocks)
		o.blocks = sms * (per_sm > 0 ? per_sm : 1);
	CK(cudaMalloc((void **)&g_out, (size_t)o.blocks * o.threads *
				       sizeof(float)));
	if (o.calibrate || !o.iters)
		kernel_ms = calibrate(&o);
	if (o.calibrate) {
		verify(&o);
		if (o.co.json) {
			printf("{");
			json_run_header(stdout, &li, &di);
			printf("\"iters\":%d,\"blocks\":%d,\"threads\":%d,"
			       "\"sms\":%d,\"blocks_per_sm\":%d,\"kernel_ms\":",
			       o.iters, o.blocks, o.threads, sms, per_sm);
			json_num(stdout, kernel_ms);
			printf("}\n");
		} else {
			table_run_header(&li, &di);
			printf("--iters %d --blocks %d --threads %d: %.3f ms per launch (%d SMs x %d blocks)\n",
			       o.iters, o.blocks, o.threads, kernel_ms, sms,
			       per_sm);
		}
		return EXIT_OK;
	}
	/* Warm-up: module load and first launches stay out of the timing. */
	launch(&o, o.iters);
	CK(cudaDeviceSynchronize());
	if (o.wait_go)
		wait_for_go();
	run_loop(&o, &r);
	verify(&o);

	if (o.co.json) {
		printf("{");
		json_run_header(stdout, &li, &di);
		printf("\"label\":");
		json_str(stdout, o.label);
		printf(",\"iters\":%d,\"blocks\":%d,\"threads\":%d,\"queue\":%d,"
		       "\"kernels\":%lld,\"kernels_total\":%lld,\"seconds\":",
		       o.iters, o.blocks, o.threads, o.queue, r.kernels,
		       r.kernels_total);
		json_num(stdout, r.seconds);
		printf(",\"wall_s\":");
		json_num(stdout, r.wall_s);
		printf(",\"event_kernel_s\":");
		json_num(stdout, r.event_ms_sum / 1e3);
		printf(",\"go_unix\":");
		json_num(stdout, r.go_unix);
		printf(",\"end_unix\":");
		json_num(stdout, r.end_unix);
		printf(",\"verified\":true}\n");
	} else {
		table_run_header(&li, &di);
		printf("%s%s%lld kernels in %.3f s (%lld launched in all, drained by %.3f s); "
		       "--iters %d --blocks %d --threads %d\n"
		       "cudaEvent time of the kernels: %.3f s (includes time the GPU gave other contexts meanwhile)\n",
		       o.label, *o.label ? ": " : "", r.kernels, r.seconds,
		       r.kernels_total, r.wall_s, o.iters, o.blocks, o.threads,
		       r.event_ms_sum / 1e3);
	}
	return EXIT_OK;
}
