/*
 * vchan_echo.c - transport-vchan.so end to end under Xen (tests/xen).
 *
 *   vchan-echo host BASE NCHAN    dom0: the host half (vchan_host.h) serves
 *                                 NCHAN channels in turn: prints each peer's
 *                                 identity, checks the guest's pattern in
 *                                 the granted window, writes its own, and
 *                                 echoes framed messages (bytes + 1) until
 *                                 a zero length; a guest that corrupts its
 *                                 ring is reported and dropped.
 *   vchan-echo guest SO URI       domU: dlopens SO, connects to URI through
 *                                 its ops table, and checks the echoes and
 *                                 the window.
 *   vchan-echo corrupt PATH       domU: a raw libxenvchan client that sends
 *                                 a setup frame, then garbage ring indexes.
 *   vchan-echo steal PATH         domU: tries for 3 s to open another
 *                                 domain's channel; 0 when refused.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <signal.h>
#include <sys/wait.h>

#include <libxenvchan.h>

#include "transport.h"
#include "vchan_host.h"
#include "vchan_io.h"
#include "vchan_proto.h"
#include "window.h"

#define PATTERN_OFF (1u << 20)	/* past the staging slots of a 4 MiB window */
#define PATTERN_LEN 65536u

static const size_t sizes[] = { 1, 7, 4096, 65535, 65536, 65537, 300000, 1 << 20 };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/*
 * How long the host serves, and so how long a worker keeps its offer for a
 * guest that has not connected yet: under TCG on a loaded machine creating
 * one domain has taken 5 minutes and 1 MiB over the bare probe ring 4 (CI).
 * dom0's script stops the host sooner once its domUs are done.
 */
#define HOST_MS 1800000

/* One session, in a forked worker: 0 clean, 1 ended by an error, 10 never connected. */
static int serve(const char *base, const struct pvgpu_vchan_peer *peer)
{
	struct pvgpu_vchan_chan *c;
	uint8_t *buf = malloc((1 << 20) + 4);
	char err[256];
	void *win = NULL;
	uint64_t wsize = 0;
	int msgs = 0, rc;
	int64_t t0 = pvgpu_vchan_now_ms();

	if (!buf)
		return 1;
	/*
	 * Offered as the domain appears; the guest connects once booted, which
	 * under TCG on a loaded machine takes minutes.
	 */
	rc = pvgpu_vchan_chan_open(base, peer, HOST_MS, &c, err, sizeof(err));
	if (rc) {
		printf("vchan-echo: open %s: %s\n", peer->value, err);
		free(buf);
		return 10;
	}
	if (!pvgpu_vchan_chan_window(c, &win, &wsize)) {
		for (uint32_t i = 0; i < PATTERN_LEN; i++)
			((uint8_t *)win)[PATTERN_OFF + PATTERN_LEN + i] = (uint8_t)(i * 17 + 9);
		printf("vchan-echo: %s: window %llu KiB mapped\n", peer->value,
		       (unsigned long long)(wsize >> 10));
	} else {
		printf("vchan-echo: %s: no window\n", peer->value);
	}
	fflush(stdout);
	for (;;) {
		uint32_t len;
		struct iovec iov[2];

		rc = pvgpu_vchan_chan_recv(c, &len, 4, 60000);
		if (rc || len == 0)
			break;
		if (len > (1u << 20)) {
			rc = -EMSGSIZE;
			break;
		}
		rc = pvgpu_vchan_chan_recv(c, buf, len, 10000);
		if (rc)
			break;
		for (uint32_t i = 0; i < len; i++)
			buf[i]++;
		iov[0] = (struct iovec){ &len, 4 };
		iov[1] = (struct iovec){ buf, len };
		rc = pvgpu_vchan_chan_sendv(c, iov, 2);
		if (rc)
			break;
		msgs++;
	}
	if (win) {
		/* The guest wrote its pattern before its first message. */
		int ok = 1;

		for (uint32_t i = 0; i < PATTERN_LEN; i++)
			if (((uint8_t *)win)[PATTERN_OFF + i] != (uint8_t)(i * 31 + 3))
				ok = 0;
		printf("vchan-echo: %s: guest's window pattern %s\n", peer->value,
		       ok ? "ok" : "WRONG");
	}
	printf("vchan-echo: session %s (%s) ended after %d messages in %lld ms: %s\n",
	       peer->value, peer->name, msgs, (long long)(pvgpu_vchan_now_ms() - t0),
	       rc ? strerror(-rc) : "clean");
	fflush(stdout);
	pvgpu_vchan_chan_close(c);
	free(buf);
	return rc ? 1 : 0;
}

/*
 * As pvgpud would: the supervisor watches domains and forks a worker per
 * accepted one (the vchan is made in the worker); a domain whose session
 * ended is offered again while it lives.  Stops after nchan sessions that
 * got as far as a setup frame.
 */
static int host(const char *base, int nchan)
{
	struct pvgpu_vchan_listener *l;
	struct { pid_t pid; unsigned int domid; } kids[64];
	int nkids = 0, sessions = 0, rc;
	int64_t deadline = pvgpu_vchan_now_ms() + HOST_MS;
	char err[256];

	rc = pvgpu_vchan_host_listen(base, NULL, NULL, &l, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "vchan-echo: listen: %s\n", err);
		return 1;
	}
	printf("vchan-echo: host listening at %s\n", pvgpu_vchan_host_base(l));
	fflush(stdout);
	while (sessions < nchan && pvgpu_vchan_now_ms() < deadline) {
		struct pvgpu_vchan_peer peer;
		int status;
		pid_t pid;

		while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
			for (int i = 0; i < nkids; i++)
				if (kids[i].pid == pid) {
					if (WIFEXITED(status) && WEXITSTATUS(status) != 10)
						sessions++;
					pvgpu_vchan_host_done(l, kids[i].domid);
					kids[i] = kids[--nkids];
					break;
				}
		if (pvgpu_vchan_host_wait(l, 200) != 1 || nkids == 64 ||
		    pvgpu_vchan_host_accept(l, &peer))
			continue;
		printf("vchan-echo: peer kind=%s value=%s name=%s\n", peer.kind,
		       peer.value, peer.name);
		fflush(stdout);
		pid = fork();
		if (pid == 0)
			_exit(serve(base, &peer));
		if (pid < 0) {
			pvgpu_vchan_host_done(l, peer.domid);
			continue;
		}
		kids[nkids].pid = pid;
		kids[nkids++].domid = peer.domid;
	}
	for (int i = 0; i < nkids; i++)
		kill(kids[i].pid, SIGTERM);
	while (wait(NULL) > 0)
		;
	pvgpu_vchan_host_close(l);
	printf("vchan-echo: host served %d sessions\n", sessions);
	return sessions == nchan ? 0 : 1;
}

static int guest(const char *so, const char *uri)
{
	const struct pvgpu_transport_ops *ops;
	int (*window)(struct pvgpu_transport *, void **, uint64_t *);
	struct pvgpu_transport t = { .fd = -1 };
	const char *addr = strstr(uri, "://");
	uint8_t *buf = malloc(1 << 20), *back = malloc(1 << 20);
	void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
	char err[256];
	int64_t t0;
	void *win;
	uint64_t wsize;
	int rc;

	if (!h || !buf || !back || !addr) {
		fprintf(stderr, "vchan-echo: dlopen %s: %s\n", so, dlerror());
		return 1;
	}
	ops = dlsym(h, "pvgpu_transport_vchan");
	window = (int (*)(struct pvgpu_transport *, void **, uint64_t *))
		dlsym(h, "pvgpu_vchan_guest_window");
	if (!ops || !window)
		return 1;
	t.ops = ops;
	t0 = pvgpu_vchan_now_ms();
	rc = ops->connect(&t, addr + 3, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "vchan-echo: connect %s: %s\n", uri, err);
		return 1;
	}
	printf("vchan-echo: guest connected to %s in %lld ms\n", uri,
	       (long long)(pvgpu_vchan_now_ms() - t0));
	if (window(&t, &win, &wsize) == 0) {
		for (uint32_t i = 0; i < PATTERN_LEN; i++)
			((uint8_t *)win)[PATTERN_OFF + i] = (uint8_t)(i * 31 + 3);
		printf("vchan-echo: guest granted a %llu KiB window\n",
		       (unsigned long long)(wsize >> 10));
	}
	t0 = pvgpu_vchan_now_ms();
	for (size_t k = 0; k < NSIZES; k++) {
		uint32_t len = (uint32_t)sizes[k], rlen = 0;
		struct iovec iov[2] = { { &len, 4 }, { buf, len } };

		for (uint32_t i = 0; i < len; i++)
			buf[i] = (uint8_t)(i ^ k);
		rc = ops->sendv(&t, iov, 2);
		if (!rc)
			rc = ops->recv(&t, &rlen, 4);
		if (!rc && rlen != len)
			rc = -EPROTO;
		if (!rc)
			rc = ops->recv(&t, back, len);
		for (uint32_t i = 0; !rc && i < len; i++)
			if (back[i] != (uint8_t)((i ^ k) + 1))
				rc = -EBADMSG;
		if (rc) {
			fprintf(stderr, "vchan-echo: message of %u bytes: %s\n", len,
				strerror(-rc));
			return 1;
		}
	}
	printf("vchan-echo: guest echoes ok (%zu messages, up to 1 MiB) in %lld ms\n",
	       NSIZES, (long long)(pvgpu_vchan_now_ms() - t0));
	if (window(&t, &win, &wsize) == 0) {
		int ok = 1;

		for (uint32_t i = 0; i < PATTERN_LEN; i++)
			if (((uint8_t *)win)[PATTERN_OFF + PATTERN_LEN + i] != (uint8_t)(i * 17 + 9))
				ok = 0;
		printf("vchan-echo: guest sees the host's window pattern: %s\n",
		       ok ? "ok" : "WRONG");
	}
	{
		uint32_t zero = 0;
		struct iovec iov = { &zero, 4 };

		ops->sendv(&t, &iov, 1);
	}
	ops->close(&t);
	fflush(stdout);
	free(buf);
	free(back);
	return 0;
}

static int corrupt(const char *path)
{
	struct libxenvchan *c = NULL;
	uint8_t hdr[PVGPU_VCHAN_SETUP_HDR], rep[PVGPU_VCHAN_REPLY_SIZE];
	int64_t t0 = pvgpu_vchan_now_ms();

	/*
	 * Each try reads xenstore through dom0's xenstored: a pause between
	 * them leaves dom0's CPU (under TCG, scarce) to the host.
	 */
	while (!(c = libxenvchan_client_init(NULL, 0, path))) {
		if (pvgpu_vchan_now_ms() - t0 > 60000)
			return 1;
		usleep(100000);
	}
	pvgpu_vchan_setup_encode_hdr(hdr, 0);
	if (pvgpu_vchan_write_all(c, hdr, sizeof(hdr), 10000) ||
	    pvgpu_vchan_read_all(c, rep, sizeof(rep), 10000, 10000))
		return 1;
	/* Claim far more data than the ring holds, and ring the bell. */
	__atomic_store_n(&c->write.shr->prod, c->write.shr->cons + 0x40000000u,
			 __ATOMIC_RELEASE);
	xenevtchn_notify(c->event, c->event_port);
	printf("vchan-echo: corrupter wrote garbage ring indexes\n");
	fflush(stdout);
	sleep(3);	/* the host must drop us meanwhile */
	return 0;
}

/* A domU opening another domain's channel: must be refused. */
static int steal(const char *path)
{
	int64_t t0 = pvgpu_vchan_now_ms();
	struct libxenvchan *c;

	while (!(c = libxenvchan_client_init(NULL, 0, path))) {
		if (pvgpu_vchan_now_ms() - t0 > 3000) {
			printf("vchan-echo: steal %s: refused (%s)\n", path,
			       strerror(errno));
			fflush(stdout);
			return 0;
		}
		usleep(100000);
	}
	printf("vchan-echo: steal %s: OPENED another domain's channel\n", path);
	fflush(stdout);
	libxenvchan_close(c);
	return 1;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "host"))
		return host(argv[2], atoi(argv[3]));
	if (argc == 4 && !strcmp(argv[1], "guest"))
		return guest(argv[2], argv[3]);
	if (argc == 3 && !strcmp(argv[1], "corrupt"))
		return corrupt(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "steal"))
		return steal(argv[2]);
	fprintf(stderr, "usage: vchan-echo host BASE NCHAN | guest SO URI | corrupt PATH | steal PATH\n");
	return 2;
}
