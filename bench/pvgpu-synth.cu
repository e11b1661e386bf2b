/*
 * pvgpu-synth - the synthetic transfer/compute application.
 *
 * An application alternates synchronous cudaMemcpy transfers (sizes drawn
 * at random, seeded, from an interval) with a compute kernel.  The user says
 * what share of the time should go to transfers and what share to compute
 * (e.g. 10/90), the direction (h2d, d2h, or both = a round trip per step)
 * and the host memory (pinned or pageable).
 *
 * Calibration belongs to the native run: it measures the transfer time per
 * byte for each direction/memory pair and the kernel's time per loop
 * iteration, then makes a plan: for each configuration, how many transfers
 * (and so which sizes, from the seed) and how many kernel iterations per
 * launch, so that the run takes --seconds with the requested split.  The
 * plan is saved as JSON; the pvgpu run executes exactly that plan (same
 * sizes, same kernel work) and the comparison is the overhead of pvgpu
 * against native for each configuration.
 *
 * The same binary runs natively or through pvgpu (NVIDIA's runtime is
 * linked in); only LD_LIBRARY_PATH decides which libcuda.so.1 it loads (see
 * bench_common.h, --compare).
 */
#include "bench_common.h"

enum { DIR_H2D, DIR_D2H, DIR_BOTH, NDIRS };
enum { MEM_PINNED, MEM_PAGEABLE, NMEMS };

static const char *const dir_name[NDIRS] = { "h2d", "d2h", "both" };
static const char *const mem_name[NMEMS] = { "pinned", "pageable" };

#define MAX_RATIOS 16
#define MAX_CONFIGS (MAX_RATIOS * NDIRS * NMEMS)
#define MAX_STEPS 50000000LL
#define PLAN_VERSION 1

/* The compute kernel: a dependent FMA chain per element of a buffer. */
#define KERNEL_ELEMS (1 << 20)
#define KERNEL_THREADS 256
#define KERNEL_A 0.999f		/* x -> a*x + b converges to 1: stays finite */
#define KERNEL_B 0.001f

__global__ void fma_kernel(float *buf, int n, int iters, float a, float b)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n) {
		float x = buf[i];

		for (int k = 0; k < iters; k++)
			x = fmaf(x, a, b);
		buf[i] = x;	/* keeps the loop from being optimised away */
	}
}

/* One configuration: what the plan says and what the run measured. */
struct config {
	char key[64];			/* "h2d pinned 10/90" */
	char ratio[24];			/* as the user wrote it */
	int dir, mem, index;
	double xfer_share;		/* planned share of time in transfers */
	long long steps;		/* transfers (round trips for "both") */
	uint64_t total_bytes;		/* sum of the step sizes */
	int iters;			/* kernel iterations per launch; 0: none */
	double seconds_per_byte;	/* calibrated, per byte of a step */
	double predicted_s;
	/* measured */
	double seconds;			/* wall clock of the whole loop */
	double kernel_s;		/* one launch, cudaEvent time */
};

struct plan {
	double seconds;
	uint64_t seed, size_min, size_max;
	double seconds_per_iter;	/* kernel, per loop iteration */
	double launch_s;		/* kernel with 1 iteration, launch+sync */
	char calibrated_with[PATH_MAX];
	int calibrated_pvgpu;	/* calibrated over pvgpu's libcuda.so.1 */
	int nconfigs;
	struct config cfg[MAX_CONFIGS];
};

struct options {
	struct common_opts co;
	char ratios[MAX_RATIOS][24];
	double shares[MAX_RATIOS];
	int nratios;
	int dirs[NDIRS];
	int mems[NMEMS];
	uint64_t size_min, size_max;
	uint64_t seed;
	double seconds;
	const char *plan_in;
	const char *plan_out;
};

/* Host and device buffers for one memory kind, sized for the largest step. */
struct bufs {
	unsigned char *src;	/* host: what H2D sends; what D2H must return */
	unsigned char *dst;	/* host: where D2H lands */
	int allocated;
};

static unsigned char *g_dev;		/* device: size_max bytes */
static float *g_kbuf;			/* device: the kernel's buffer */
static unsigned char *g_scratch;	/* host: read-back for verification */
static struct bufs g_bufs[NMEMS];

static void usage(void)
{
	printf(
"usage: %s [options]\n"
"Synthetic application: random-size synchronous transfers alternating with a\n"
"compute kernel, at a transfer/compute time split calibrated natively.\n"
"  --ratio LIST         transfer/compute time shares (default\n"
"                       10/90,35/65,65/35,90/10)\n"
"  --dir LIST           h2d, d2h, both (a round trip per step); a comma\n"
"                       list runs each (default h2d)\n"
"  --memory LIST        pinned, pageable, or both (default pinned)\n"
"  --size MIN-MAX       transfer sizes drawn uniformly from this interval,\n"
"                       in steps of 8 bytes (default 32M-64M; at least 16)\n"
"  --seed N             seed for the sizes (default 1)\n"
"  --seconds S          native run time per configuration (default 2.5)\n"
"  --plan-out FILE      write the calibrated plan to FILE\n"
"  --plan FILE          run FILE's plan without calibrating (its sizes,\n"
"                       ratios, directions and memory replace the options)\n"
"With --compare the native run calibrates and the pvgpu run replays its plan.\n"
COMMON_OPTIONS_HELP, g_prog);
}

/* "10/90": two non-negative numbers, not both zero. */
static void parse_ratios(struct options *o, const char *arg)
{
	char *copy = xstrdup(arg), *tok, *save = NULL;

	o->nratios = 0;
	for (tok = strtok_r(copy, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		double x, y;
		char *end, *slash = strchr(tok, '/');

		if (!slash)
			usage_error("--ratio: '%s' is not TRANSFER/COMPUTE "
				    "(e.g. 10/90)", tok);
		x = strtod(tok, &end);
		if (end != slash)
			usage_error("--ratio: '%s' is not TRANSFER/COMPUTE", tok);
		y = strtod(slash + 1, &end);
		if (*end || end == slash + 1 || !(x >= 0) || !(y >= 0) ||
		    x + y <= 0 || !isfinite(x + y))
			usage_error("--ratio: '%s' is not TRANSFER/COMPUTE", tok);
		if (o->nratios == MAX_RATIOS)
			usage_error("--ratio: at most %d ratios", MAX_RATIOS);
		if (strlen(tok) >= sizeof(o->ratios[0]))
			usage_error("--ratio: '%s' is too long", tok);
		strcpy(o->ratios[o->nratios], tok);
		o->shares[o->nratios++] = x / (x + y);
	}
	free(copy);
	if (!o->nratios)
		usage_error("--ratio: no ratio given");
}

/* A comma list of names; "both" (for --memory) means all of them. */
static void parse_list(const char *opt, const char *arg, int *flags, int n,
		       const char *const *names, int both_is_all,
		       const char *choices)
{
	char *copy = xstrdup(arg), *tok, *save = NULL;
	int k, any = 0;

	for (k = 0; k < n; k++)
		flags[k] = 0;
	for (tok = strtok_r(copy, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		int found = 0;

		for (k = 0; k < n; k++)
			if (!strcmp(tok, names[k]) ||
			    (both_is_all && !strcmp(tok, "both")))
				flags[k] = found = 1;
		if (!found)
			usage_error("%s: '%s' is not one of %s", opt, tok,
				    choices);
		any = 1;
	}
	free(copy);
	if (!any)
		usage_error("%s: nothing chosen", opt);
}

static void parse_size_range(struct options *o, const char *arg)
{
	char *copy = xstrdup(arg);
	char *dash = strchr(copy, '-');

	if (dash)
		*dash = '\0';
	if (parse_size(copy, &o->size_min) ||
	    parse_size(dash ? dash + 1 : copy, &o->size_max))
		usage_error("--size: '%s' is not MIN-MAX (e.g. 32M-64M)", arg);
	free(copy);
	if (o->size_min < 16 || o->size_max < o->size_min ||
	    o->size_max > (4ULL << 30))
		usage_error("--size: need 16 <= MIN <= MAX <= 4G, not '%s'", arg);
}

static void parse_args(struct options *o, int argc, char **argv)
{
	int i, size_given = 0, seconds_given = 0;

	memset(o, 0, sizeof(*o));
	parse_ratios(o, "10/90,35/65,65/35,90/10");
	o->dirs[DIR_H2D] = 1;
	o->mems[MEM_PINNED] = 1;
	o->size_min = 32ULL << 20;
	o->size_max = 64ULL << 20;
	o->seed = 1;
	o->seconds = 2.5;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage();
			exit(EXIT_OK);
		} else if (common_option(&i, argc, argv, &o->co)) {
			continue;
		} else if (!strcmp(a, "--ratio")) {
			parse_ratios(o, opt_value(&i, argc, argv));
		} else if (!strcmp(a, "--dir")) {
			parse_list(a, opt_value(&i, argc, argv), o->dirs, NDIRS,
				   dir_name, 0, "h2d, d2h, both");
		} else if (!strcmp(a, "--memory")) {
			parse_list(a, opt_value(&i, argc, argv), o->mems, NMEMS,
				   mem_name, 1, "pinned, pageable, both");
		} else if (!strcmp(a, "--size")) {
			parse_size_range(o, opt_value(&i, argc, argv));
			size_given = 1;
		} else if (!strcmp(a, "--seed")) {
			/* Below 2^53: plans store it as a JSON number. */
			o->seed = (uint64_t)parse_count(a, opt_value(&i, argc, argv),
							0, (1LL << 53) - 1);
		} else if (!strcmp(a, "--seconds")) {
			o->seconds = parse_real(a, opt_value(&i, argc, argv),
						0.01, 3600);
			seconds_given = 1;
		} else if (!strcmp(a, "--plan")) {
			o->plan_in = opt_value(&i, argc, argv);
		} else if (!strcmp(a, "--plan-out")) {
			o->plan_out = opt_value(&i, argc, argv);
		} else {
			usage_error("unknown option '%s'", a);
		}
	}
	if (o->co.quick && !size_given) {
		o->size_min = 1ULL << 20;
		o->size_max = 4ULL << 20;
	}
	if (o->co.quick && !seconds_given)
		o->seconds = 0.3;
	common_options_done(&o->co);
}

/* ---- sizes ---------------------------------------------------------------- */

/* The generator of configuration `index`'s sizes: splitmix64 over a seed. */
static uint64_t config_rng_start(uint64_t seed, int index)
{
	return mix64(seed * 0x2545f4914f6cdd1dULL + (uint64_t)index + 1);
}

/* Next size: uniform over [min, max] in steps of 8 bytes. */
static uint64_t next_size(uint64_t *state, uint64_t min, uint64_t max)
{
	uint64_t r = mix64(*state);

	*state += 0x9e3779b97f4a7c15ULL;
	return min + (r % ((max - min) / 8 + 1)) * 8;
}

/* All step sizes of a configuration (the plan stores only how many). */
static uint64_t *config_sizes(const struct plan *p, const struct config *c)
{
	uint64_t *sizes = (uint64_t *)xmalloc(c->steps * sizeof(uint64_t));
	uint64_t st = config_rng_start(p->seed, c->index);
	long long i;

	for (i = 0; i < c->steps; i++)
		sizes[i] = next_size(&st, p->size_min, p->size_max);
	return sizes;
}

/* ---- buffers -------------------------------------------------------------- */

static struct bufs *bufs_for(const struct plan *p, int mem)
{
	struct bufs *b = &g_bufs[mem];

	if (!b->allocated) {
		if (mem == MEM_PINNED) {
			CK(cudaMallocHost((void **)&b->src, p->size_max));
			CK(cudaMallocHost((void **)&b->dst, p->size_max));
		} else {
			b->src = (unsigned char *)xmalloc(p->size_max);
			b->dst = (unsigned char *)xmalloc(p->size_max);
		}
		b->allocated = 1;
	}
	return b;
}

/*
 * Per-step checks, cheap enough to leave in the timed loop (three 8-byte
 * words per step, the same work natively and through pvgpu):
 *   - H2D steps stamp the source's first and last word with the step number,
 *     so each transfer carries different bytes;
 *   - D2H steps poison three words of the destination (first, middle, last)
 *     with the complement of what must arrive, and check them afterwards.
 * After the loop the whole last transfer is compared byte for byte.
 */
static void put_word(unsigned char *p, uint64_t off, uint64_t w)
{
	memcpy(p + off, &w, 8);
}

static uint64_t get_word(const unsigned char *p, uint64_t off)
{
	uint64_t w;

	memcpy(&w, p + off, 8);
	return w;
}

static void do_step(const struct config *c, struct bufs *b, long long i,
		    uint64_t size)
{
	uint64_t off[3] = { 0, (size / 2) & ~7ULL, size - 8 };
	int k;

	if (c->dir == DIR_H2D || c->dir == DIR_BOTH) {
		put_word(b->src, 0, mix64((uint64_t)i ^ 0x57a7));
		put_word(b->src, size - 8, mix64((uint64_t)i ^ 0xe9d));
		CK(cudaMemcpy(g_dev, b->src, size, cudaMemcpyHostToDevice));
	}
	if (c->dir == DIR_D2H || c->dir == DIR_BOTH) {
		for (k = 0; k < 3; k++)
			put_word(b->dst, off[k], ~get_word(b->src, off[k]));
		CK(cudaMemcpy(b->dst, g_dev, size, cudaMemcpyDeviceToHost));
		for (k = 0; k < 3; k++)
			if (get_word(b->dst, off[k]) != get_word(b->src, off[k]))
				die("data mismatch: %s, step %lld (%llu bytes): "
				    "wrong bytes at offset %llu", c->key, i,
				    (unsigned long long)size,
				    (unsigned long long)off[k]);
	}
}

/* Fresh pattern in the source; the device starts with it too (for D2H). */
static void prepare(const struct plan *p, const struct config *c,
		    struct bufs *b)
{
	pattern_fill(b->src, p->size_max, pattern_tag(p->size_max,
						      (uint64_t)c->index));
	memset(b->dst, 0x5a, p->size_max);
	if (c->dir != DIR_H2D)
		CK(cudaMemcpy(g_dev, b->src, p->size_max,
			      cudaMemcpyHostToDevice));
	CK(cudaDeviceSynchronize());
}

static void launch_kernel(int iters)
{
	fma_kernel<<<(KERNEL_ELEMS + KERNEL_THREADS - 1) / KERNEL_THREADS,
		     KERNEL_THREADS>>>(g_kbuf, KERNEL_ELEMS, iters, KERNEL_A,
				       KERNEL_B);
}

/* ---- calibration (the native run) ---------------------------------------- */

/* Median wall time of `reps` launches of `iters` iterations, each synced. */
static double time_kernel_wall(int iters, int reps)
{
	double t[16], t0;
	int r;

	for (r = 0; r < reps && r < 16; r++) {
		t0 = now_s();
		launch_kernel(iters);
		CK(cudaDeviceSynchronize());
		t[r] = now_s() - t0;
	}
	CK(cudaGetLastError());
	return percentile(t, (size_t)r, 50.0);
}

/* Time per loop iteration and the cost of a minimal launch. */
static void calibrate_kernel(struct plan *p, int quick)
{
	double target = quick ? 0.005 : 0.02, t1, tn;
	int n = 1024;

	time_kernel_wall(1, 2);	/* warm-up: module load, clocks */
	t1 = time_kernel_wall(1, 5);
	while (time_kernel_wall(n, 1) < target && n < (1 << 29))
		n *= 2;
	tn = time_kernel_wall(n, 3);
	p->launch_s = t1;
	p->seconds_per_iter = (tn - t1) / (n - 1);
	if (!(p->seconds_per_iter > 0))
		die("kernel calibration failed: %d iterations took %g s, 1 "
		    "took %g s", n, tn, t1);
}

/*
 * Seconds per byte of a step of this direction and memory kind, measured
 * with the same step code the run uses (sizes from their own seed).
 */
static double calibrate_transfer(struct plan *p, struct config *c, int quick)
{
	struct bufs *b = bufs_for(p, c->mem);
	uint64_t st = config_rng_start(p->seed ^ 0xca11b8a7e, c->index);
	uint64_t bytes = 0, s;
	double budget = quick ? 0.05 : 0.25, t0, t;
	long long i;

	prepare(p, c, b);
	for (i = 0; i < 2; i++)		/* warm-up */
		do_step(c, b, i, next_size(&st, p->size_min, p->size_max));
	CK(cudaDeviceSynchronize());
	t0 = now_s();
	for (i = 0;; i++) {
		s = next_size(&st, p->size_min, p->size_max);
		do_step(c, b, i, s);
		bytes += s;
		t = now_s() - t0;
		if ((t >= budget && i >= 3) || i >= 100000)
			break;
	}
	return t / (double)bytes;
}

/*
 * The plan for one configuration: steps until the predicted transfer time
 * reaches its share of --seconds, then the kernel iterations per launch
 * that fill the compute share, spread evenly over the steps.
 */
static void plan_config(struct plan *p, struct config *c)
{
	double xfer_target = p->seconds * c->xfer_share;
	double compute_target = p->seconds - xfer_target;
	double per_launch, iters;
	uint64_t st = config_rng_start(p->seed, c->index);

	c->steps = 0;
	c->total_bytes = 0;
	do {
		c->total_bytes += next_size(&st, p->size_min, p->size_max);
		c->steps++;
	} while ((double)c->total_bytes * c->seconds_per_byte < xfer_target &&
		 c->steps < MAX_STEPS);
	c->iters = 0;
	if (compute_target > 0) {
		per_launch = compute_target / (double)c->steps;
		iters = (per_launch - p->launch_s) / p->seconds_per_iter;
		c->iters = iters < 1 ? 1 : iters > INT_MAX ? INT_MAX
							 : (int)llround(iters);
	}
	c->predicted_s = (double)c->total_bytes * c->seconds_per_byte +
		(c->iters ? (double)c->steps *
		 (p->launch_s + c->iters * p->seconds_per_iter) : 0.0);
}

static void make_plan(struct plan *p, const struct options *o)
{
	double spb[NDIRS][NMEMS];
	int r, d, m, need_kernel = 0;
	struct lib_info li;

	memset(p, 0, sizeof(*p));
	p->seconds = o->seconds;
	p->seed = o->seed;
	p->size_min = o->size_min;
	p->size_max = o->size_max;
	lib_identify(&li);
	snprintf(p->calibrated_with, sizeof(p->calibrated_with), "%s",
		 li.driver[0] ? li.driver : "?");
	p->calibrated_pvgpu = li.driver_pvgpu;
	for (m = 0; m < NMEMS; m++)
		for (d = 0; d < NDIRS; d++)
			for (r = 0; r < o->nratios; r++) {
				struct config *c = &p->cfg[p->nconfigs];

				if (!o->dirs[d] || !o->mems[m])
					continue;
				c->index = p->nconfigs++;
				c->dir = d;
				c->mem = m;
				c->xfer_share = o->shares[r];
				snprintf(c->ratio, sizeof(c->ratio), "%s",
					 o->ratios[r]);
				snprintf(c->key, sizeof(c->key), "%s %s %s",
					 dir_name[d], mem_name[m], o->ratios[r]);
				need_kernel |= c->xfer_share < 1.0;
			}
	if (need_kernel)
		calibrate_kernel(p, o->co.quick);
	/* One transfer calibration per direction and memory kind. */
	for (d = 0; d < NDIRS; d++)
		for (m = 0; m < NMEMS; m++)
			spb[d][m] = 0;
	for (r = 0; r < p->nconfigs; r++) {
		struct config *c = &p->cfg[r];

		if (spb[c->dir][c->mem] == 0)
			spb[c->dir][c->mem] = calibrate_transfer(p, c,
								 o->co.quick);
		c->seconds_per_byte = spb[c->dir][c->mem];
		plan_config(p, c);
	}
}

/* ---- plan files --------------------------------------------------------- */

static void write_plan(const struct plan *p, const char *path)
{
	FILE *f = fopen(path, "w");
	int i;

	if (!f)
		die("--plan-out %s: %s", path, strerror(errno));
	fprintf(f, "{\"benchmark\":\"pvgpu-synth\",\"plan_version\":%d,"
		"\"seconds\":", PLAN_VERSION);
	json_num(f, p->seconds);
	fprintf(f, ",\"seed\":%llu,\"size_min\":%llu,\"size_max\":%llu,"
		"\"calibrated_with\":{\"path\":", (unsigned long long)p->seed,
		(unsigned long long)p->size_min,
		(unsigned long long)p->size_max);
	json_str(f, p->calibrated_with);
	fprintf(f, ",\"driver_pvgpu\":%s},\"kernel\":{\"elements\":%d,"
		"\"threads\":%d,\"seconds_per_iter\":",
		p->calibrated_pvgpu ? "true" : "false", KERNEL_ELEMS,
		KERNEL_THREADS);
	json_num(f, p->seconds_per_iter);
	fprintf(f, ",\"launch_s\":");
	json_num(f, p->launch_s);
	fprintf(f, "},\"configs\":[");
	for (i = 0; i < p->nconfigs; i++) {
		const struct config *c = &p->cfg[i];

		fprintf(f, "%s\n{\"key\":", i ? "," : "");
		json_str(f, c->key);
		fprintf(f, ",\"index\":%d,\"dir\":\"%s\",\"memory\":\"%s\","
			"\"ratio\":", c->index, dir_name[c->dir],
			mem_name[c->mem]);
		json_str(f, c->ratio);
		fprintf(f, ",\"xfer_share\":");
		json_num(f, c->xfer_share);
		fprintf(f, ",\"steps\":%lld,\"total_bytes\":%llu,"
			"\"iters_per_launch\":%d,\"seconds_per_byte\":",
			c->steps, (unsigned long long)c->total_bytes, c->iters);
		json_num(f, c->seconds_per_byte);
		fprintf(f, ",\"predicted_s\":");
		json_num(f, c->predicted_s);
		fprintf(f, "}");
	}
	fprintf(f, "\n]}\n");
	if (fclose(f))
		die("--plan-out %s: %s", path, strerror(errno));
}

static int name_index(const char *s, const char *const *names, int n)
{
	int k;

	for (k = 0; s && k < n; k++)
		if (!strcmp(s, names[k]))
			return k;
	return -1;
}

/* Whole number in [min, max], or die naming the plan field. */
static double plan_int(const char *path, const struct jval *o,
		       const char *field, double min, double max)
{
	double v = jnum(o, field);

	if (!(v >= min && v <= max) || v != floor(v))
		die("plan %s: '%s' is missing or out of range", path, field);
	return v;
}

/*
 * Load a plan written by --plan-out and check it: the sizes are generated
 * again from the seed and must add up to the plan's total, so both runs
 * provably move the same bytes.
 */
static void read_plan(struct plan *p, const char *path)
{
	char *text = read_file(path);
	struct jval *root;
	const struct jval *cfgs, *kern, *cal;
	int i;

	if (!text)
		die("--plan %s: %s", path, strerror(errno));
	root = json_parse(text);
	if (!root || root->type != J_OBJ)
		die("plan %s: not a JSON object", path);
	if (jnum(root, "plan_version") != PLAN_VERSION)
		die("plan %s: plan_version is not %d", path, PLAN_VERSION);
	memset(p, 0, sizeof(*p));
	p->seconds = jnum(root, "seconds");
	p->seed = (uint64_t)plan_int(path, root, "seed", 0, 9007199254740991.0);
	p->size_min = (uint64_t)plan_int(path, root, "size_min", 16,
					 4294967296.0);
	p->size_max = (uint64_t)plan_int(path, root, "size_max",
					 (double)p->size_min, 4294967296.0);
	kern = jget(root, "kernel");
	p->seconds_per_iter = jnum(kern, "seconds_per_iter");
	p->launch_s = jnum(kern, "launch_s");
	if (jnum(kern, "elements") != KERNEL_ELEMS ||
	    jnum(kern, "threads") != KERNEL_THREADS)
		die("plan %s: made for a different kernel", path);
	cal = jget(root, "calibrated_with");
	snprintf(p->calibrated_with, sizeof(p->calibrated_with), "%s",
		 jstr(cal, "path") ? jstr(cal, "path") : "?");
	/* Plans written before the runtime was linked in say "pvgpu_shim". */
	p->calibrated_pvgpu = lib_served_by_pvgpu(cal);
	cfgs = jget(root, "configs");
	if (!cfgs || cfgs->type != J_ARR || cfgs->n < 1 ||
	    cfgs->n > MAX_CONFIGS)
		die("plan %s: no usable 'configs'", path);
	p->nconfigs = cfgs->n;
	for (i = 0; i < cfgs->n; i++) {
		const struct jval *o = &cfgs->items[i];
		struct config *c = &p->cfg[i];
		uint64_t *sizes, sum = 0;
		long long k;

		c->index = (int)plan_int(path, o, "index", 0, 1e6);
		c->dir = name_index(jstr(o, "dir"), dir_name, NDIRS);
		c->mem = name_index(jstr(o, "memory"), mem_name, NMEMS);
		if (c->dir < 0 || c->mem < 0 || !jstr(o, "key") ||
		    !jstr(o, "ratio"))
			die("plan %s: configuration %d is incomplete", path, i);
		snprintf(c->key, sizeof(c->key), "%s", jstr(o, "key"));
		snprintf(c->ratio, sizeof(c->ratio), "%s", jstr(o, "ratio"));
		c->xfer_share = jnum(o, "xfer_share");
		c->steps = (long long)plan_int(path, o, "steps", 1,
					       (double)MAX_STEPS);
		c->total_bytes = (uint64_t)plan_int(path, o, "total_bytes", 1,
						    9007199254740991.0);
		c->iters = (int)plan_int(path, o, "iters_per_launch", 0,
					 INT_MAX);
		c->seconds_per_byte = jnum(o, "seconds_per_byte");
		c->predicted_s = jnum(o, "predicted_s");
		sizes = config_sizes(p, c);
		for (k = 0; k < c->steps; k++)
			sum += sizes[k];
		free(sizes);
		if (sum != c->total_bytes)
			die("plan %s: '%s' sizes add up to %llu bytes here, "
			    "%llu in the plan", path, c->key,
			    (unsigned long long)sum,
			    (unsigned long long)c->total_bytes);
	}
	free(text);
}

/* ---- the run ---------------------------------------------------------------- */

/* Median cudaEvent time of one launch of the configuration's kernel. */
static double kernel_event_time(int iters)
{
	cudaEvent_t a, b;
	double t[3];
	float ms;
	int r;

	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	for (r = 0; r < 3; r++) {
		CK(cudaEventRecord(a, 0));
		launch_kernel(iters);
		CK(cudaEventRecord(b, 0));
		CK(cudaEventSynchronize(b));
		CK(cudaEventElapsedTime(&ms, a, b));
		t[r] = ms * 1e-3;
	}
	CK(cudaGetLastError());
	CK(cudaEventDestroy(a));
	CK(cudaEventDestroy(b));
	return percentile(t, 3, 50.0);
}

static void run_config(const struct plan *p, struct config *c)
{
	struct bufs *b = bufs_for(p, c->mem);
	uint64_t *sizes = config_sizes(p, c);
	uint64_t last = sizes[c->steps - 1];
	long long i, bad;
	double t0;

	prepare(p, c, b);
	t0 = now_s();
	for (i = 0; i < c->steps; i++) {
		do_step(c, b, i, sizes[i]);
		if (c->iters)
			launch_kernel(c->iters);
	}
	CK(cudaDeviceSynchronize());
	c->seconds = now_s() - t0;
	CK(cudaGetLastError());

	/* The whole last transfer, byte for byte (untimed). */
	if (c->dir == DIR_H2D) {
		memset(g_scratch, 0xa5, last);
		CK(cudaMemcpy(g_scratch, g_dev, last, cudaMemcpyDeviceToHost));
		bad = first_difference(g_scratch, b->src, last);
	} else {
		bad = first_difference(b->dst, b->src, last);
	}
	if (bad >= 0)
		die("data mismatch: %s, last step (%llu bytes): first bad byte "
		    "at offset %lld", c->key, (unsigned long long)last, bad);
	c->kernel_s = c->iters ? kernel_event_time(c->iters) : 0.0;
	free(sizes);
}

/* Share of the run not spent in the kernel (GPU time of its launches). */
static double achieved_share(const struct config *c)
{
	double compute = c->kernel_s * (double)c->steps;
	double share = c->seconds > 0 ? 1.0 - compute / c->seconds : NAN;

	return share < 0 ? 0 : share;
}

/* MB/s of the transfers alone: bytes moved / (run time - kernel time). */
static double xfer_mbps(const struct config *c)
{
	double bytes = (double)c->total_bytes * (c->dir == DIR_BOTH ? 2 : 1);
	double t = c->seconds - c->kernel_s * (double)c->steps;

	return t > 0 ? bytes / t / 1e6 : NAN;
}

static void print_json(const struct plan *p, const struct lib_info *li,
		       const struct dev_info *di, int calibrated,
		       const char *plan_path)
{
	int i;

	printf("{");
	json_run_header(stdout, li, di);
	printf("\"calibrated_here\":%s,\"plan\":", calibrated ? "true" : "false");
	if (plan_path)
		json_str(stdout, plan_path);
	else
		printf("null");
	printf(",\"calibrated_with\":");
	json_str(stdout, p->calibrated_with);
	printf(",\"seed\":%llu,\"size_min\":%llu,\"size_max\":%llu,"
	       "\"kernel_seconds_per_iter\":", (unsigned long long)p->seed,
	       (unsigned long long)p->size_min, (unsigned long long)p->size_max);
	json_num(stdout, p->seconds_per_iter);
	printf(",\"results\":[");
	for (i = 0; i < p->nconfigs; i++) {
		const struct config *c = &p->cfg[i];

		printf("%s{\"key\":", i ? "," : "");
		json_str(stdout, c->key);
		printf(",\"dir\":\"%s\",\"memory\":\"%s\",\"ratio\":",
		       dir_name[c->dir], mem_name[c->mem]);
		json_str(stdout, c->ratio);
		printf(",\"steps\":%lld,\"bytes_moved\":%llu,"
		       "\"iters_per_launch\":%d,\"xfer_share_planned\":",
		       c->steps, (unsigned long long)c->total_bytes *
		       (c->dir == DIR_BOTH ? 2 : 1), c->iters);
		json_num(stdout, c->xfer_share);
		printf(",\"xfer_share_achieved\":");
		json_num(stdout, achieved_share(c));
		printf(",\"predicted_s\":");
		json_num(stdout, c->predicted_s);
		printf(",\"seconds\":");
		json_num(stdout, c->seconds);
		printf(",\"kernel_s\":");
		json_num(stdout, c->kernel_s);
		printf(",\"xfer_mbps\":");
		json_num(stdout, xfer_mbps(c));
		printf(",\"verified\":true}");
	}
	printf("]}\n");
}

static void print_table(const struct plan *p, int calibrated)
{
	char lo[32], hi[32];
	int i;

	printf("sizes %s-%s, seed %llu; plan calibrated %s (%s)\n",
	       fmt_size(p->size_min, lo, sizeof(lo)),
	       fmt_size(p->size_max, hi, sizeof(hi)),
	       (unsigned long long)p->seed, calibrated ? "in this run" :
	       "elsewhere", p->calibrated_with);
	printf("%-24s %8s %9s %12s %9s %9s %18s %10s\n", "config", "steps",
	       "GB moved", "iters/launch", "seconds", "planned",
	       "xfer share plan/run", "xfer MB/s");
	for (i = 0; i < p->nconfigs; i++) {
		const struct config *c = &p->cfg[i];

		printf("%-24s %8lld %9.2f %12d %9.3f %9.3f %8.1f%% /%6.1f%% "
		       "%10.0f\n", c->key, c->steps,
		       (double)c->total_bytes * (c->dir == DIR_BOTH ? 2 : 1) / 1e9,
		       c->iters, c->seconds, c->predicted_s,
		       c->xfer_share * 100, achieved_share(c) * 100,
		       xfer_mbps(c));
	}
}

static int run_here(const struct options *o)
{
	static struct plan p;
	struct lib_info li;
	struct dev_info di;
	int i;

	lib_identify(&li);
	if (o->plan_in)
		read_plan(&p, o->plan_in);	/* before any GPU work */
	device_open(o->co.device, &di);
	lib_identify_driver(&li);	/* the runtime has loaded it now */
	CK(cudaMalloc((void **)&g_kbuf, KERNEL_ELEMS * sizeof(float)));
	CK(cudaMemset(g_kbuf, 0, KERNEL_ELEMS * sizeof(float)));
	if (!o->plan_in) {
		/* make_plan() needs the device buffer for its transfers. */
		CK(cudaMalloc((void **)&g_dev, o->size_max));
		make_plan(&p, o);
		if (o->plan_out)
			write_plan(&p, o->plan_out);
	} else {
		CK(cudaMalloc((void **)&g_dev, p.size_max));
	}
	g_scratch = (unsigned char *)xmalloc(p.size_max);
	for (i = 0; i < p.nconfigs; i++)
		run_config(&p, &p.cfg[i]);

	if (o->co.json) {
		print_json(&p, &li, &di, !o->plan_in,
			   o->plan_in ? o->plan_in : o->plan_out);
	} else {
		table_run_header(&li, &di);
		print_table(&p, !o->plan_in);
	}
	return EXIT_OK;
}

/* ---- --compare ------------------------------------------------------------ */

/* A temporary plan file of --compare, removed however the parent exits. */
static char g_tmp_plan[PATH_MAX];

static void remove_tmp_plan(void)
{
	if (g_tmp_plan[0])
		unlink(g_tmp_plan);
}

static int run_compare(struct options *o, int argc, char **argv)
{
	static const struct cmp_field fields[] = {
		{ "seconds", "seconds", 1, 1 },
		{ "xfer_mbps", "xfer MB/s", 0, 0 },
		{ "xfer_share_achieved", "xfer share", 0, 0 },
	};
	static const char *const drop_valued[] = { "--plan", "--plan-out", NULL };
	struct compare_runs cs;
	struct argvec nargs, pargs;
	const char *plan = o->plan_in ? o->plan_in : o->plan_out;
	int fd;

	compare_resolve_libdirs(&o->co);
	if (!plan) {
		const char *dir = getenv("TMPDIR");

		snprintf(g_tmp_plan, sizeof(g_tmp_plan),
			 "%s/pvgpu-synth-plan-XXXXXX", dir && *dir ? dir : "/tmp");
		fd = mkstemp(g_tmp_plan);
		if (fd < 0)
			die("cannot create a plan file %s: %s", g_tmp_plan,
			    strerror(errno));
		close(fd);
		atexit(remove_tmp_plan);
		plan = g_tmp_plan;
	}
	memset(&nargs, 0, sizeof(nargs));
	memset(&pargs, 0, sizeof(pargs));
	child_args(&nargs, argc, argv, NULL, drop_valued);
	child_args(&pargs, argc, argv, NULL, drop_valued);
	/* The native run calibrates (unless a plan was given); pvgpu replays. */
	argv_push(&nargs, o->plan_in ? "--plan" : "--plan-out");
	argv_push(&nargs, plan);
	argv_push(&pargs, "--plan");
	argv_push(&pargs, plan);

	/* Every later native run replays the plan too, as pvgpu's do. */
	compare_run_all(&cs, &o->co, nargs.v, pargs.v);

	if (o->co.json) {
		compare_json(fields, 3, &cs);
		printf("}\n");
	} else {
		compare_table(fields, 3, &cs);
		if (cs.pairs > 1)
			printf("(the same plan in every run: calibrated by the "
			       "first native run, replayed by the others)\n");
		else
			printf("(the same plan in both runs: calibrated natively, "
			       "then replayed through pvgpu)\n");
	}
	compare_runs_free(&cs);
	argv_free(&nargs);
	argv_free(&pargs);
	return EXIT_OK;
}

int main(int argc, char **argv)
{
	struct options o;

	g_prog = "pvgpu-synth";
	parse_args(&o, argc, argv);
	if (o.co.compare)
		return run_compare(&o, argc, argv);
	return run_here(&o);
}
