/*
 * vchan_guest.c - the guest half of vchan:// (in a Xen domU).
 *
 *   vchan://DOMID/NAME   the backend in domain DOMID offers this domain a
 *                        channel at /local/domain/DOMID/data/NAME/SELF
 *                        (SELF: our domid, read from xenstore)
 *   vchan://DOMID//ABS   the channel at the absolute xenstore path /ABS
 *
 * connect = libxenvchan_client_init (retried until the backend's offer
 * appears, or again when an offer closes before the setup is answered,
 * bounded), then the setup frame (vchan_proto.h) granting the
 * pages of the bulk window to DOMID.  sendv and recv move the pvgpu byte
 * stream over the ring with bounded waits (vchan_io.h).
 *
 * Environment: PVGPU_VCHAN_WINDOW_PAGES (default 1024, i.e. 4 MiB, which is
 * what xen-gntalloc allows by default; 0: no window), PVGPU_VCHAN_STALL_MS
 * (default 30000), PVGPU_VCHAN_CONNECT_MS (default 30000).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libxenvchan.h>
#include <xengnttab.h>
#include <xenstore.h>

#include "transport.h"
#include "vchan_guest.h"
#include "vchan_io.h"
#include "vchan_proto.h"
#include "window.h"

struct vchan_guest {
	struct libxenvchan *ctrl;
	xengntshr_handle *gs;
	void *win;			/* granted pages; NULL: no window */
	uint32_t npages;
	uint32_t *refs;
	int stall_ms;
};

static long env_long(const char *name, long def, long lo, long hi)
{
	const char *s = getenv(name);
	char *end;
	long v;

	if (!s || !*s)
		return def;
	v = strtol(s, &end, 0);
	if (*end || v < lo || v > hi)
		return def;
	return v;
}

/* Our own domid, from xenstore (the guest may read its own "domid"). */
static int self_domid(void)
{
	struct xs_handle *xs = xs_open(0);
	unsigned int len;
	char *v;
	int id = -1;

	if (!xs)
		return -1;
	v = xs_read(xs, XBT_NULL, "domid", &len);
	if (v) {
		char *end;
		long l = strtol(v, &end, 10);

		if (end != v && *end == '\0' && l > 0 && l < 0x7ff0)
			id = (int)l;
		free(v);
	}
	xs_close(xs);
	return id;
}

/* Grant the window's pages to the backend and lay it out (common/window.h). */
static int grant_window(struct vchan_guest *g, unsigned int backend)
{
	long pages = env_long("PVGPU_VCHAN_WINDOW_PAGES", 1024, 0,
			      PVGPU_VCHAN_MAX_PAGES);
	struct pvgpu_window_header *hdr;
	uint64_t size;

	if (pages < 8)
		return 0;		/* no window: the ring carries everything */
	g->refs = calloc((size_t)pages, sizeof(*g->refs));
	if (!g->refs)
		goto err_out;
	g->gs = xengntshr_open(NULL, 0);
	if (!g->gs)
		goto err_refs;
	g->win = xengntshr_share_pages(g->gs, backend, (int)pages, g->refs, 1);
	if (!g->win)
		goto err_gs;
	g->npages = (uint32_t)pages;
	size = (uint64_t)pages * PVGPU_VCHAN_PAGE;
	hdr = g->win;
	memset(hdr, 0, PVGPU_WINDOW_HDR_SIZE);
	hdr->magic = PVGPU_WINDOW_MAGIC;
	hdr->layout = PVGPU_WINDOW_LAYOUT;
	hdr->size = size;
	hdr->window_id = 0;
	hdr->staging_offset = PVGPU_WINDOW_HDR_SIZE;
	/* A quarter of the window for staging, in 4 slots of at most 4 MiB. */
	hdr->nslots = 4;
	hdr->slot_size = (uint32_t)((size / 4 / hdr->nslots) & ~(uint64_t)4095);
	if (hdr->slot_size > (4u << 20))
		hdr->slot_size = 4u << 20;
	return 0;

err_gs:
	xengntshr_close(g->gs);
	g->gs = NULL;
err_refs:
	free(g->refs);
	g->refs = NULL;
err_out:
	return -errno ? -errno : -ENOMEM;
}

static void drop_window(struct vchan_guest *g)
{
	if (g->win)
		xengntshr_unshare(g->gs, g->win, g->npages);
	if (g->gs)
		xengntshr_close(g->gs);
	free(g->refs);
	g->win = NULL;
	g->gs = NULL;
	g->refs = NULL;
	g->npages = 0;
}

static void vchan_close(struct pvgpu_transport *t)
{
	struct vchan_guest *g = t->priv;

	if (!g)
		return;
	if (g->ctrl)
		libxenvchan_close(g->ctrl);
	drop_window(g);
	free(g);
	t->priv = NULL;
	t->fd = -1;
}

static int vchan_connect(struct pvgpu_transport *t, const char *addr,
			 char *err, size_t errlen)
{
	int64_t t0 = pvgpu_vchan_now_ms();
	long connect_ms = env_long("PVGPU_VCHAN_CONNECT_MS", 30000, 0, 3600000);
	uint8_t hdr[PVGPU_VCHAN_SETUP_HDR], rep[PVGPU_VCHAN_REPLY_SIZE];
	struct vchan_guest *g;
	struct iovec iov[2];
	unsigned int backend;
	char path[256];
	int32_t status;
	int rc, self;

	self = self_domid();
	if (self < 0 && addr[strcspn(addr, "/") + 1] != '/') {
		snprintf(err, errlen, "cannot read our domid from xenstore (not in a Xen domU?)");
		return -ENODEV;
	}
	rc = pvgpu_vchan_parse(addr, &backend, path, sizeof(path), self);
	if (rc) {
		snprintf(err, errlen, "bad vchan address (want DOMID/NAME): %s", addr);
		return rc;
	}
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->stall_ms = (int)env_long("PVGPU_VCHAN_STALL_MS", 30000, 100, 3600000);
	t->priv = g;
again:
	while (!(g->ctrl = libxenvchan_client_init(NULL, (int)backend, path))) {
		if (pvgpu_vchan_now_ms() - t0 >= connect_ms) {
			snprintf(err, errlen, "no vchan offered at %s by domain %u: %s",
				 path, backend, strerror(errno));
			rc = -ECONNREFUSED;
			goto err_close;
		}
		usleep(50000);
	}
	t->fd = libxenvchan_fd_for_select(g->ctrl);
	if (grant_window(g, backend) < 0)
		drop_window(g);		/* carry on over the ring alone */
	pvgpu_vchan_setup_encode_hdr(hdr, g->npages);
	iov[0] = (struct iovec){ hdr, sizeof(hdr) };
	iov[1] = (struct iovec){ g->refs, (size_t)g->npages * 4u };
	rc = pvgpu_vchan_writev(g->ctrl, iov, 2, g->stall_ms);
	if (!rc)
		rc = pvgpu_vchan_read_all(g->ctrl, rep, sizeof(rep), g->stall_ms,
					  g->stall_ms);
	if (!rc)
		rc = pvgpu_vchan_reply_decode(rep, sizeof(rep), &status);
	/*
	 * Closed under us: the offer we found may be the last session's, still
	 * in xenstore while its worker ends (a program started right after
	 * another); the backend offers the channel again.  Look again, until
	 * the connect deadline.
	 */
	if ((rc == -EPIPE || rc == -ECONNRESET) &&
	    pvgpu_vchan_now_ms() - t0 < connect_ms) {
		libxenvchan_close(g->ctrl);
		g->ctrl = NULL;
		t->fd = -1;
		drop_window(g);
		usleep(50000);
		goto again;
	}
	if (rc) {
		snprintf(err, errlen, "vchan setup with domain %u: %s", backend,
			 strerror(-rc));
		goto err_close;
	}
	if (status)
		drop_window(g);		/* refused: the ring carries bulk data */
	return 0;

err_close:
	vchan_close(t);
	return rc;
}

static int vchan_sendv(struct pvgpu_transport *t, struct iovec *iov, int iovcnt)
{
	struct vchan_guest *g = t->priv;

	if (!g || !g->ctrl)
		return -ENOTCONN;
	return pvgpu_vchan_writev(g->ctrl, iov, iovcnt, g->stall_ms);
}

static int vchan_recv(struct pvgpu_transport *t, void *buf, size_t len)
{
	struct vchan_guest *g = t->priv;

	if (!g || !g->ctrl)
		return -ENOTCONN;
	/* A reply may take as long as the GPU work: no limit before the first byte. */
	return pvgpu_vchan_read_all(g->ctrl, buf, len, -1, g->stall_ms);
}

int pvgpu_vchan_guest_window(struct pvgpu_transport *t, void **base,
			     uint64_t *size)
{
	struct vchan_guest *g = t->priv;

	if (!g || !g->win)
		return -ENOENT;
	*base = g->win;
	*size = (uint64_t)g->npages * PVGPU_VCHAN_PAGE;
	return 0;
}

int pvgpu_vchan_guest_quiet(struct pvgpu_transport *t)
{
	struct vchan_guest *g = t->priv;

	if (!g || !g->ctrl)
		return 0;
	return libxenvchan_data_ready(g->ctrl) == 0 && libxenvchan_is_open(g->ctrl) != 0;
}

const struct pvgpu_transport_ops pvgpu_transport_vchan = {
	.scheme = "vchan",
	.connect = vchan_connect,
	.sendv = vchan_sendv,
	.recv = vchan_recv,
	.close = vchan_close,
	.quiet = pvgpu_vchan_guest_quiet,
	.window = pvgpu_vchan_guest_window,
};
