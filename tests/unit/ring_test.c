/*
 * ring_test.c - the control ring (transport/ring.h): region checks,
 * bytes through it in one thread, two threads and two processes over a
 * memfd (with spinning, with sleeping at once, and in between), and a
 * peer that scribbles on the indexes or goes away.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ring.h"

#include "unit_check.h"

/* Kicks as bytes on a socketpair: what the transports do. */
static int sock_kick(void *arg)
{
	int fd = *(int *)arg;

	if (send(fd, "k", 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 &&
	    errno != EAGAIN && errno != EWOULDBLOCK)
		return -errno;
	return 0;
}

static int sock_wait(void *arg)
{
	int fd = *(int *)arg;
	struct pollfd pfd = { fd, POLLIN, 0 };
	char buf[64];
	ssize_t n;

	if (poll(&pfd, 1, -1) < 0)
		return errno == EINTR ? 0 : -errno;
	n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
	if (n == 0)
		return -ECONNRESET;
	if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
		return -errno;
	return 0;
}

static void test_region(void)
{
	const char *why;
	uint64_t win = 64u << 20, cap;

	cap = pvgpu_ring_check_region(1 << 20, pvgpu_ring_region_size(1 << 16),
				      win, 4096, &why);
	CHECK(cap == 1 << 16 && !why);
	/* Not page-aligned, before the allowed start, past the end. */
	CHECK(!pvgpu_ring_check_region((1 << 20) + 8, pvgpu_ring_region_size(1 << 16),
				       win, 4096, &why) && why);
	CHECK(!pvgpu_ring_check_region(0, pvgpu_ring_region_size(1 << 16),
				       win, 4096, &why) && why);
	CHECK(!pvgpu_ring_check_region(win - 4096, pvgpu_ring_region_size(1 << 16),
				       win, 4096, &why) && why);
	CHECK(!pvgpu_ring_check_region(UINT64_MAX - 4095, 8192 + 4096 * 2,
				       win, 4096, &why) && why);
	CHECK(!pvgpu_ring_check_region(8192, UINT64_MAX, win, 4096, &why) && why);
	/* Capacities: not a power of two, too small, too big, odd halves. */
	CHECK(!pvgpu_ring_check_region(8192, 4096 + 2 * 12288, win, 4096, &why));
	CHECK(!pvgpu_ring_check_region(8192, 4096 + 2 * 2048, win, 4096, &why));
	CHECK(!pvgpu_ring_check_region(8192, pvgpu_ring_region_size(32u << 20),
				       1ull << 30, 4096, &why));
	CHECK(!pvgpu_ring_check_region(8192, 4096 + 2 * 4096 + 1, win, 4096, &why));
	CHECK(!pvgpu_ring_check_region(8192, 4096, win, 4096, &why));
}

struct pair {
	void *region;
	uint64_t cap;
	int fds[2];			/* [0] the guest's end, [1] the worker's */
	struct pvgpu_ring g, w;
};

static void pair_init(struct pair *p, void *region, uint64_t cap,
		      uint64_t spin_ns)
{
	struct pvgpu_ring_waiter gw = { sock_kick, sock_wait, &p->fds[0], spin_ns, spin_ns / 4 };
	struct pvgpu_ring_waiter ww = { sock_kick, sock_wait, &p->fds[1], spin_ns, spin_ns / 4 };

	p->region = region;
	p->cap = cap;
	socketpair(AF_UNIX, SOCK_STREAM, 0, p->fds);
	pvgpu_ring_init_region(region, cap);
	pvgpu_ring_attach(&p->g, region, cap, PVGPU_RING_GUEST, &gw);
	pvgpu_ring_attach(&p->w, region, cap, PVGPU_RING_WORKER, &ww);
}

static void pair_fini(struct pair *p)
{
	close(p->fds[0]);
	close(p->fds[1]);
}

static void *region_new(uint64_t cap)
{
	void *r = mmap(NULL, pvgpu_ring_region_size(cap), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	return r == MAP_FAILED ? NULL : r;
}

static void fill(uint8_t *b, size_t n, unsigned int seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(seed * 31 + i * 7 + (i >> 8));
}

static void test_one_thread(void)
{
	uint64_t cap = 4096;
	struct pair p;
	uint8_t out[3000], in[3000];
	void *region = region_new(cap);
	struct iovec iov[3];

	pair_init(&p, region, cap, 0);
	/* Many small messages walk the indexes around the ring many times. */
	for (unsigned int k = 0; k < 200; k++) {
		size_t n = 1 + (k * 37) % sizeof(out);

		fill(out, n, k);
		CHECK(!pvgpu_ring_send(&p.g, out, n));
		memset(in, 0, n);
		CHECK(!pvgpu_ring_recv(&p.w, in, n));
		CHECK(!memcmp(in, out, n));
		CHECK(!pvgpu_ring_send(&p.w, out, n));
		CHECK(!pvgpu_ring_recv(&p.g, in, n));
		CHECK(!memcmp(in, out, n));
	}
	/* An iovec of three, received in two pieces. */
	fill(out, sizeof(out), 99);
	iov[0] = (struct iovec){ out, 24 };
	iov[1] = (struct iovec){ out + 24, 0 };
	iov[2] = (struct iovec){ out + 24, 1000 };
	CHECK(!pvgpu_ring_sendv(&p.g, iov, 3));
	CHECK(pvgpu_ring_pending(&p.w) == 1024);
	CHECK(!pvgpu_ring_recv(&p.w, in, 24));
	CHECK(!pvgpu_ring_recv(&p.w, in + 24, 1000));
	CHECK(!memcmp(in, out, 1024));
	CHECK(pvgpu_ring_pending(&p.w) == 0);
	CHECK(p.g.kicks_sent == 0 && p.w.kicks_sent == 0);	/* nobody slept */
	pair_fini(&p);
	munmap(region, pvgpu_ring_region_size(cap));
}

static void set_tag(void *region, int dir, uint64_t cap, uint64_t pos, uint64_t v)
{
	uint8_t *area = (uint8_t *)region + PVGPU_RING_HDR_SIZE + (uint64_t)dir * cap;

	__atomic_store_n((uint64_t *)(void *)(area + (pos & (cap - 1))), v, __ATOMIC_RELEASE);
}

/* Scribbles by the peer: each must be -EPROTO, never a bad read. */
static void test_bad_indexes(void)
{
	uint64_t cap = 4096, max = pvgpu_ring_max_record(cap), rec;
	struct pvgpu_ring_shared *sh;
	struct pair p;
	uint8_t buf[64];
	static uint8_t big[4096];
	void *region = region_new(cap);

	sh = region;
	/* A tag that names another position (a record from an old lap). */
	pair_init(&p, region, cap, 0);
	set_tag(region, 0, cap, 0, pvgpu_ring_tag(cap, 8));
	CHECK(pvgpu_ring_recv(&p.w, buf, 8) == -EPROTO && p.w.error);
	CHECK(!strcmp(p.w.error, "a record's tag names another position"));
	CHECK(pvgpu_ring_pending(&p.w) == -EPROTO);
	pair_fini(&p);
	/* Every bit set: a position far away, a length past the window. */
	pair_init(&p, region, cap, 0);
	set_tag(region, 0, cap, 0, UINT64_MAX);
	CHECK(pvgpu_ring_pending(&p.w) == -EPROTO);
	pair_fini(&p);
	/* A length that does not fit; the largest that does is read whole. */
	pair_init(&p, region, cap, 0);
	set_tag(region, 0, cap, 0, pvgpu_ring_tag(0, max + 1));
	CHECK(pvgpu_ring_pending(&p.w) == -EPROTO);
	CHECK(!strcmp(p.w.error, "a record's length is past the ring's capacity"));
	pair_fini(&p);
	pair_init(&p, region, cap, 0);
	set_tag(region, 0, cap, 0, pvgpu_ring_tag(0, max));
	CHECK(pvgpu_ring_pending(&p.w) == (int64_t)max);
	CHECK(!pvgpu_ring_recv(&p.w, big, max));
	CHECK(__atomic_load_n(&sh->dir[0].cons, __ATOMIC_ACQUIRE) == cap - PVGPU_RING_ALIGN);
	/* After it, a tag for the right position read as garbage is refused. */
	set_tag(region, 0, cap, cap - PVGPU_RING_ALIGN, pvgpu_ring_tag(0, 8));
	CHECK(pvgpu_ring_pending(&p.w) == -EPROTO);
	pair_fini(&p);

	/*
	 * The guest's consumer index on the reply ring.  The worker reads it
	 * only when what it last saw leaves less than half the ring, or too
	 * little for the message (ring.c): a scribble is found then, and
	 * harms nothing before.
	 */
	pair_init(&p, region, cap, 0);
	CHECK(!pvgpu_ring_send(&p.w, big, cap / 2 + 32));
	rec = p.w.tx_pos;
	CHECK(rec == 2112);			/* tag + bytes, to whole lines */
	__atomic_store_n(&sh->dir[1].cons, rec + 1, __ATOMIC_RELEASE);	/* past what was sent */
	CHECK(pvgpu_ring_send(&p.w, buf, 8) == -EPROTO);
	CHECK(!strcmp(p.w.error, "the peer's consumer index is past what was sent"));
	pair_fini(&p);
	pair_init(&p, region, cap, 0);
	CHECK(!pvgpu_ring_send(&p.w, big, cap / 2 + 32));
	CHECK(!pvgpu_ring_recv(&p.g, big, cap / 2 + 32));
	CHECK(!pvgpu_ring_send(&p.w, buf, 8));		/* saw cons == rec */
	CHECK(p.w.tx_peer == rec);
	__atomic_store_n(&sh->dir[1].cons, 4, __ATOMIC_RELEASE);	/* backwards */
	CHECK(!pvgpu_ring_send(&p.w, buf, 8));		/* not looked at yet */
	CHECK(pvgpu_ring_send(&p.w, big, cap) == -EPROTO);	/* more than it saw room for */
	CHECK(!strcmp(p.w.error, "the peer's consumer index went backwards"));
	pair_fini(&p);
	/* A small message after a small one does not read the index at all. */
	pair_init(&p, region, cap, 0);
	CHECK(!pvgpu_ring_send(&p.w, buf, 32));
	__atomic_store_n(&sh->dir[1].cons, UINT64_MAX, __ATOMIC_RELEASE);
	CHECK(!pvgpu_ring_send(&p.w, buf, 8) && p.w.tx_peer == 0);
	pair_fini(&p);

	/* The worker's own words, rewritten by the guest, are never read back. */
	pair_init(&p, region, cap, 0);
	CHECK(!pvgpu_ring_send(&p.g, buf, 16));
	CHECK(!pvgpu_ring_recv(&p.w, buf, 16));
	__atomic_store_n(&sh->dir[0].cons, 12345, __ATOMIC_RELEASE);
	set_tag(region, 1, cap, 0, UINT64_MAX);
	set_tag(region, 1, cap, PVGPU_RING_ALIGN, UINT64_MAX);
	CHECK(!pvgpu_ring_send(&p.w, buf, 16));
	CHECK(!pvgpu_ring_send(&p.w, buf, 16));
	CHECK(p.w.tx_pos == 2 * PVGPU_RING_ALIGN);
	pair_fini(&p);
	munmap(region, pvgpu_ring_region_size(cap));
}

/*
 * Old bytes never pass for a record: with the areas full of words that
 * are valid tags for the positions they are at, records go both ways and
 * nothing more is there until the producer publishes it.
 */
static void test_stale_bytes(void)
{
	uint64_t cap = 4096;
	uint8_t *area, out[200], in[200];
	struct pair p;
	void *region = region_new(cap);

	area = (uint8_t *)region + PVGPU_RING_HDR_SIZE;
	for (uint64_t pos = 0; pos < 2 * cap; pos += PVGPU_RING_ALIGN)
		for (uint64_t w = 0; w < PVGPU_RING_ALIGN; w += 8) {
			uint64_t v = pvgpu_ring_tag(pos % cap, 8);

			memcpy(area + pos + w, &v, 8);
		}
	pair_init(&p, region, cap, 0);
	for (unsigned int k = 0; k < 100; k++) {
		size_t n = 1 + (k * 53) % sizeof(out);

		fill(out, n, k);
		CHECK(!pvgpu_ring_send(&p.g, out, n));
		CHECK(!pvgpu_ring_recv(&p.w, in, n));
		CHECK(!memcmp(in, out, n));
		CHECK(pvgpu_ring_pending(&p.w) == 0);
		CHECK(!pvgpu_ring_send(&p.w, out, n));
		CHECK(!pvgpu_ring_recv(&p.g, in, n));
		CHECK(pvgpu_ring_pending(&p.g) == 0);
	}
	pair_fini(&p);
	munmap(region, pvgpu_ring_region_size(cap));
}

/*
 * The runway: after a send the tags of the lines ahead are 0 up to
 * PVGPU_RING_RUNWAY bytes, never in space the consumer has not released,
 * and records that cross it arrive whole while the ring fills and drains.
 */
static uint64_t tag_word(void *region, int dir, uint64_t cap, uint64_t pos)
{
	uint64_t v;

	memcpy(&v, (uint8_t *)region + PVGPU_RING_HDR_SIZE + (uint64_t)dir * cap +
		   (pos & (cap - 1)), 8);
	return v;
}

static void test_runway(void)
{
	uint64_t cap = 4096, pos;
	uint8_t out[300], in[300], *area;
	struct pair p;
	void *region = region_new(cap);

	area = (uint8_t *)region + PVGPU_RING_HDR_SIZE;
	pair_init(&p, region, cap, 0);
	memset(area, 0xa5, 2 * cap);		/* old bytes everywhere */
	pvgpu_ring_init_region(region, cap);
	fill(out, sizeof(out), 1);
	CHECK(!pvgpu_ring_send(&p.g, out, 40));		/* one line */
	CHECK(p.g.tx_pos == 64 && p.g.tx_zeroed == 64 + PVGPU_RING_RUNWAY);
	for (pos = 64; pos <= 64 + PVGPU_RING_RUNWAY; pos += PVGPU_RING_ALIGN)
		CHECK(tag_word(region, 0, cap, pos) == 0);
	CHECK(tag_word(region, 0, cap, pos) == 0xa5a5a5a5a5a5a5a5ull);
	/* Nothing consumed: the runway stops a line short of the first record. */
	for (unsigned int k = 0; k < 12; k++)
		CHECK(!pvgpu_ring_send(&p.g, out, 240));	/* 4 lines each */
	CHECK(p.g.tx_pos == 64 + 12 * 256);
	CHECK(p.g.tx_zeroed == cap - PVGPU_RING_ALIGN);
	CHECK(tag_word(region, 0, cap, 0) == pvgpu_ring_tag(0, 40));
	CHECK(!pvgpu_ring_recv(&p.w, in, 40) && !memcmp(in, out, 40));
	for (unsigned int k = 0; k < 12; k++)
		CHECK(!pvgpu_ring_recv(&p.w, in, 240) && !memcmp(in, out, 240));
	/* Round and round, with sizes that cross the runway's end. */
	for (unsigned int k = 0; k < 300; k++) {
		size_t n = 1 + (k * 97) % sizeof(out);

		fill(out, n, k);
		CHECK(!pvgpu_ring_send(&p.g, out, n));
		CHECK(tag_word(region, 0, cap, p.g.tx_pos) == 0);
		CHECK(!pvgpu_ring_recv(&p.w, in, n) && !memcmp(in, out, n));
		CHECK(pvgpu_ring_pending(&p.w) == 0);
	}
	pair_fini(&p);
	munmap(region, pvgpu_ring_region_size(cap));
}

/* 20 ms from now, 8 bytes into the ring arg (a struct pvgpu_ring end). */
static void *late_send_thread(void *arg)
{
	struct timespec t = { 0, 20 * 1000 * 1000 };
	uint8_t b[8] = { 0 };

	nanosleep(&t, NULL);
	if (pvgpu_ring_send(arg, b, sizeof(b)))
		fprintf(stderr, "late send: failed\n");
	return NULL;
}

/* A producer asleep for room, its flag up: a consumer waiting for bytes wakes it. */

static void test_consumer_wakes_sleeping_producer(void)
{
	uint64_t cap = 4096;
	struct pair p;
	pthread_t t;
	uint8_t b[8];
	char k;
	void *region = region_new(cap);
	struct pvgpu_ring_shared *sh = region;

	for (int spin = 0; spin < 2; spin++) {
		pair_init(&p, region, cap, spin ? 100ull * 1000 * 1000 : 0);
		__atomic_store_n(&sh->dir[0].prod_sleeping, 1, __ATOMIC_RELAXED);
		CHECK(!pthread_create(&t, NULL, late_send_thread, &p.g));
		CHECK(!pvgpu_ring_recv(&p.w, b, sizeof(b)));
		pthread_join(t, NULL);
		CHECK(p.w.kicks_sent == 1);
		CHECK(__atomic_load_n(&sh->dir[0].prod_sleeping, __ATOMIC_RELAXED) == 0);
		CHECK(recv(p.fds[0], &k, 1, MSG_DONTWAIT) == 1);	/* the kick */
		pair_fini(&p);
	}
	munmap(region, pvgpu_ring_region_size(cap));
}

/* A peer that goes away while we sleep: the wait's error comes back. */
static void test_peer_gone(void)
{
	uint64_t cap = 4096;
	struct pair p;
	uint8_t buf[8192];
	void *region = region_new(cap);

	pair_init(&p, region, cap, 1000);
	close(p.fds[0]);
	p.fds[0] = -1;
	CHECK(pvgpu_ring_recv(&p.w, buf, 8) == -ECONNRESET);
	/* A full ring and nobody to drain it. */
	CHECK(pvgpu_ring_send(&p.w, buf, sizeof(buf)) == -ECONNRESET);
	close(p.fds[1]);
	munmap(region, pvgpu_ring_region_size(cap));
}

/* --- two threads, two processes ------------------------------------------- */

#define ROUNDS	3000

/* The worker's side: echo each message (u32 length, then bytes) back. */
static int echo(struct pvgpu_ring *r)
{
	static uint8_t buf[1 << 20];
	uint32_t len;

	for (;;) {
		if (pvgpu_ring_recv(r, &len, sizeof(len)))
			return -1;
		if (len == 0)
			return 0;
		if (len > sizeof(buf) || pvgpu_ring_recv(r, buf, len))
			return -1;
		if (pvgpu_ring_send(r, &len, sizeof(len)) ||
		    pvgpu_ring_send(r, buf, len))
			return -1;
	}
}

static void *echo_thread(void *arg)
{
	struct pair *p = arg;

	return (void *)(long)echo(&p->w);
}

/* The guest's side: messages of every size, small and past the ring's. */
static int ping(struct pvgpu_ring *r, uint64_t cap)
{
	static uint8_t out[1 << 20], in[1 << 20];
	int bad = 0;

	for (unsigned int k = 0; k < ROUNDS; k++) {
		uint32_t len = k % 50 == 0 ? (uint32_t)(cap * 3 + k % 17) :
					     1 + (k * 2654435761u) % 300, back = 0;
		struct iovec iov[2] = { { &len, sizeof(len) }, { out, len } };

		fill(out, len, k);
		if (pvgpu_ring_sendv(r, iov, 2) ||
		    pvgpu_ring_recv(r, &back, sizeof(back)) || back != len ||
		    pvgpu_ring_recv(r, in, len) || memcmp(in, out, len))
			bad++;
	}
	{
		uint32_t zero = 0;

		if (pvgpu_ring_send(r, &zero, sizeof(zero)))
			bad++;
	}
	return bad;
}

static void test_threads(uint64_t spin_ns)
{
	uint64_t cap = 16384;
	struct pair p;
	pthread_t t;
	void *rc;
	void *region = region_new(cap);

	pair_init(&p, region, cap, spin_ns);
	pthread_create(&t, NULL, echo_thread, &p);
	CHECK(ping(&p.g, cap) == 0);
	pthread_join(t, &rc);
	CHECK(rc == NULL);
	if (spin_ns == 0)
		CHECK(p.g.sleeps > 0 && p.w.kicks_sent > 0);
	pair_fini(&p);
	munmap(region, pvgpu_ring_region_size(cap));
}

static void test_processes(void)
{
	uint64_t cap = 65536, size = pvgpu_ring_region_size(cap);
	int mfd = memfd_create("ring-test", MFD_CLOEXEC), status = -1;
	void *region;
	struct pair p;
	pid_t pid;

	CHECK(mfd >= 0 && !ftruncate(mfd, (off_t)size));
	region = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	CHECK(region != MAP_FAILED);
	pair_init(&p, region, cap, 20000);
	pid = fork();
	if (pid == 0) {
		/* The worker: its own mapping of the memfd, as pvgpud's. */
		void *mine = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
		struct pvgpu_ring_waiter ww = { sock_kick, sock_wait, &p.fds[1], 20000, 2000 };

		close(p.fds[0]);
		pvgpu_ring_attach(&p.w, mine, cap, PVGPU_RING_WORKER, &ww);
		_exit(echo(&p.w) ? 1 : 0);
	}
	close(p.fds[1]);
	p.fds[1] = -1;
	CHECK(ping(&p.g, cap) == 0);
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

	/* A worker killed mid-call: the guest's wait ends, not hangs. */
	pair_fini(&p);
	pair_init(&p, region, cap, 20000);
	pid = fork();
	if (pid == 0) {
		close(p.fds[0]);
		pause();
		_exit(0);
	}
	close(p.fds[1]);
	p.fds[1] = -1;
	{
		uint32_t len = 8, back;

		CHECK(!pvgpu_ring_send(&p.g, &len, sizeof(len)));
		kill(pid, SIGKILL);
		CHECK(pvgpu_ring_recv(&p.g, &back, sizeof(back)) == -ECONNRESET);
	}
	waitpid(pid, &status, 0);
	close(p.fds[0]);
	munmap(region, size);
	close(mfd);
}

/*
 * pvgpu_ring_expect_wait (a worker that answers 20 ms late): the next wait
 * for a reply spins that long before sleeping (a synchronous call waiting
 * on the device), yielding the CPU between looks after the first 2 ms;
 * then the bounded, adaptive budget applies again, untaught by it.  A
 * receiver the host preempts for the sender's 20 ms finds the reply at
 * its first look, neither spinning nor sleeping: on a loaded machine the
 * pair is tried up to five times, and one whole try must show it all.
 */
static int expect_wait_once(void)
{
	uint64_t cap = 4096, budget;
	struct pair p;
	pthread_t t;
	uint8_t b[8];
	void *region = region_new(cap);
	int ok;

	pair_init(&p, region, cap, 1000);	/* 1 us: sleeps at once, else */
	budget = p.g.spin_ns;
	pvgpu_ring_expect_wait(&p.g, 2000ull * 1000 * 1000);
	CHECK(!pthread_create(&t, NULL, late_send_thread, &p.w));
	CHECK(!pvgpu_ring_recv(&p.g, b, sizeof(b)));
	pthread_join(t, NULL);
	ok = p.g.sleeps == 0 &&		/* it spun through the 20 ms */
	     p.g.yields > 0 &&		/* yielding the CPU after 2 ms */
	     p.g.spin_once_ns == 0 && p.g.spin_ns == budget;
	/* The next wait has the usual budget: it sleeps. */
	CHECK(!pthread_create(&t, NULL, late_send_thread, &p.w));
	CHECK(!pvgpu_ring_recv(&p.g, b, sizeof(b)));
	pthread_join(t, NULL);
	ok = ok && p.g.sleeps == 1;
	pair_fini(&p);
	munmap(region, pvgpu_ring_region_size(cap));
	return ok;
}

static void test_expect_wait(void)
{
	int ok = 0;

	for (int tries = 0; tries < 5 && !ok; tries++)
		ok = expect_wait_once();
	CHECK(ok);
}

/*
 * pvgpu_ring_wait_until (the device's completion word): done at once; bytes
 * first; and a guest asleep in it, woken by the worker's pvgpu_ring_wake
 * once the word is written (20 ms later, past any spin).
 */
static uint32_t until_word;

static int until_done(void *arg)
{
	return __atomic_load_n((uint32_t *)arg, __ATOMIC_ACQUIRE) == 7;
}

static void *late_word_thread(void *arg)
{
	struct timespec t = { 0, 20 * 1000 * 1000 };

	nanosleep(&t, NULL);
	__atomic_store_n(&until_word, 7, __ATOMIC_RELEASE);
	if (pvgpu_ring_wake(arg))
		fprintf(stderr, "late wake: failed\n");
	return NULL;
}

static void test_wait_until(void)
{
	uint64_t cap = 4096;
	struct pair p;
	pthread_t t;
	uint8_t b[8] = { 1, 2, 3 };
	void *region = region_new(cap);

	pair_init(&p, region, cap, 1000);	/* 1 us of spin: then it sleeps */
	until_word = 7;
	CHECK(pvgpu_ring_wait_until(&p.g, until_done, &until_word, 0) == 0);
	until_word = 0;
	CHECK(!pvgpu_ring_send(&p.w, b, sizeof(b)));
	CHECK(pvgpu_ring_wait_until(&p.g, until_done, &until_word, 0) == (int64_t)sizeof(b));
	CHECK(!pvgpu_ring_recv(&p.g, b, sizeof(b)) && b[2] == 3);
	CHECK(!pthread_create(&t, NULL, late_word_thread, &p.w));
	CHECK(pvgpu_ring_wait_until(&p.g, until_done, &until_word, 0) == 0);
	pthread_join(t, NULL);
	CHECK(p.g.sleeps == 1 && p.w.kicks_sent == 1);
	CHECK(p.g.until == NULL);
	/* Told to spin 2 s, it spins through the 20 ms and does not sleep. */
	until_word = 0;
	CHECK(!pthread_create(&t, NULL, late_word_thread, &p.w));
	CHECK(pvgpu_ring_wait_until(&p.g, until_done, &until_word,
				    2000ull * 1000 * 1000) == 0);
	pthread_join(t, NULL);
	CHECK(p.g.sleeps == 1 && p.w.kicks_sent == 1);
	pair_fini(&p);
	munmap(region, pvgpu_ring_region_size(cap));
}

int main(void)
{
	test_region();
	test_one_thread();
	test_expect_wait();
	test_wait_until();
	test_bad_indexes();
	test_stale_bytes();
	test_runway();
	test_consumer_wakes_sleeping_producer();
	test_peer_gone();
	test_threads(0);		/* every wait sleeps */
	test_threads(2000);		/* mixed */
	test_threads(200000);		/* mostly spinning */
	test_processes();
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
