/*
 * vchan_module.c - transport-vchan.so's one export: both halves of
 * vchan:// bound to pvgpu's ops tables (transport/transport.h, host.h).
 *
 * Guest: pvgpu_transport_vchan (vchan_guest.c), whose window is the
 * granted pages.  Host: the listener watches xenstore and offers a channel
 * to each domain the daemon wants (its policy or registry names it, by the
 * name dom0 gave it); accept hands out a domain without a session, as a
 * connection that holds no vchan yet: the worker makes it after fork()
 * (DESIGN §4) in open, and the session's end offers the domain again.
 *
 *   pvgpud --listen vchan://             channels at /local/domain/0/data/pvgpu/DOMID
 *   pvgpud --listen vchan://NAME         ... at /local/domain/0/data/NAME/DOMID
 *   pvgpud --listen vchan:///ABS/PATH    ... at /ABS/PATH/DOMID
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host.h"
#include "transport.h"
#include "vchan_guest.h"
#include "vchan_host.h"

/* The guest half's ops table (vchan_guest.c). */
extern const struct pvgpu_transport_ops pvgpu_transport_vchan;

struct vchan_conn {
	struct pvgpu_conn base;
	char path[160];			/* where channels are offered */
	struct pvgpu_vchan_peer peer;
	struct pvgpu_vchan_chan *chan;	/* in the worker, after open */
};

/* The daemon's filter, asked with the domain's identity and name. */
static int wanted(const char *name, unsigned int domid, void *arg)
{
	struct pvgpu_listener *l = arg;
	struct pvgpu_identity id = { .kind = PVGPU_ID_DOMID };

	if (!l->wanted)
		return 1;
	snprintf(id.value, sizeof(id.value), "%u", domid);
	return l->wanted(&id, name, l->wanted_arg);
}

static int vchan_listen(struct pvgpu_listener *l, const char *addr,
			char *err, size_t errlen)
{
	struct pvgpu_vchan_listener *vl;
	char base[160];
	int rc;

	if (!*addr)
		snprintf(base, sizeof(base), "%s", PVGPU_VCHAN_DEFAULT_BASE);
	else if (*addr == '/')
		snprintf(base, sizeof(base), "%s", addr);
	else if (!strchr(addr, '/') && strlen(addr) < 64)
		snprintf(base, sizeof(base), "/local/domain/0/data/%s", addr);
	else {
		snprintf(err, errlen, "vchan listen address '%s' is not NAME or /ABS/PATH",
			 addr);
		return -EINVAL;
	}
	rc = pvgpu_vchan_host_listen(base, wanted, l, &vl, err, errlen);
	if (rc)
		return rc;
	l->priv = vl;
	l->fd = -1;
	l->features = 0;	/* who: the domid and dom0's name for it, from the channel */
	return 0;
}

static int vchan_poll_fd(const struct pvgpu_listener *l)
{
	return pvgpu_vchan_host_fd(l->priv);
}

static int vchan_pending(struct pvgpu_listener *l)
{
	return pvgpu_vchan_host_wait(l->priv, 0) == 1;
}

static const struct pvgpu_conn_ops vchan_conn_ops;

static int vchan_accept(struct pvgpu_listener *l, struct pvgpu_peer *peer,
			struct pvgpu_conn **conn)
{
	struct vchan_conn *c = calloc(1, sizeof(*c));
	int rc;

	if (!c)
		return -ENOMEM;
	rc = pvgpu_vchan_host_accept(l->priv, &c->peer);
	if (rc) {
		free(c);
		return rc;
	}
	c->base.ops = &vchan_conn_ops;
	c->base.fd = -1;
	snprintf(c->path, sizeof(c->path), "%s", pvgpu_vchan_host_base(l->priv));
	peer->id.kind = PVGPU_ID_DOMID;
	snprintf(peer->id.value, sizeof(peer->id.value), "%u", c->peer.domid);
	snprintf(peer->name, sizeof(peer->name), "%s", c->peer.name);
	snprintf(peer->identity, sizeof(peer->identity), "xen domid=%u (%s)",
		 c->peer.domid, c->peer.name[0] ? c->peer.name : "no name");
	peer->cookie = c->peer.domid;
	*conn = &c->base;
	return 0;
}

static void vchan_done(struct pvgpu_listener *l, uint64_t cookie)
{
	pvgpu_vchan_host_done(l->priv, (unsigned int)cookie);
}

/*
 * In a worker: the xenstore connection and its watches are the
 * supervisor's; touching them (an unwatch) would be heard by xenstored
 * as the supervisor's.  Leave them be.
 */
static void vchan_forget(struct pvgpu_listener *l)
{
	(void)l;
}

static void vchan_close_listener(struct pvgpu_listener *l)
{
	pvgpu_vchan_host_close(l->priv);
	l->priv = NULL;
}

static int vchan_open(struct pvgpu_conn *base, char *err, size_t errlen)
{
	struct vchan_conn *c = (struct vchan_conn *)base;

	/* Waits for the guest as long as its domain lives. */
	return pvgpu_vchan_chan_open(c->path, &c->peer, -1, &c->chan, err, errlen);
}

static ssize_t vchan_recv(struct pvgpu_conn *base, void *buf, size_t len,
			  int nonblock)
{
	struct vchan_conn *c = (struct vchan_conn *)base;

	return pvgpu_vchan_chan_read(c->chan, buf, len, nonblock);
}

static int vchan_sendv(struct pvgpu_conn *base, struct iovec *iov, int iovcnt)
{
	struct vchan_conn *c = (struct vchan_conn *)base;

	return pvgpu_vchan_chan_sendv(c->chan, iov, iovcnt);
}

static int vchan_wait(struct pvgpu_conn *base, int64_t timeout_ns)
{
	struct vchan_conn *c = (struct vchan_conn *)base;
	int ms = timeout_ns < 0 ? -1 :
		 (int)((timeout_ns + 999999) / 1000000 > 3600000 ? 3600000 :
		       (timeout_ns + 999999) / 1000000);

	return pvgpu_vchan_chan_wait(c->chan, ms);
}

static int vchan_hung_up(struct pvgpu_conn *base)
{
	struct vchan_conn *c = (struct vchan_conn *)base;

	return pvgpu_vchan_chan_hung_up(c->chan);
}

static int vchan_window(struct pvgpu_conn *base, void **p, uint64_t *size)
{
	struct vchan_conn *c = (struct vchan_conn *)base;

	return pvgpu_vchan_chan_window(c->chan, p, size);
}

static void vchan_release(struct pvgpu_conn *base)
{
	struct vchan_conn *c = (struct vchan_conn *)base;

	pvgpu_vchan_chan_close(c->chan);	/* NULL in the supervisor */
	free(c);
}

static const struct pvgpu_conn_ops vchan_conn_ops = {
	.open = vchan_open,
	.recv = vchan_recv,
	.sendv = vchan_sendv,
	.wait = vchan_wait,
	.hung_up = vchan_hung_up,
	.window = vchan_window,
	.release = vchan_release,
	.close = vchan_release,
};

static const struct pvgpu_host_ops vchan_host_ops = {
	.scheme = "vchan",
	.listen = vchan_listen,
	.poll_fd = vchan_poll_fd,
	.pending = vchan_pending,
	.accept = vchan_accept,
	.done = vchan_done,
	.forget = vchan_forget,
	.close = vchan_close_listener,
};

__attribute__((visibility("default")))
const struct pvgpu_transport_module pvgpu_transport_module = {
	.abi = PVGPU_TRANSPORT_ABI,
	.scheme = "vchan",
	.guest = &pvgpu_transport_vchan,
	.host = &vchan_host_ops,
};
