/* vchan_host.c - the host half of vchan://; see vchan_host.h. */
#include "vchan_host.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#include <libxenvchan.h>
#include <xengnttab.h>
#include <xenstore.h>

#include "vchan_io.h"
#include "vchan_proto.h"
#include "window.h"

#define MAX_DOMAINS 1024
/* How often a waiting worker looks whether its domain still exists. */
#define ALIVE_CHECK_MS 1000

struct vchan_domain {
	unsigned int domid;
	char name[64];
	int busy;		/* a worker serves it */
	int seen;		/* still there at the last scan */
};

struct pvgpu_vchan_listener {
	struct xs_handle *xs;
	char base[160];
	pvgpu_vchan_filter filter;
	void *arg;
	struct vchan_domain *doms;
	size_t ndoms;
	int dirty;		/* a watch fired: scan again */
	int debug;		/* PVGPU_VCHAN_DEBUG: trace offers on stderr */
};

struct pvgpu_vchan_chan {
	struct libxenvchan *ctrl;
	struct xs_handle *xs;	/* for the domain's liveness */
	xengnttab_handle *gt;
	void *win;
	uint32_t npages;
	struct pvgpu_vchan_peer peer;
	int stall_ms;
	int64_t next_alive;	/* when hung_up looks at xenstore next */
};

static long env_long(const char *name, long def, long lo, long hi)
{
	const char *s = getenv(name);
	char *end;
	long v;

	if (!s || !*s)
		return def;
	v = strtol(s, &end, 0);
	return (*end || v < lo || v > hi) ? def : v;
}

/* The name dom0 gave domid, into name ("" if none): 0, or -ENOENT if gone. */
static int domain_name(struct xs_handle *xs, unsigned int domid, char *name,
		       size_t len)
{
	char path[64];
	unsigned int n;
	char *v;

	snprintf(path, sizeof(path), "/local/domain/%u/domid", domid);
	v = xs_read(xs, XBT_NULL, path, &n);
	if (!v)
		return -ENOENT;
	free(v);
	snprintf(path, sizeof(path), "/local/domain/%u/name", domid);
	v = xs_read(xs, XBT_NULL, path, &n);
	name[0] = '\0';
	if (v) {
		/* Printable names only: it ends up in logs and the policy. */
		size_t i;

		for (i = 0; i < n && i + 1 < len && v[i] >= 0x20 && v[i] < 0x7f; i++)
			name[i] = v[i];
		name[i] = '\0';
		free(v);
	}
	return 0;
}

static struct vchan_domain *find(struct pvgpu_vchan_listener *l,
				 unsigned int domid)
{
	for (size_t i = 0; i < l->ndoms; i++)
		if (l->doms[i].domid == domid)
			return &l->doms[i];
	return NULL;
}

/* Look at /local/domain again: add the new wanted domains, drop the gone. */
static int scan(struct pvgpu_vchan_listener *l)
{
	unsigned int n = 0;
	char **ents = xs_directory(l->xs, XBT_NULL, "/local/domain", &n);

	if (!ents)
		return -errno;
	for (size_t i = 0; i < l->ndoms; i++)
		l->doms[i].seen = 0;
	for (unsigned int i = 0; i < n; i++) {
		char *end, name[64];
		unsigned long id = strtoul(ents[i], &end, 10);
		struct vchan_domain *d;

		if (end == ents[i] || *end || id == 0 || id >= 0x7ff0)
			continue;
		d = find(l, (unsigned int)id);
		if (d) {
			d->seen = 1;
			continue;
		}
		if (domain_name(l->xs, (unsigned int)id, name, sizeof(name)))
			continue;
		if (l->filter && !l->filter(name, (unsigned int)id, l->arg))
			continue;
		if (l->ndoms >= MAX_DOMAINS)
			break;
		d = &l->doms[l->ndoms++];
		*d = (struct vchan_domain){ .domid = (unsigned int)id, .seen = 1 };
		snprintf(d->name, sizeof(d->name), "%s", name);
	}
	free(ents);
	/* Forget the gone ones; their workers see it themselves. */
	for (size_t i = 0; i < l->ndoms;) {
		if (!l->doms[i].seen)
			l->doms[i] = l->doms[--l->ndoms];
		else
			i++;
	}
	l->dirty = 0;
	if (l->debug) {
		fprintf(stderr, "vchan: scan: %zu domain(s):", l->ndoms);
		for (size_t i = 0; i < l->ndoms; i++)
			fprintf(stderr, " %u%s", l->doms[i].domid,
				l->doms[i].busy ? "(busy)" : "");
		fputc('\n', stderr);
	}
	return 0;
}

int pvgpu_vchan_host_listen(const char *base, pvgpu_vchan_filter filter,
			    void *arg, struct pvgpu_vchan_listener **out,
			    char *err, size_t errlen)
{
	struct pvgpu_vchan_listener *l = calloc(1, sizeof(*l));
	int rc;

	if (!l)
		return -ENOMEM;
	snprintf(l->base, sizeof(l->base), "%s", base ? base : PVGPU_VCHAN_DEFAULT_BASE);
	l->filter = filter;
	l->arg = arg;
	l->debug = getenv("PVGPU_VCHAN_DEBUG") != NULL;
	l->doms = calloc(MAX_DOMAINS, sizeof(*l->doms));
	if (!l->doms) {
		rc = -ENOMEM;
		goto err_free;
	}
	l->xs = xs_open(0);
	if (!l->xs) {
		rc = -errno;
		snprintf(err, errlen, "xenstore: %s (is xenstored running? are we dom0?)",
			 strerror(errno));
		goto err_doms;
	}
	if (!xs_watch(l->xs, "@introduceDomain", "i") ||
	    !xs_watch(l->xs, "@releaseDomain", "r")) {
		rc = -errno;
		snprintf(err, errlen, "xenstore watch: %s", strerror(errno));
		goto err_xs;
	}
	rc = scan(l);
	if (rc) {
		snprintf(err, errlen, "listing /local/domain: %s", strerror(-rc));
		goto err_xs;
	}
	*out = l;
	return 0;

err_xs:
	xs_close(l->xs);
err_doms:
	free(l->doms);
err_free:
	free(l);
	return rc;
}

int pvgpu_vchan_host_fd(struct pvgpu_vchan_listener *l)
{
	return xs_fileno(l->xs);
}

static int ready(struct pvgpu_vchan_listener *l)
{
	for (size_t i = 0; i < l->ndoms; i++)
		if (!l->doms[i].busy)
			return 1;
	return 0;
}

/* Drain the watch events that are there; mark a rescan. */
static void drain(struct pvgpu_vchan_listener *l)
{
	struct pollfd pfd = { .fd = xs_fileno(l->xs), .events = POLLIN };

	while (poll(&pfd, 1, 0) == 1) {
		unsigned int n;
		char **ev = xs_read_watch(l->xs, &n);

		if (!ev)
			break;
		free(ev);
		l->dirty = 1;
	}
}

int pvgpu_vchan_host_wait(struct pvgpu_vchan_listener *l, int timeout_ms)
{
	int64_t deadline = timeout_ms < 0 ? -1 : pvgpu_vchan_now_ms() + timeout_ms;
	struct pollfd pfd = { .fd = xs_fileno(l->xs), .events = POLLIN };

	for (;;) {
		int left = -1, n;

		drain(l);
		if (l->dirty && scan(l) < 0)
			return -EIO;
		if (ready(l))
			return 1;
		if (deadline >= 0) {
			int64_t d = deadline - pvgpu_vchan_now_ms();

			if (d <= 0)
				return 0;
			left = (int)d;
		}
		n = poll(&pfd, 1, left);
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

int pvgpu_vchan_host_accept(struct pvgpu_vchan_listener *l,
			    struct pvgpu_vchan_peer *peer)
{
	drain(l);
	if (l->dirty && scan(l) < 0) {
		if (l->debug)
			fprintf(stderr, "vchan: accept: scan failed: %s\n", strerror(errno));
		return -EIO;
	}
	for (size_t i = 0; i < l->ndoms; i++) {
		struct vchan_domain *d = &l->doms[i];

		if (d->busy)
			continue;
		d->busy = 1;
		if (l->debug)
			fprintf(stderr, "vchan: accept %u\n", d->domid);
		memset(peer, 0, sizeof(*peer));
		peer->domid = d->domid;
		snprintf(peer->kind, sizeof(peer->kind), "xen");
		snprintf(peer->value, sizeof(peer->value), "domid=%u", d->domid);
		snprintf(peer->name, sizeof(peer->name), "%s", d->name);
		return 0;
	}
	return -EAGAIN;
}

void pvgpu_vchan_host_done(struct pvgpu_vchan_listener *l, unsigned int domid)
{
	struct vchan_domain *d = find(l, domid);

	if (l->debug)
		fprintf(stderr, "vchan: done %u (%s)\n", domid,
			d ? (d->busy ? "offered again" : "was not busy") : "gone");
	if (d)
		d->busy = 0;
}

int pvgpu_vchan_host_alive(struct pvgpu_vchan_listener *l, unsigned int domid)
{
	drain(l);
	if (l->dirty)
		scan(l);
	return find(l, domid) != NULL;
}

const char *pvgpu_vchan_host_base(struct pvgpu_vchan_listener *l)
{
	return l->base;
}

void pvgpu_vchan_host_close(struct pvgpu_vchan_listener *l)
{
	if (!l)
		return;
	xs_unwatch(l->xs, "@introduceDomain", "i");
	xs_unwatch(l->xs, "@releaseDomain", "r");
	xs_close(l->xs);
	free(l->doms);
	free(l);
}

/* ---- one channel, in the worker ---------------------------------------- */

/* The domain is still the one we were given (same domid, same name). */
static int chan_alive(struct pvgpu_vchan_chan *c)
{
	char name[64];

	if (domain_name(c->xs, c->peer.domid, name, sizeof(name)))
		return 0;
	return strcmp(name, c->peer.name) == 0;
}

/* libxenvchan_server_init, one at a time across pvgpud's processes. */
static struct libxenvchan *offer(unsigned int domid, const char *path)
{
	const char *lock = getenv("PVGPU_VCHAN_LOCK");
	size_t ring = (size_t)env_long("PVGPU_VCHAN_RING", 65536, 1024, 1 << 20);
	struct libxenvchan *ctrl;
	int fd, e;

	fd = open(lock ? lock : PVGPU_VCHAN_LOCK, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd >= 0)
		flock(fd, LOCK_EX);
	/* xenstored answers EAGAIN to a transaction over quota: retry a little. */
	for (int i = 0;; i++) {
		ctrl = libxenvchan_server_init(NULL, (int)domid, path, ring, ring);
		if (ctrl || errno != EAGAIN || i == 20)
			break;
		usleep(10000u << (i < 5 ? i : 5));
	}
	e = errno;
	if (fd >= 0)
		close(fd);	/* drops the lock */
	errno = e;
	return ctrl;
}

/* Wait for readable data up to timeout_ms (-1: none) while the domain lives. */
static int wait_data(struct pvgpu_vchan_chan *c, int timeout_ms)
{
	int64_t deadline = timeout_ms < 0 ? -1 : pvgpu_vchan_now_ms() + timeout_ms;
	int64_t next_alive = pvgpu_vchan_now_ms() + ALIVE_CHECK_MS;

	for (;;) {
		int rc, slice = 250;

		rc = pvgpu_vchan_check(c->ctrl);
		if (rc)
			return rc;
		if (libxenvchan_data_ready(c->ctrl) > 0)
			return 1;
		if (libxenvchan_is_open(c->ctrl) == 0)
			return -ECONNRESET;
		if (pvgpu_vchan_now_ms() >= next_alive) {
			if (!chan_alive(c))
				return -ECONNRESET;
			next_alive = pvgpu_vchan_now_ms() + ALIVE_CHECK_MS;
		}
		if (deadline >= 0) {
			int64_t left = deadline - pvgpu_vchan_now_ms();

			if (left <= 0)
				return 0;
			if (left < slice)
				slice = (int)left;
		}
		rc = pvgpu_vchan_wait(c->ctrl, slice);
		if (rc < 0)
			return rc;
	}
}

static int map_window(struct pvgpu_vchan_chan *c, const uint32_t *refs,
		      uint32_t npages)
{
	struct pvgpu_window_header hdr;
	uint64_t size = (uint64_t)npages * PVGPU_VCHAN_PAGE;

	if (npages == 0)
		return -ENOENT;
	c->gt = xengnttab_open(NULL, 0);
	if (!c->gt)
		return -errno;
	/* Each granted page once; a guest granting garbage refs fails here. */
	c->win = xengnttab_map_domain_grant_refs(c->gt, npages, c->peer.domid,
						 (uint32_t *)refs,
						 PROT_READ | PROT_WRITE);
	if (!c->win)
		goto err_gt;
	c->npages = npages;
	memcpy(&hdr, c->win, sizeof(hdr));	/* one look: the guest may rewrite it */
	if (pvgpu_vchan_window_check(&hdr, size)) {
		errno = EINVAL;
		goto err_unmap;
	}
	return 0;

err_unmap:
	xengnttab_unmap(c->gt, c->win, npages);
	c->win = NULL;
	c->npages = 0;
err_gt:
	{
		int e = errno ? errno : EIO;

		xengnttab_close(c->gt);
		c->gt = NULL;
		return -e;
	}
}

int pvgpu_vchan_chan_open(const char *base, const struct pvgpu_vchan_peer *peer,
			  int wait_ms, struct pvgpu_vchan_chan **out,
			  char *err, size_t errlen)
{
	uint8_t hdr[PVGPU_VCHAN_SETUP_HDR], rep[PVGPU_VCHAN_REPLY_SIZE];
	struct pvgpu_vchan_setup setup;
	struct pvgpu_vchan_chan *c;
	uint32_t *refs = NULL;
	char path[256];
	int rc, st;

	if (snprintf(path, sizeof(path), "%s/%u", base ? base : PVGPU_VCHAN_DEFAULT_BASE,
		     peer->domid) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->peer = *peer;
	c->stall_ms = (int)env_long("PVGPU_VCHAN_STALL_MS", 10000, 100, 3600000);
	c->xs = xs_open(0);
	if (!c->xs) {
		rc = -errno;
		snprintf(err, errlen, "xenstore: %s", strerror(errno));
		goto err_free;
	}
	c->ctrl = offer(peer->domid, path);
	if (!c->ctrl) {
		rc = errno ? -errno : -EIO;
		snprintf(err, errlen, "offering %s to domain %u: %s", path,
			 peer->domid, strerror(-rc));
		goto err_xs;
	}
	c->ctrl->blocking = 0;

	rc = wait_data(c, wait_ms);
	if (rc == 0)
		rc = -ETIMEDOUT;
	if (rc < 0) {
		snprintf(err, errlen, "domain %u (%s) did not connect at %s: %s",
			 peer->domid, peer->name, path, strerror(-rc));
		goto err_ctrl;
	}
	rc = pvgpu_vchan_read_all(c->ctrl, hdr, sizeof(hdr), c->stall_ms, c->stall_ms);
	if (!rc)
		rc = pvgpu_vchan_setup_decode_hdr(hdr, sizeof(hdr), &setup);
	if (rc) {
		snprintf(err, errlen, "setup frame from domain %u: %s", peer->domid,
			 strerror(-rc));
		goto err_ctrl;
	}
	if (setup.npages) {
		refs = malloc((size_t)setup.npages * 4u);
		if (!refs) {
			rc = -ENOMEM;
			goto err_ctrl;
		}
		rc = pvgpu_vchan_read_all(c->ctrl, refs, (size_t)setup.npages * 4u,
					  c->stall_ms, c->stall_ms);
		if (rc) {
			snprintf(err, errlen, "grant refs from domain %u: %s",
				 peer->domid, strerror(-rc));
			goto err_refs;
		}
	}
	/* A window that cannot be mapped is refused, not fatal. */
	st = setup.npages ? map_window(c, refs, setup.npages) : 0;
	pvgpu_vchan_reply_encode(rep, st);
	rc = pvgpu_vchan_write_all(c->ctrl, rep, sizeof(rep), c->stall_ms);
	if (rc) {
		snprintf(err, errlen, "setup reply to domain %u: %s", peer->domid,
			 strerror(-rc));
		goto err_refs;
	}
	free(refs);
	*out = c;
	return 0;

err_refs:
	free(refs);
err_ctrl:
	pvgpu_vchan_chan_close(c);
	return rc;
err_xs:
	xs_close(c->xs);
err_free:
	free(c);
	return rc;
}

int pvgpu_vchan_chan_recv(struct pvgpu_vchan_chan *c, void *buf, size_t len,
			  int idle_ms)
{
	int rc;

	if (len == 0)
		return 0;
	rc = wait_data(c, idle_ms);
	if (rc == 0)
		return -ETIMEDOUT;
	if (rc < 0)
		return rc;
	return pvgpu_vchan_read_all(c->ctrl, buf, len, c->stall_ms, c->stall_ms);
}

ssize_t pvgpu_vchan_chan_read(struct pvgpu_vchan_chan *c, void *buf, size_t len,
			      int nonblock)
{
	int rc, n;

	if (len == 0)
		return 0;
	if (len > INT_MAX)
		len = INT_MAX;
	if (nonblock) {
		rc = pvgpu_vchan_check(c->ctrl);
		if (rc)
			return rc;
		if (libxenvchan_data_ready(c->ctrl) <= 0)
			return libxenvchan_is_open(c->ctrl) == 0 ? 0 : -EAGAIN;
	} else {
		rc = wait_data(c, -1);
		if (rc == -ECONNRESET)
			return 0;	/* the guest closed, or its domain went */
		if (rc < 0)
			return rc;
	}
	/* Non-blocking: as much as is there, up to len. */
	n = libxenvchan_read(c->ctrl, buf, len);
	if (n < 0)
		return -EIO;
	return n ? n : -EAGAIN;
}

int pvgpu_vchan_chan_hung_up(struct pvgpu_vchan_chan *c)
{
	int64_t now = pvgpu_vchan_now_ms();

	if (pvgpu_vchan_check(c->ctrl) || libxenvchan_is_open(c->ctrl) == 0)
		return 1;
	/* A destroyed domain closes nothing: look at xenstore now and then. */
	if (now >= c->next_alive) {
		c->next_alive = now + ALIVE_CHECK_MS;
		if (!chan_alive(c))
			return 1;
	}
	return 0;
}

int pvgpu_vchan_chan_sendv(struct pvgpu_vchan_chan *c, struct iovec *iov,
			   int iovcnt)
{
	return pvgpu_vchan_writev(c->ctrl, iov, iovcnt, c->stall_ms);
}

int pvgpu_vchan_chan_wait(struct pvgpu_vchan_chan *c, int timeout_ms)
{
	int rc = wait_data(c, timeout_ms);

	return rc == -ECONNRESET ? 1 : rc;	/* a hang-up is readable */
}

int pvgpu_vchan_chan_fd(struct pvgpu_vchan_chan *c)
{
	return libxenvchan_fd_for_select(c->ctrl);
}

int pvgpu_vchan_chan_window(struct pvgpu_vchan_chan *c, void **base,
			    uint64_t *size)
{
	if (!c->win)
		return -ENOENT;
	*base = c->win;
	*size = (uint64_t)c->npages * PVGPU_VCHAN_PAGE;
	return 0;
}

void pvgpu_vchan_chan_close(struct pvgpu_vchan_chan *c)
{
	if (!c)
		return;
	if (c->win)
		xengnttab_unmap(c->gt, c->win, c->npages);
	if (c->gt)
		xengnttab_close(c->gt);
	if (c->ctrl)
		libxenvchan_close(c->ctrl);	/* also removes the xenstore offer */
	if (c->xs)
		xs_close(c->xs);
	free(c);
}
