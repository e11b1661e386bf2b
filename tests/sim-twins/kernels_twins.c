/*
 * kernels_twins.c - CPU twins of the kernels in tests/programs/kernels/,
 * for `pvgpud --executor sim` (tests/sim/sim_twins.h).  Every kernel is
 * declared extern "C" in its program, so twins go by the plain name.  Each
 * twin does the kernel's real work on the launch's data; kernels with
 * __syncthreads() run in phases over the block's threads, their shared
 * memory taken from l->shared().
 *
 * Integer arithmetic that may wrap is done in unsigned, as the GPU does it.
 */
#define _GNU_SOURCE	/* clock_gettime */
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "sim_twins.h"
#include "twin_util.h"

/* ---- vecadd.cu --------------------------------------------------------- */

/* vec_add: c[i] = a[i] + b[i] */
static void vecadd_twin(const struct pvgpu_sim_launch *l)
{
	uint64_t a = pvgpu_sim_arg_ptr(l, 0), b = pvgpu_sim_arg_ptr(l, 1);
	uint64_t c = pvgpu_sim_arg_ptr(l, 2);
	int32_t n;

	if (ARG(l, 3, n) || l->faulted(l))
		return;
	uint64_t cnt = twin_count_1d(l, n);
	const float *ha = twin_map(l, a, cnt, 4), *hb;
	float *hc;
	if (!ha || !(hb = twin_map(l, b, cnt, 4)) || !(hc = twin_map(l, c, cnt, 4)))
		return;
	for (uint64_t i = 0; i < cnt; i++)
		hc[i] = ha[i] + hb[i];
}

/* ---- matmul.cu ---------------------------------------------------------- */

#define TILE 16

/* The tiled kernel as written: per block, per tile, a load phase and a
 * multiply phase separated by __syncthreads(). */
static void matmul_tiled_twin(const struct pvgpu_sim_launch *l)
{
	uint64_t A = pvgpu_sim_arg_ptr(l, 0), B = pvgpu_sim_arg_ptr(l, 1);
	uint64_t C = pvgpu_sim_arg_ptr(l, 2);
	int32_t M, N, K;

	if (ARG(l, 3, M) || ARG(l, 4, N) || ARG(l, 5, K) || l->faulted(l))
		return;
	if (l->block.x != TILE || l->block.y != TILE || l->block.z != 1) {
		l->fault(l, "matmul_tiled twin: blocks must be 16x16");
		return;
	}
	if (M < 0 || N < 0 || K < 0) {
		l->fault(l, "matmul_tiled twin: negative size");
		return;
	}
	const float *hA = twin_map(l, A, (uint64_t)M * K, 4), *hB;
	float *hC;
	if (!hA || !(hB = twin_map(l, B, (uint64_t)K * N, 4)) ||
	    !(hC = twin_map(l, C, (uint64_t)M * N, 4)))
		return;

	float acc[TILE][TILE];
	for (uint64_t b = 0; b < pvgpu_sim_nblocks(l); b++) {
		struct pvgpu_sim_dim3 bi = pvgpu_sim_block_idx(l, b);
		float *sh = l->shared(l, 2 * TILE * TILE * sizeof(float));
		if (!sh)
			return;
		float (*As)[TILE] = (float (*)[TILE])sh;
		float (*Bs)[TILE] = (float (*)[TILE])(sh + TILE * TILE);

		for (int ty = 0; ty < TILE; ty++)
			for (int tx = 0; tx < TILE; tx++)
				acc[ty][tx] = 0.0f;
		for (int t = 0; t < (K + TILE - 1) / TILE; t++) {
			for (int ty = 0; ty < TILE; ty++)
				for (int tx = 0; tx < TILE; tx++) {
					int64_t row = (int64_t)bi.y * TILE + ty;
					int64_t col = (int64_t)bi.x * TILE + tx;
					int ak = t * TILE + tx, bk = t * TILE + ty;
					As[ty][tx] = (row < M && ak < K) ? hA[row * K + ak] : 0.0f;
					Bs[ty][tx] = (bk < K && col < N) ? hB[(int64_t)bk * N + col] : 0.0f;
				}
			/* __syncthreads() */
			for (int ty = 0; ty < TILE; ty++)
				for (int tx = 0; tx < TILE; tx++)
					for (int k = 0; k < TILE; k++)
						acc[ty][tx] += As[ty][k] * Bs[k][tx];
			/* __syncthreads() */
		}
		for (int ty = 0; ty < TILE; ty++)
			for (int tx = 0; tx < TILE; tx++) {
				int64_t row = (int64_t)bi.y * TILE + ty;
				int64_t col = (int64_t)bi.x * TILE + tx;
				if (row < M && col < N)
					hC[row * N + col] = acc[ty][tx];
			}
	}
}

/* ---- reduce.cu ---------------------------------------------------------- */

#define REDUCE_BLOCK 256

/* Grid-stride accumulation of thread t of block b into s[t]. */
typedef uint32_t (*combine_fn)(uint32_t, uint32_t);

static uint32_t add_u32(uint32_t a, uint32_t b)
{
	return a + b;
}

static uint32_t max_i32(uint32_t a, uint32_t b)
{
	return (int32_t)a > (int32_t)b ? a : b;
}

/*
 * block_reduce_sum (dynamic shared, blockDim.x wide, tree from blockDim.x / 2) and
 * block_reduce_max (static shared, REDUCE_BLOCK wide, tree from REDUCE_BLOCK / 2)
 * share this shape.
 */
static void reduce_common(const struct pvgpu_sim_launch *l, combine_fn op,
			  uint32_t init, int static_width)
{
	uint64_t in = pvgpu_sim_arg_ptr(l, 0), out = pvgpu_sim_arg_ptr(l, 1);
	int32_t n;

	if (ARG(l, 2, n) || l->faulted(l))
		return;
	if (l->block.y != 1 || l->block.z != 1 || l->grid.y != 1 || l->grid.z != 1) {
		l->fault(l, "reduce twin: 1-D launches only");
		return;
	}
	uint32_t bd = l->block.x, width = static_width ? REDUCE_BLOCK : bd;
	uint64_t stride = twin_span_x(l);
	const uint32_t *hin = twin_map(l, in, n > 0 ? (uint64_t)n : 0, 4);
	uint32_t *hout;
	if (!hin || !(hout = twin_map(l, out, l->grid.x, 4)))
		return;

	for (uint32_t b = 0; b < l->grid.x; b++) {
		uint32_t *s = l->shared(l, (size_t)width * 4);
		if (!s)
			return;
		for (uint32_t t = 0; t < bd; t++) {
			uint32_t acc = init;
			for (uint64_t i = (uint64_t)b * bd + t; i < (uint64_t)(n > 0 ? n : 0); i += stride)
				acc = op(acc, hin[i]);
			if (t >= width) {
				l->fault(l, "reduce twin: shared memory index out of range");
				return;
			}
			s[t] = acc;
		}
		/* __syncthreads(), then the tree, a barrier per level */
		for (uint32_t h = width / 2; h > 0; h >>= 1)
			for (uint32_t t = 0; t < bd && t < h; t++)
				s[t] = op(s[t], s[t + h]);
		if (bd > 0)
			hout[b] = s[0];
	}
}

static void reduce_sum_twin(const struct pvgpu_sim_launch *l)
{
	reduce_common(l, add_u32, 0, 0);
}

static void reduce_max_twin(const struct pvgpu_sim_launch *l)
{
	reduce_common(l, max_i32, (uint32_t)INT_MIN, 1);
}

/* ---- constant.cu -------------------------------------------------------- */

#define NTABLE 64

/* out[i] = table[in[i] % NTABLE] * 3 + bias */
static void lookup_twin(const struct pvgpu_sim_launch *l)
{
	uint64_t in = pvgpu_sim_arg_ptr(l, 0), out = pvgpu_sim_arg_ptr(l, 1);
	int32_t n;

	if (ARG(l, 2, n) || l->faulted(l))
		return;
	const int32_t *table = twin_global(l, "table", NTABLE * 4);
	const int32_t *bias = table ? twin_global(l, "bias", 4) : NULL;
	if (!bias)
		return;
	uint64_t cnt = twin_count_1d(l, n);
	const int32_t *hin = twin_map(l, in, cnt, 4);
	int32_t *hout;
	if (!hin || !(hout = twin_map(l, out, cnt, 4)))
		return;
	for (uint64_t i = 0; i < cnt; i++) {
		int32_t k = hin[i] % NTABLE;
		if (k < 0) {
			l->fault(l, "lookup twin: index below the table");
			return;
		}
		hout[i] = (int32_t)((uint32_t)table[k] * 3u + (uint32_t)*bias);
	}
}

/* ---- devglobal.cu ------------------------------------------------------- */

#define NRES 128

/* *out = x */
static void read_x_twin(const struct pvgpu_sim_launch *l)
{
	uint64_t out = pvgpu_sim_arg_ptr(l, 0);

	if (l->faulted(l) || !twin_has_threads(l))
		return;
	const int32_t *x = twin_global(l, "x", 4);
	int32_t *hout = x ? twin_map(l, out, 1, 4) : NULL;
	if (hout)
		*hout = *x;
}

/* thread 0 of block 0: x += by */
static void bump_x_twin(const struct pvgpu_sim_launch *l)
{
	int32_t by;

	if (ARG(l, 0, by) || !twin_has_threads(l))
		return;
	int32_t *x = twin_global(l, "x", 4);
	if (x)
		*x = (int32_t)((uint32_t)*x + (uint32_t)by);
}

/* results[t] = base + t * t for t < NRES; stamp = base * 1000003 + blockDim.x */
static void write_results_twin(const struct pvgpu_sim_launch *l)
{
	int32_t base;

	if (ARG(l, 0, base) || !twin_has_threads(l))
		return;
	int32_t *res = twin_global(l, "results", NRES * 4);
	uint64_t *stamp = res ? twin_global(l, "stamp", 8) : NULL;
	if (!stamp)
		return;
	for (uint32_t t = 0; t < l->block.x && t < NRES; t++)
		res[t] = (int32_t)((uint32_t)base + t * t);
	*stamp = (uint64_t)(int64_t)base * 1000003ull + l->block.x;
}

/* p[i] *= 2 */
static void twice_twin(const struct pvgpu_sim_launch *l)
{
	uint64_t p = pvgpu_sim_arg_ptr(l, 0);
	int32_t n;

	if (ARG(l, 1, n) || l->faulted(l))
		return;
	uint64_t cnt = twin_count_1d(l, n);
	uint32_t *hp = twin_map(l, p, cnt, 4);
	if (!hp)
		return;
	for (uint64_t i = 0; i < cnt; i++)
		hp[i] *= 2u;
}

/* ---- callback.cu -------------------------------------------------------- */

/* p[i] = v + i */
static void fill_twin(const struct pvgpu_sim_launch *l)
{
	uint64_t p = pvgpu_sim_arg_ptr(l, 0);
	int32_t n, v;

	if (ARG(l, 1, n) || ARG(l, 2, v) || l->faulted(l))
		return;
	uint64_t cnt = twin_count_1d(l, n);
	uint32_t *hp = twin_map(l, p, cnt, 4);
	if (!hp)
		return;
	for (uint64_t i = 0; i < cnt; i++)
		hp[i] = (uint32_t)v + (uint32_t)i;
}

/* tests/programs/driver/jitlog.c's sm_10 PTX: p[i] = v + i, one block. */
static void jit_fill_twin(const struct pvgpu_sim_launch *l)
{
	uint64_t p = pvgpu_sim_arg_ptr(l, 0);
	int32_t v;

	if (ARG(l, 1, v) || l->faulted(l))
		return;
	uint64_t cnt = twin_count_1d(l, INT32_MAX);
	uint32_t *hp = twin_map(l, p, cnt, 4);
	if (!hp)
		return;
	for (uint64_t i = 0; i < cnt; i++)
		hp[i] = (uint32_t)v + (uint32_t)i;
}

/* p[i] = p[i] * m + a */
static void scale_add_twin(const struct pvgpu_sim_launch *l)
{
	uint64_t p = pvgpu_sim_arg_ptr(l, 0);
	int32_t n, m, a;

	if (ARG(l, 1, n) || ARG(l, 2, m) || ARG(l, 3, a) || l->faulted(l))
		return;
	uint64_t cnt = twin_count_1d(l, n);
	uint32_t *hp = twin_map(l, p, cnt, 4);
	if (!hp)
		return;
	for (uint64_t i = 0; i < cnt; i++)
		hp[i] = hp[i] * (uint32_t)m + (uint32_t)a;
}

/* ---- launchloop.cu ------------------------------------------------------ */

/* thread 0 of block 0: *counter += 1 */
static void increment_twin(const struct pvgpu_sim_launch *l)
{
	uint64_t c = pvgpu_sim_arg_ptr(l, 0);

	if (l->faulted(l) || !twin_has_threads(l))
		return;
	uint32_t *hc = twin_map(l, c, 1, 4);
	if (hc)
		*hc += 1;
}

/* ---- attrs.cu ----------------------------------------------------------- */

/* __shared__ int buf[1024]; buf[i] = i * 3; barrier;
 * thread 0: out[blockIdx.x] = buf[1023] + buf[blockIdx.x % 1024] */
static void bounded_twin(const struct pvgpu_sim_launch *l)
{
	uint64_t out = pvgpu_sim_arg_ptr(l, 0);

	if (l->faulted(l) || !twin_has_threads(l))
		return;
	int32_t *hout = twin_map(l, out, l->grid.x, 4);
	if (!hout)
		return;
	for (uint64_t b = 0; b < pvgpu_sim_nblocks(l); b++) {
		struct pvgpu_sim_dim3 bi = pvgpu_sim_block_idx(l, b);
		int32_t *buf = l->shared(l, 1024 * 4);
		if (!buf)
			return;
		for (uint32_t t = 0; t < l->block.x; t++)
			for (uint32_t i = t; i < 1024; i += l->block.x)
				buf[i] = (int32_t)i * 3;
		hout[bi.x] = buf[1023] + buf[bi.x % 1024];
	}
}

/* out[i] = i * 2 + 1 */
static void plain_twin(const struct pvgpu_sim_launch *l)
{
	uint64_t out = pvgpu_sim_arg_ptr(l, 0);
	int32_t n;

	if (ARG(l, 1, n) || l->faulted(l))
		return;
	uint64_t cnt = twin_count_1d(l, n);
	uint32_t *hout = twin_map(l, out, cnt, 4);
	if (!hout)
		return;
	for (uint64_t i = 0; i < cnt; i++)
		hout[i] = (uint32_t)i * 2u + 1u;
}

/* extern __shared__ int s[]: s[i] = in[i]; barrier; out[i] = s[n - 1 - i] */
static void dyn_reverse_twin(const struct pvgpu_sim_launch *l)
{
	uint64_t in = pvgpu_sim_arg_ptr(l, 0), out = pvgpu_sim_arg_ptr(l, 1);
	int32_t n;

	if (ARG(l, 2, n) || l->faulted(l) || !twin_has_threads(l))
		return;
	uint64_t cnt = n > 0 ? (uint64_t)n : 0;
	const int32_t *hin = twin_map(l, in, cnt, 4);
	int32_t *hout;
	if (!hin || !(hout = twin_map(l, out, cnt, 4)))
		return;
	for (uint64_t b = 0; b < pvgpu_sim_nblocks(l); b++) {
		int32_t *s = l->shared(l, cnt ? cnt * 4 : 1);
		if (!s)
			return;
		for (uint64_t i = 0; i < cnt; i++)
			s[i] = hin[i];
		for (uint64_t i = 0; i < cnt; i++)
			hout[i] = s[cnt - 1 - i];
	}
}

/* ---- streams4.cu, threads4.cu, fault.cu (GPU-only programs; the twins let
 *      them run against the sim too) --------------------------------------- */

/* p[i] = p[i] * 3 + k, reps times */
static void mul3_add_twin(const struct pvgpu_sim_launch *l)
{
	uint64_t p = pvgpu_sim_arg_ptr(l, 0);
	int32_t n, k, reps;

	if (ARG(l, 1, n) || ARG(l, 2, k) || ARG(l, 3, reps) || l->faulted(l))
		return;
	uint64_t cnt = twin_count_1d(l, n);
	uint32_t *hp = twin_map(l, p, cnt, 4);
	if (!hp)
		return;
	for (uint64_t i = 0; i < cnt; i++) {
		uint32_t v = hp[i];
		for (int32_t r = 0; r < reps; r++)
			v = v * 3u + (uint32_t)k;
		hp[i] = v;
	}
}

/* dst[i] = a[i] - b[i] */
static void subtract_twin(const struct pvgpu_sim_launch *l)
{
	uint64_t a = pvgpu_sim_arg_ptr(l, 0), b = pvgpu_sim_arg_ptr(l, 1);
	uint64_t d = pvgpu_sim_arg_ptr(l, 2);
	int32_t n;

	if (ARG(l, 3, n) || l->faulted(l))
		return;
	uint64_t cnt = twin_count_1d(l, n);
	const uint32_t *ha = twin_map(l, a, cnt, 4), *hb;
	uint32_t *hd;
	if (!ha || !(hb = twin_map(l, b, cnt, 4)) || !(hd = twin_map(l, d, cnt, 4)))
		return;
	for (uint64_t i = 0; i < cnt; i++)
		hd[i] = ha[i] - hb[i];
}

/* y[i] = a * x[i] + y[i] */
static void saxpy_int_twin(const struct pvgpu_sim_launch *l)
{
	int32_t a, n;

	if (ARG(l, 0, a))
		return;
	uint64_t x = pvgpu_sim_arg_ptr(l, 1), y = pvgpu_sim_arg_ptr(l, 2);
	if (ARG(l, 3, n) || l->faulted(l))
		return;
	uint64_t cnt = twin_count_1d(l, n);
	const uint32_t *hx = twin_map(l, x, cnt, 4);
	uint32_t *hy;
	if (!hx || !(hy = twin_map(l, y, cnt, 4)))
		return;
	for (uint64_t i = 0; i < cnt; i++)
		hy[i] = (uint32_t)a * hx[i] + hy[i];
}

/* p[threadIdx.x] = v: through a wild pointer, this faults */
static void wild_write_twin(const struct pvgpu_sim_launch *l)
{
	uint64_t p = pvgpu_sim_arg_ptr(l, 0);
	int32_t v;

	if (ARG(l, 1, v) || l->faulted(l) || !twin_has_threads(l))
		return;
	int32_t *hp = twin_map(l, p, l->block.x, 4);
	if (!hp)
		return;	/* the launch has faulted: CUDA_ERROR_ILLEGAL_ADDRESS */
	for (uint32_t t = 0; t < l->block.x; t++)
		hp[t] = v;
}

/* ---- ../programs/peer.cu ------------------------------------------------- */

/*
 * peer_add: out[i] = peer[i] + local[i], where `peer` lies in another
 * device's memory: l->dev() reaches it only while the launching context
 * has peer access to the context that owns it, as on a GPU.
 */
static void peer_add_twin(const struct pvgpu_sim_launch *l)
{
	uint64_t peer = pvgpu_sim_arg_ptr(l, 0), local = pvgpu_sim_arg_ptr(l, 1);
	uint64_t out = pvgpu_sim_arg_ptr(l, 2);
	int32_t n;

	if (ARG(l, 3, n) || l->faulted(l))
		return;
	uint64_t cnt = twin_count_1d(l, n);
	const uint32_t *p = twin_map(l, peer, cnt, 4), *q;
	uint32_t *o;
	if (!p || !(q = twin_map(l, local, cnt, 4)) || !(o = twin_map(l, out, cnt, 4)))
		return;
	for (uint64_t i = 0; i < cnt; i++)
		o[i] = p[i] + q[i];
}

/* ---- printf.cu ---------------------------------------------------------- */

/* say: thread 0 of block 0 prints `lines` lines. */
static void say_twin(const struct pvgpu_sim_launch *l)
{
	int32_t tag, lines;

	if (ARG(l, 0, tag) || ARG(l, 1, lines) || !twin_has_threads(l))
		return;
	for (int32_t i = 0; i < lines; i++)
		l->dev_printf(l, "device: tag %d line %d of %d\n", tag, i + 1,
			      lines);
}

/* expect_index: assert(v[i] == i) in every thread i < n. */
static void expect_index_twin(const struct pvgpu_sim_launch *l)
{
	uint64_t v = pvgpu_sim_arg_ptr(l, 0);
	int32_t n;

	if (ARG(l, 1, n) || l->faulted(l))
		return;
	uint64_t cnt = twin_count_1d(l, n);
	const int32_t *hv = twin_map(l, v, cnt, 4);
	if (!hv)
		return;
	for (uint64_t i = 0; i < cnt; i++) {
		if (hv[i] == (int32_t)i)
			continue;
		struct pvgpu_sim_dim3 block = { (uint32_t)(i / l->block.x), 0, 0 };
		struct pvgpu_sim_dim3 thread = { (uint32_t)(i % l->block.x), 0, 0 };

		l->assert_fail(l, "v[i] == i", "tests/programs/kernels/printf.cu",
			       26, "void expect_index(const int *, int)", block,
			       thread);
		return;
	}
}

/* ---- launchex.cu -------------------------------------------------------- */

/* cluster_ids: out[block] = blocks per cluster * 100 + rank in the cluster
 * (1-D grids, as the program launches them). */
static void cluster_ids_twin(const struct pvgpu_sim_launch *l)
{
	uint64_t out = pvgpu_sim_arg_ptr(l, 0);
	uint32_t size = l->cluster.x * l->cluster.y * l->cluster.z;

	if (l->faulted(l))
		return;
	if (l->grid.y != 1 || l->grid.z != 1 || l->cluster.y != 1 ||
	    l->cluster.z != 1) {
		l->fault(l, "cluster_ids twin: 1-D grids and clusters only");
		return;
	}
	int32_t *h = twin_map(l, out, l->grid.x, 4);
	if (!h)
		return;
	for (uint32_t b = 0; b < l->grid.x; b++)
		h[b] = (int32_t)(size * 100 + b % l->cluster.x);
}

/* coop_sum: grid-strided partial sums, a grid-wide barrier, thread 0
 * adds them.  The barrier needs the whole grid resident, which only a
 * cooperative launch promises: anything else is a fault here. */
static void coop_sum_twin(const struct pvgpu_sim_launch *l)
{
	uint64_t in = pvgpu_sim_arg_ptr(l, 0), partial = pvgpu_sim_arg_ptr(l, 1);
	uint64_t out = pvgpu_sim_arg_ptr(l, 2), count = pvgpu_sim_arg_ptr(l, 3);
	int32_t n;

	if (ARG(l, 4, n) || l->faulted(l))
		return;
	if (!l->cooperative) {
		l->fault(l, "coop_sum twin: a grid barrier in a launch that is "
			 "not cooperative");
		return;
	}
	uint64_t nt = twin_span_x(l);
	const int32_t *hin = twin_map(l, in, n > 0 ? (uint64_t)n : 0, 4);
	int32_t *hp, *hout;
	uint32_t *hcount;
	if (!hin || !(hp = twin_map(l, partial, nt, 4)) ||
	    !(hout = twin_map(l, out, 1, 4)) || !(hcount = twin_map(l, count, 1, 4)))
		return;
	for (uint64_t t = 0; t < nt; t++) {	/* phase 1: every thread */
		uint32_t sum = 0;
		for (uint64_t i = t; n > 0 && i < (uint64_t)n; i += nt)
			sum += (uint32_t)hin[i];
		hp[t] = (int32_t)sum;
	}
	uint32_t total = 0;			/* phase 2: thread 0 */
	for (uint64_t t = 0; t < nt; t++)
		total += (uint32_t)hp[t];
	*hout = (int32_t)total;
	*hcount += l->grid.x;		/* every block arrived */
}

/* times7: v[i] = i * 7 */
static void times7_twin(const struct pvgpu_sim_launch *l)
{
	uint64_t v = pvgpu_sim_arg_ptr(l, 0);
	int32_t n;

	if (ARG(l, 1, n) || l->faulted(l))
		return;
	uint64_t cnt = twin_count_1d(l, n);
	int32_t *h = twin_map(l, v, cnt, 4);
	if (!h)
		return;
	for (uint64_t i = 0; i < cnt; i++)
		h[i] = (int32_t)(i * 7);
}

/* ---- copies3d.cu -------------------------------------------------------- */

/* scale3d(cudaPitchedPtr p, w, h, d): every element of the volume doubled;
 * blocks cover y and z, threads x. */
static void scale3d_twin(const struct pvgpu_sim_launch *l)
{
	struct { uint64_t ptr, pitch, xsize, ysize; } p;
	int32_t w, h, d;

	if (ARG(l, 0, p) || ARG(l, 1, w) || ARG(l, 2, h) || ARG(l, 3, d) ||
	    l->faulted(l))
		return;
	for (uint32_t z = 0; z < l->grid.z; z++)
		for (uint32_t y = 0; y < l->grid.y; y++)
			for (uint32_t bx = 0; bx < l->grid.x; bx++)
				for (uint32_t t = 0; t < l->block.x; t++) {
					uint64_t x = (uint64_t)bx * l->block.x + t;
					float *e;

					if (x >= (uint64_t)(w > 0 ? w : 0) || (int64_t)y >= h ||
					    (int64_t)z >= d)
						continue;
					e = twin_map(l, p.ptr + ((uint64_t)z * p.ysize + y) * p.pitch +
						     x * 4, 1, 4);
					if (!e)
						return;
					*e *= 2.0f;
				}
}

const uint32_t pvgpu_sim_twin_abi = PVGPU_SIM_TWIN_ABI;

/* ---- driver/managed_kernels.cu ---------------------------------------------
 * The memory they reach is the guest's own (the window the worker maps at
 * the guest's address): flag_wait sees the guest's store while it spins. */

/* managed_inc: p[i] += 1 */
static void managed_inc_twin(const struct pvgpu_sim_launch *l)
{
	uint64_t p = pvgpu_sim_arg_ptr(l, 0);
	int32_t n;

	if (ARG(l, 1, n) || l->faulted(l))
		return;
	uint64_t cnt = twin_count_1d(l, n);
	int32_t *hp = twin_map(l, p, cnt, 4);
	if (!hp)
		return;
	for (uint64_t i = 0; i < cnt; i++)
		hp[i] = (int32_t)((uint32_t)hp[i] + 1u);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* flag_wait: spin on flag[0] (up to timeout_ns), then flag[1] = 2 or 1 */
static void flag_wait_twin(const struct pvgpu_sim_launch *l)
{
	uint64_t f = pvgpu_sim_arg_ptr(l, 0), timeout, t0;

	if (ARG(l, 1, timeout) || l->faulted(l) || !twin_has_threads(l))
		return;
	int32_t *flag = twin_map(l, f, 2, 4);
	if (!flag)
		return;
	t0 = now_ns();
	while (!__atomic_load_n(&flag[0], __ATOMIC_ACQUIRE) && now_ns() - t0 < timeout)
		;
	__atomic_store_n(&flag[1], __atomic_load_n(&flag[0], __ATOMIC_ACQUIRE) ? 2 : 1,
			 __ATOMIC_RELEASE);
}

/* ---- waitstep.cu ---------------------------------------------------------- */

/* thread 0: stamps[0] = now; hold ns; buf[0] = step, buf[words-1] = ~step;
 * stamps[1] = now (the sim's clock for the GPU's) */
static void hold_twin(const struct pvgpu_sim_launch *l)
{
	uint64_t stamps = pvgpu_sim_arg_ptr(l, 0), buf = pvgpu_sim_arg_ptr(l, 1), ns, t0;
	uint32_t words, step;

	if (ARG(l, 2, words) || ARG(l, 3, step) || ARG(l, 4, ns) ||
	    l->faulted(l) || !twin_has_threads(l) || !words)
		return;
	uint64_t *hs = twin_map(l, stamps, 2, 8);
	uint32_t *hb = twin_map(l, buf, words, 4);
	if (!hs || !hb)
		return;
	t0 = now_ns();
	while (now_ns() - t0 < ns) {
		uint64_t left = ns - (now_ns() - t0);
		struct timespec ts = { (time_t)(left / 1000000000u),
				       (long)(left % 1000000000u) };

		nanosleep(&ts, NULL);
	}
	hb[0] = step;
	hb[words - 1] = ~step;
	hs[0] = t0;
	hs[1] = now_ns();
}

const struct pvgpu_sim_twin pvgpu_sim_twins[] = {
	{ "vec_add", vecadd_twin },
	{ "peer_add", peer_add_twin },
	{ "matmul_tiled", matmul_tiled_twin },
	{ "block_reduce_sum", reduce_sum_twin },
	{ "block_reduce_max", reduce_max_twin },
	{ "lookup", lookup_twin },
	{ "read_x", read_x_twin },
	{ "bump_x", bump_x_twin },
	{ "write_results", write_results_twin },
	{ "twice", twice_twin },
	{ "fill", fill_twin },
	{ "jit_fill", jit_fill_twin },
	{ "scale_add", scale_add_twin },
	{ "increment", increment_twin },
	{ "bounded", bounded_twin },
	{ "plain", plain_twin },
	{ "dyn_reverse", dyn_reverse_twin },
	{ "mul3_add", mul3_add_twin },
	{ "subtract", subtract_twin },
	{ "saxpy_int", saxpy_int_twin },
	{ "wild_write", wild_write_twin },
	{ "say", say_twin },
	{ "expect_index", expect_index_twin },
	{ "cluster_ids", cluster_ids_twin },
	{ "coop_sum", coop_sum_twin },
	{ "times7", times7_twin },
	{ "scale3d", scale3d_twin },
	{ "managed_inc", managed_inc_twin },
	{ "flag_wait", flag_wait_twin },
	{ "hold", hold_twin },
	{ NULL, NULL },
};
