/*
 * pvgpu-bandwidth - the bandwidthTest matrix: host-to-device and
 * device-to-host, pinned (cudaMallocHost) and pageable (malloc) host memory,
 * over a shmoo of sizes, in MB/s (1 MB = 1e6 bytes).
 *
 * Each cell times N synchronous cudaMemcpy calls of one size with cudaEvents
 * on the legacy default stream (the figure bandwidthTest reports) and with
 * the wall clock around the same calls (what the application sees; through
 * pvgpu it also covers the socket or window).  The bytes are verified after
 * every cell.
 *
 * --socket-baseline also measures a plain AF_UNIX stream on this machine:
 * a forked writer sends 256 MiB in blocks of each size to a reader (best of
 * three trials).  pvgpu's unix:// transport is judged against that figure.
 *
 * The same binary runs natively or through pvgpu (NVIDIA's runtime is
 * linked in); only LD_LIBRARY_PATH decides which libcuda.so.1 it loads (see
 * bench_common.h, --compare).
 */
#include "bench_common.h"

#include <signal.h>
#include <sys/socket.h>

enum { DIR_H2D, DIR_D2H, NDIRS };
enum { MEM_PINNED, MEM_PAGEABLE, NMEMS };

static const char *const dir_name[NDIRS] = { "h2d", "d2h" };
static const char *const dir_title[NDIRS] = { "H2D", "D2H" };
static const char *const mem_name[NMEMS] = { "pinned", "pageable" };

#define MAX_SIZES 64
#define SOCKET_TOTAL (256ULL << 20)	/* bytes the socket baseline moves */

struct options {
	struct common_opts co;
	uint64_t sizes[MAX_SIZES];
	int nsizes;
	int reps;		/* 0: chosen per size */
	int dirs[NDIRS];	/* which directions to run */
	int mems[NMEMS];	/* which memory kinds to run */
	int socket_baseline;
	int socket_only;
	int interleave;		/* --interleave N: copies per turn */
};

struct cell {
	int valid;
	int reps;
	double event_s;		/* cudaEvent elapsed time for all reps */
	double wall_s;		/* wall clock for the same */
};

#define SOCKET_TRIALS 3		/* the best trial is the baseline */

struct socket_result {
	uint64_t block;
	uint64_t total;
	double seconds;			/* best (shortest) trial */
	double median_s;		/* median trial */
};

static void usage(void)
{
	printf(
"usage: %s [options]\n"
"Host<->device bandwidth of synchronous cudaMemcpy, natively or through pvgpu\n"
"(whichever libcuda.so.1 the loader finds), in MB/s (1 MB = 1e6 bytes).\n"
"  --sizes LIST         pow4 (default: 1K,4K,...,256M), pow2 (1K,2K,...,256M),\n"
"                       or a comma list of sizes such as 4K,1M,64M\n"
"  --reps N             copies per cell (default: about 1 GiB per cell,\n"
"                       8 to 1000 copies)\n"
"  --dir h2d|d2h|both   directions (default both)\n"
"  --memory pinned|pageable|both   host memory (default both)\n"
"  --socket-baseline    also measure a plain unix-socket stream: 256 MiB in\n"
"                       blocks of each size, best of 3 (with --compare:\n"
"                       done once, by the parent)\n"
"  --socket-only        only the socket baseline (needs no GPU)\n"
"  --interleave N       with --compare: each pair's native and pvgpu runs\n"
"                       go at the same time, taking turns on the GPU every\n"
"                       N copies of a cell (one untimed copy after each\n"
"                       turn); the machine's drift from second to second\n"
"                       then falls on both sides alike\n"
COMMON_OPTIONS_HELP, g_prog);
}

/* pow2/pow4 from 1 KiB to 256 MiB. */
static void sizes_geometric(struct options *o, int shift)
{
	uint64_t s;

	o->nsizes = 0;
	for (s = 1ULL << 10; s <= 256ULL << 20; s <<= shift)
		o->sizes[o->nsizes++] = s;
}

static void parse_sizes(struct options *o, const char *arg)
{
	char *copy, *tok, *save = NULL;

	if (!strcmp(arg, "pow4")) {
		sizes_geometric(o, 2);
		return;
	}
	if (!strcmp(arg, "pow2")) {
		sizes_geometric(o, 1);
		return;
	}
	o->nsizes = 0;
	copy = xstrdup(arg);
	for (tok = strtok_r(copy, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		uint64_t s;

		if (parse_size(tok, &s) || s == 0 || s > (4ULL << 30))
			usage_error("--sizes: '%s' is not a size from 1 byte "
				    "to 4G", tok);
		if (o->nsizes == MAX_SIZES)
			usage_error("--sizes: at most %d sizes", MAX_SIZES);
		o->sizes[o->nsizes++] = s;
	}
	free(copy);
	if (o->nsizes == 0)
		usage_error("--sizes: no sizes given");
}

static void parse_choice(const char *opt, const char *arg, int *flags,
			 int n, const char *const *names)
{
	int k, found = 0;

	for (k = 0; k < n; k++) {
		flags[k] = !strcmp(arg, "both") || !strcmp(arg, names[k]);
		found |= flags[k];
	}
	if (!found)
		usage_error("%s: '%s' is not %s, %s or both", opt, arg,
			    names[0], names[1]);
}

static void parse_args(struct options *o, int argc, char **argv)
{
	int i, sizes_given = 0;

	memset(o, 0, sizeof(*o));
	sizes_geometric(o, 2);
	o->dirs[DIR_H2D] = o->dirs[DIR_D2H] = 1;
	o->mems[MEM_PINNED] = o->mems[MEM_PAGEABLE] = 1;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage();
			exit(EXIT_OK);
		} else if (common_option(&i, argc, argv, &o->co)) {
			continue;
		} else if (!strcmp(a, "--sizes")) {
			parse_sizes(o, opt_value(&i, argc, argv));
			sizes_given = 1;
		} else if (!strcmp(a, "--reps")) {
			o->reps = (int)parse_count(a, opt_value(&i, argc, argv),
						   1, 1000000);
		} else if (!strcmp(a, "--dir")) {
			parse_choice(a, opt_value(&i, argc, argv), o->dirs,
				     NDIRS, dir_name);
		} else if (!strcmp(a, "--memory")) {
			parse_choice(a, opt_value(&i, argc, argv), o->mems,
				     NMEMS, mem_name);
		} else if (!strcmp(a, "--socket-baseline")) {
			o->socket_baseline = 1;
		} else if (!strcmp(a, "--socket-only")) {
			o->socket_baseline = o->socket_only = 1;
		} else if (!strcmp(a, "--interleave")) {
			o->interleave = (int)parse_count(a, opt_value(&i, argc, argv),
							 1, 1000000);
		} else {
			usage_error("unknown option '%s'", a);
		}
	}
	if (o->co.quick && !sizes_given) {
		o->nsizes = 3;
		o->sizes[0] = 4ULL << 10;
		o->sizes[1] = 1ULL << 20;
		o->sizes[2] = 16ULL << 20;
	}
	if (o->socket_only && o->co.compare)
		usage_error("--socket-only runs no CUDA, so --compare has "
			    "nothing to compare");
	interleave_option_done(o->interleave, &o->co);
	common_options_done(&o->co);
}

/* Copies per cell: fixed by --reps, else about 1 GiB (64 MiB if --quick),
 * at least 8 so one slow copy of a large size cannot dominate. */
static int reps_for(const struct options *o, uint64_t size)
{
	uint64_t target = o->co.quick ? 64ULL << 20 : 1ULL << 30;
	uint64_t r;

	if (o->reps)
		return o->reps;
	r = target / size;
	if (r < (o->co.quick ? 2u : 8u))
		r = o->co.quick ? 2 : 8;
	if (r > (o->co.quick ? 100u : 1000u))
		r = o->co.quick ? 100 : 1000;
	return (int)r;
}

/* Flip the first, middle and last byte (D2H must then rewrite them). */
static void poison_samples(unsigned char *p, uint64_t size)
{
	p[0] ^= 0xff;
	p[size / 2] ^= 0xff;
	p[size - 1] ^= 0xff;
}

/*
 * One cell of the matrix.  The host buffer holds the pattern for (size,
 * direction, memory kind); the copy is repeated `reps` times between two
 * events (with --interleave, `every` copies at a time between a pair of
 * events each, the times added up, the GPU handed to the other run and
 * back before each block after the first, then one untimed copy).
 * Afterwards the bytes are checked:
 *   H2D: the host buffer is poisoned, the device copy read back (untimed),
 *        and compared with the pattern;
 *   D2H: the device is loaded with the pattern first (untimed), the host
 *        buffer is poisoned before the warm-up copy and again at three
 *        bytes before the timed copies, which must therefore have
 *        rewritten it; then it is compared with the pattern.
 */
static void copy_once(void *host, void *dev, uint64_t size, int dir)
{
	if (dir == DIR_H2D)
		CK(cudaMemcpy(dev, host, size, cudaMemcpyHostToDevice));
	else
		CK(cudaMemcpy(host, dev, size, cudaMemcpyDeviceToHost));
}

static void measure_cell(void *host, void *dev, uint64_t size, int dir,
			 int mem, int reps, int every, struct cell *c)
{
	uint64_t tag = pattern_tag(size, (uint64_t)(dir * NMEMS + mem));
	cudaEvent_t start, stop;
	float ms = 0;
	double t0, t1;
	long long bad;
	int r, done, n;

	CK(cudaEventCreate(&start));
	CK(cudaEventCreate(&stop));
	pattern_fill(host, size, tag);
	if (dir == DIR_D2H) {
		CK(cudaMemcpy(dev, host, size, cudaMemcpyHostToDevice));
		memset(host, 0xa5, size);
		CK(cudaMemcpy(host, dev, size, cudaMemcpyDeviceToHost)); /* warm-up */
		/*
		 * Poison only a few bytes before the timed copies: a memset of
		 * the whole buffer would leave it dirty in the CPU caches, and
		 * the DMA into it would then run measurably slower.
		 */
		poison_samples((unsigned char *)host, size);
	} else {
		CK(cudaMemcpy(dev, host, size, cudaMemcpyHostToDevice)); /* warm-up */
	}
	CK(cudaDeviceSynchronize());

	c->event_s = c->wall_s = 0;
	for (done = 0; done < reps; done += n) {
		n = every > 0 && every < reps - done ? every : reps - done;
		if (bench_turn_point(done, every)) {
			copy_once(host, dev, size, dir);	/* back to speed */
			CK(cudaDeviceSynchronize());
			if (dir == DIR_D2H)
				poison_samples((unsigned char *)host, size);
		}
		t0 = now_s();
		CK(cudaEventRecord(start, 0));
		for (r = 0; r < n; r++)
			copy_once(host, dev, size, dir);
		CK(cudaEventRecord(stop, 0));
		CK(cudaEventSynchronize(stop));
		t1 = now_s();
		CK(cudaEventElapsedTime(&ms, start, stop));
		c->event_s += ms * 1e-3;
		c->wall_s += t1 - t0;
	}

	if (dir == DIR_H2D) {
		memset(host, 0x5a, size);
		CK(cudaMemcpy(host, dev, size, cudaMemcpyDeviceToHost));
	}
	bad = pattern_check(host, size, tag);
	if (bad >= 0)
		die("data mismatch: %s %s %llu bytes: first bad byte at offset "
		    "%lld", dir_name[dir], mem_name[mem],
		    (unsigned long long)size, bad);
	CK(cudaEventDestroy(start));
	CK(cudaEventDestroy(stop));
	c->valid = 1;
	c->reps = reps;
}

static double mbps(uint64_t size, int reps, double seconds)
{
	return seconds > 0 ? (double)size * reps / seconds / 1e6 : NAN;
}

/* ---- the unix-socket baseline ---------------------------------------- */

static void write_all(int fd, const void *buf, size_t len)
{
	const char *p = (const char *)buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			_exit(EXIT_RUNTIME);	/* the reader went away */
		p += n;
		len -= (size_t)n;
	}
}

/* Read exactly len bytes; 0 on success, -1 on EOF or error. */
static int read_all(int fd, void *buf, size_t len)
{
	char *p = (char *)buf;

	while (len > 0) {
		ssize_t n = read(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/*
 * A plain AF_UNIX stream (socketpair, default buffer sizes): a forked child
 * writes `total` bytes in blocks of `block` bytes with write(), the parent
 * reads them block by block with read().  The clock runs from the parent's
 * "go" byte to the last byte received.  The last block is checked against
 * the pattern afterwards, and the stream must end exactly after `total`.
 */
static void socket_measure(uint64_t block, struct socket_result *sr)
{
	uint64_t total = block >= SOCKET_TOTAL ? block
					       : SOCKET_TOTAL / block * block;
	uint64_t tag = pattern_tag(block, 0x50c4e7);
	uint64_t got;
	int sv[2], status;
	char go = 'g', extra;
	char *buf = (char *)xmalloc(block);
	double t0, t1;
	long long bad;
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		die("socketpair: %s", strerror(errno));
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		close(sv[0]);
		pattern_fill(buf, block, tag);
		if (read_all(sv[1], &go, 1))
			_exit(EXIT_RUNTIME);
		for (got = 0; got < total; got += block)
			write_all(sv[1], buf, block);
		close(sv[1]);
		_exit(EXIT_OK);
	}
	close(sv[1]);
	memset(buf, 0, block);
	t0 = now_s();
	if (write(sv[0], &go, 1) != 1)
		die("socket baseline: write: %s", strerror(errno));
	for (got = 0; got < total; got += block)
		if (read_all(sv[0], buf, block))
			die("socket baseline: stream ended after %llu of %llu "
			    "bytes", (unsigned long long)got,
			    (unsigned long long)total);
	t1 = now_s();
	if (read(sv[0], &extra, 1) != 0)
		die("socket baseline: more bytes than were sent");
	close(sv[0]);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			die("waitpid: %s", strerror(errno));
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		die("socket baseline: the writer failed");
	bad = pattern_check(buf, block, tag);
	if (bad >= 0)
		die("data mismatch: socket baseline, %llu-byte blocks: first "
		    "bad byte at offset %lld", (unsigned long long)block, bad);
	free(buf);
	sr->block = block;
	sr->total = total;
	sr->seconds = t1 - t0;
}

/*
 * Scheduling makes single socket trials noisy; the best of SOCKET_TRIALS
 * is what the machine can do, so it is the stricter baseline for pvgpu.
 */
static void socket_baseline(const struct options *o, struct socket_result *sr)
{
	struct socket_result trial;
	double t[SOCKET_TRIALS];
	int s, k;

	signal(SIGPIPE, SIG_IGN);
	for (s = 0; s < o->nsizes; s++) {
		for (k = 0; k < SOCKET_TRIALS; k++) {
			socket_measure(o->sizes[s], &trial);
			t[k] = trial.seconds;
		}
		sr[s] = trial;
		sr[s].median_s = percentile(t, SOCKET_TRIALS, 50.0);
		sr[s].seconds = t[0];	/* sorted by percentile() */
	}
}

static double socket_mbps(const struct socket_result *sr)
{
	return sr->seconds > 0 ? (double)sr->total / sr->seconds / 1e6 : NAN;
}

static void socket_json(const struct options *o, const struct socket_result *sr)
{
	int s;

	printf("\"socket_baseline\":[");
	for (s = 0; s < o->nsizes; s++) {
		printf("%s{\"bytes\":%llu,\"total_bytes\":%llu,\"seconds\":",
		       s ? "," : "", (unsigned long long)sr[s].block,
		       (unsigned long long)sr[s].total);
		json_num(stdout, sr[s].seconds);
		printf(",\"mbps\":");
		json_num(stdout, socket_mbps(&sr[s]));
		printf(",\"trials\":%d,\"mbps_median\":", SOCKET_TRIALS);
		json_num(stdout, sr[s].median_s > 0 ?
			 (double)sr[s].total / sr[s].median_s / 1e6 : NAN);
		printf("}");
	}
	printf("]");
}

/* ---- one run in this process ------------------------------------------ */

/* "h2d pinned 64 MiB": how --compare matches a result between runs. */
static void result_key(char *buf, size_t n, int dir, int mem, uint64_t size)
{
	char sz[32];

	snprintf(buf, n, "%s %s %s", dir_name[dir], mem_name[mem],
		 fmt_size(size, sz, sizeof(sz)));
}

/* "  H2D pinned", right-aligned over a 13-wide number column. */
static void print_column_title(int dir, int mem)
{
	char title[32];

	snprintf(title, sizeof(title), "%s %s", dir_title[dir], mem_name[mem]);
	printf("  %13s", title);
}

static void print_table(const struct options *o, struct cell (*cells)[NDIRS][NMEMS],
			const struct socket_result *sr, int have_cuda)
{
	int s, d, m;
	char sz[32];

	if (have_cuda)
		printf("MB/s (1 MB = 1e6 bytes), cudaEvent time of synchronous "
		       "cudaMemcpy; --json adds the wall clock\n");
	printf("%10s", "size");
	for (d = 0; have_cuda && d < NDIRS; d++)
		for (m = 0; m < NMEMS; m++)
			if (o->dirs[d] && o->mems[m])
				print_column_title(d, m);
	if (sr)
		printf("  %13s", "unix socket");
	printf("\n");
	for (s = 0; s < o->nsizes; s++) {
		printf("%10s", fmt_size(o->sizes[s], sz, sizeof(sz)));
		for (d = 0; have_cuda && d < NDIRS; d++)
			for (m = 0; m < NMEMS; m++)
				if (o->dirs[d] && o->mems[m])
					printf("  %13.1f",
					       mbps(o->sizes[s], cells[s][d][m].reps,
						    cells[s][d][m].event_s));
		if (sr)
			printf("  %13.1f", socket_mbps(&sr[s]));
		printf("\n");
	}
}

static void print_json(const struct options *o, const struct lib_info *li,
		       const struct dev_info *di,
		       struct cell (*cells)[NDIRS][NMEMS],
		       const struct socket_result *sr)
{
	int s, d, m, first = 1;
	char key[96];

	printf("{");
	json_run_header(stdout, li, di);
	if (g_turns.n)
		json_turns(stdout);
	printf("\"units\":\"MB/s, 1 MB = 1e6 bytes\",\"results\":[");
	for (m = 0; cells && m < NMEMS; m++)
		for (d = 0; d < NDIRS; d++)
			for (s = 0; s < o->nsizes; s++) {
				const struct cell *c = &cells[s][d][m];

				if (!c->valid)
					continue;
				result_key(key, sizeof(key), d, m, o->sizes[s]);
				printf("%s{\"key\":", first ? "" : ",");
				json_str(stdout, key);
				printf(",\"direction\":\"%s\",\"memory\":\"%s\","
				       "\"bytes\":%llu,\"reps\":%d,"
				       "\"event_s\":", dir_name[d], mem_name[m],
				       (unsigned long long)o->sizes[s], c->reps);
				json_num(stdout, c->event_s);
				printf(",\"wall_s\":");
				json_num(stdout, c->wall_s);
				printf(",\"mbps\":");
				json_num(stdout, mbps(o->sizes[s], c->reps, c->event_s));
				printf(",\"mbps_wall\":");
				json_num(stdout, mbps(o->sizes[s], c->reps, c->wall_s));
				printf(",\"verified\":true}");
				first = 0;
			}
	printf("]");
	if (sr) {
		printf(",");
		socket_json(o, sr);
	}
	printf("}\n");
}

static int run_here(const struct options *o)
{
	struct lib_info li;
	struct dev_info di;
	struct socket_result *sr = NULL;
	struct cell (*cells)[NDIRS][NMEMS] = NULL;
	uint64_t maxsize = 0;
	void *dev = NULL, *host;
	int s, d, m;

	lib_identify(&li);
	if (o->socket_baseline) {
		sr = (struct socket_result *)xmalloc(o->nsizes * sizeof(*sr));
		socket_baseline(o, sr);
	}
	if (o->socket_only) {
		if (o->co.json) {
			printf("{");
			json_run_header(stdout, &li, NULL);
			printf("\"results\":[],");
			socket_json(o, sr);
			printf("}\n");
		} else {
			printf("%s: plain AF_UNIX stream, %llu MiB per block "
			       "size, MB/s (1 MB = 1e6 bytes)\n", g_prog,
			       SOCKET_TOTAL >> 20);
			print_table(o, NULL, sr, 0);
		}
		free(sr);
		return EXIT_OK;
	}

	device_open(o->co.device, &di);
	lib_identify_driver(&li);	/* the runtime has loaded it now */
	cells = (struct cell (*)[NDIRS][NMEMS])xmalloc(o->nsizes * sizeof(*cells));
	memset(cells, 0, o->nsizes * sizeof(*cells));
	for (s = 0; s < o->nsizes; s++)
		if (o->sizes[s] > maxsize)
			maxsize = o->sizes[s];
	CK(cudaMalloc(&dev, maxsize));
	bench_turns_open();		/* --interleave: the GPU by turns */
	bench_turn_wait();

	/* One host buffer per memory kind at a time, the largest size. */
	for (m = 0; m < NMEMS; m++) {
		if (!o->mems[m])
			continue;
		if (m == MEM_PINNED)
			CK(cudaMallocHost(&host, maxsize));
		else
			host = xmalloc(maxsize);
		for (s = 0; s < o->nsizes; s++)
			for (d = 0; d < NDIRS; d++)
				if (o->dirs[d])
					measure_cell(host, dev, o->sizes[s], d, m,
						     reps_for(o, o->sizes[s]),
						     o->interleave, &cells[s][d][m]);
		if (m == MEM_PINNED)
			CK(cudaFreeHost(host));
		else
			free(host);
	}
	bench_turn_pass();
	bench_turns_end();
	CK(cudaFree(dev));

	if (o->co.json) {
		print_json(o, &li, &di, cells, sr);
	} else {
		table_run_header(&li, &di);
		print_table(o, cells, sr, 1);
	}
	free(cells);
	free(sr);
	return EXIT_OK;
}

/* ---- --compare ---------------------------------------------------------- */

static int run_compare(struct options *o, int argc, char **argv)
{
	static const struct cmp_field fields[] = {
		{ "mbps", "MB/s", 0, 1 },
		{ "mbps_wall", "MB/s wall", 0, 0 },
	};
	static const char *const drop_flags[] = { "--socket-baseline", NULL };
	struct compare_runs cs;
	struct argvec args;
	struct socket_result *sr = NULL;
	int s, d, m;

	compare_resolve_libdirs(&o->co);
	memset(&args, 0, sizeof(args));
	child_args(&args, argc, argv, drop_flags, NULL);
	if (o->interleave)
		compare_run_interleaved(&cs, &o->co, args.v, o->interleave);
	else
		compare_run_all(&cs, &o->co, args.v, args.v);
	if (o->socket_baseline) {
		sr = (struct socket_result *)xmalloc(o->nsizes * sizeof(*sr));
		socket_baseline(o, sr);
	}

	if (o->co.json) {
		compare_json(fields, 2, &cs);
		if (sr) {
			printf(",");
			socket_json(o, sr);
		}
		printf("}\n");
		goto out;
	}
	compare_table(fields, 2, &cs);
	if (!sr)
		goto out;
	/* pvgpu against a plain unix-socket stream, per block size. */
	printf("\npvgpu against a plain unix-socket stream (%llu MiB per size), "
	       "pvgpu MB/s / socket MB/s\n", SOCKET_TOTAL >> 20);
	printf("%10s  %13s", "size", "socket MB/s");
	for (d = 0; d < NDIRS; d++)
		for (m = 0; m < NMEMS; m++)
			if (o->dirs[d] && o->mems[m])
				print_column_title(d, m);
	printf("\n");
	for (s = 0; s < o->nsizes; s++) {
		char sz[32], key[96];
		double base = socket_mbps(&sr[s]);

		printf("%10s  %13.1f", fmt_size(o->sizes[s], sz, sizeof(sz)),
		       base);
		for (d = 0; d < NDIRS; d++)
			for (m = 0; m < NMEMS; m++) {
				if (!o->dirs[d] || !o->mems[m])
					continue;
				result_key(key, sizeof(key), d, m, o->sizes[s]);
				printf("  %13.3f",
				       compare_stat(cs.pv, cs.pairs, key, "mbps",
						    NULL, NULL) / base);
			}
		printf("\n");
	}
out:
	free(sr);
	compare_runs_free(&cs);
	argv_free(&args);
	return EXIT_OK;
}

int main(int argc, char **argv)
{
	struct options o;

	g_prog = "pvgpu-bandwidth";
	parse_args(&o, argc, argv);
	if (o.co.compare)
		return run_compare(&o, argc, argv);
	return run_here(&o);
}
