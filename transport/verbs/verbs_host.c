/*
 * verbs_host.c - the host half of verbs:// (pvgpud --listen
 * verbs://ADDR:PORT), bound to pvgpud's host ops (transport/host.h).
 *
 *   supervisor:  listen -> (poll the listening event channel) -> accept: a
 *                connect request whose private data was checked; the
 *                caller is the per-VM token in it (PVGPU_ID_TOKEN, from
 *                the channel: never the message).  Bad private data is
 *                rejected there and then; only that caller hears of it.
 *   worker:      open (after fork(): its own device context, PD, CQs, QP
 *                and rings; the QP brought to RTS with rdma_init_qp_attr,
 *                then rdma_accept), then recv / sendv / wait, close.
 *
 * The supervisor moves each request's rdma_cm id to an event channel of
 * its own before the fork, and the worker moves it again to one it opens
 * itself (the kernel takes rdma_cm commands only on a descriptor the
 * calling process opened).  The supervisor then drops its copy of the
 * request's channel (release): the worker keeps the connection alive, and
 * a request never handed to a worker (the policy refused it) dies with the
 * last descriptor, which the kernel answers with a reject.  It never calls rdma_destroy_id on an id a worker
 * may use: that would be heard by the kernel as the worker's, and it
 * would wait for the worker's events.  So the supervisor leaves
 * librdmacm's small record of each such id allocated (a few hundred bytes
 * per session).
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "addr.h"
#include "host.h"
#include "verbs_conn.h"

struct verbs_listener {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	uint32_t timeout_ms;		/* ?timeout=, for each connection */
};

/* One caller: a checked request in the supervisor, a connection in the worker. */
struct verbs_host_conn {
	struct pvgpu_conn base;
	struct pvgpu_verbs_hello hello;
	struct rdma_cm_id *id;		/* on ch, its own event channel */
	struct rdma_event_channel *ch;
	struct verbs_conn *c;		/* in the worker, after open */
	uint64_t poll_ns;
	uint32_t timeout_ms;
};

static const struct pvgpu_conn_ops verbs_conn_ops;

static void say(const char *fmt, const char *a, const char *b)
{
	char line[400];
	int n;

	/*
	 * pvgpud's log format; this object links nothing of pvgpud.  One
	 * write, as pvgpud's log does.  The supervisor's only: in a worker,
	 * stderr is the guest's.
	 */
	n = snprintf(line, sizeof(line), "pvgpud: warn: ");
	n += snprintf(line + n, sizeof(line) - (size_t)n, fmt, a, b);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, (size_t)n) < 0)
		return;
}

static int verbs_listen(struct pvgpu_listener *l, const char *addr,
			char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE };
	struct verbs_listener *vl;
	struct addrinfo *ai = NULL;
	char host[256], hostport[300], port[8];
	uint32_t timeout_ms = PVGPU_VERBS_TIMEOUT_MS;
	int rc, flags;

	if (pvgpu_verbs_addr_options(addr, hostport, sizeof(hostport), &timeout_ms,
				     err, errlen))
		return -EINVAL;
	/* The parser tcp:// and the guests use: ports mean the same to all. */
	if (pvgpu_host_port(hostport, host, sizeof(host), port, sizeof(port))) {
		snprintf(err, errlen, "verbs address \"%s\": expected ADDR:PORT, PORT 1..65535",
			 hostport);
		return -EINVAL;
	}
	rc = getaddrinfo(host, port, &hints, &ai);
	if (rc) {
		snprintf(err, errlen, "%s: %s", host, gai_strerror(rc));
		return -EINVAL;
	}
	vl = calloc(1, sizeof(*vl));
	if (!vl) {
		rc = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto err_ai;
	}
	vl->timeout_ms = timeout_ms;
	errno = 0;
	vl->ch = rdma_create_event_channel();
	if (!vl->ch || rdma_create_id(vl->ch, &vl->id, vl, RDMA_PS_TCP))
		goto err_cm;
	if (rdma_bind_addr(vl->id, ai->ai_addr) || rdma_listen(vl->id, 64))
		goto err_cm;
	flags = fcntl(vl->ch->fd, F_GETFL);
	if (flags < 0 || fcntl(vl->ch->fd, F_SETFL, flags | O_NONBLOCK))
		goto err_cm;
	freeaddrinfo(ai);
	l->priv = vl;
	l->fd = -1;
	l->features = 0;	/* who: the token in the connect request */
	return 0;

err_cm:
	rc = errno ? -errno : -EIO;
	snprintf(err, errlen, "verbs://%s: %s (an RDMA device with that address? see `rdma link`)",
		 addr, strerror(-rc));
	if (vl->id)
		rdma_destroy_id(vl->id);
	if (vl->ch)
		rdma_destroy_event_channel(vl->ch);
	free(vl);
err_ai:
	freeaddrinfo(ai);
	return rc;
}

static int verbs_poll_fd(const struct pvgpu_listener *l)
{
	const struct verbs_listener *vl = l->priv;

	return vl->ch->fd;
}

/* "verbs:ADDR:PORT" for the log, ADDR for admission (peer->addr). */
static void peer_name(struct rdma_cm_id *id, struct pvgpu_peer *peer)
{
	struct sockaddr *sa = rdma_get_peer_addr(id);
	char a[INET6_ADDRSTRLEN] = "?";
	unsigned int port = 0;

	if (sa && sa->sa_family == AF_INET) {
		struct sockaddr_in *in = (struct sockaddr_in *)sa;

		inet_ntop(AF_INET, &in->sin_addr, a, sizeof(a));
		port = ntohs(in->sin_port);
	} else if (sa && sa->sa_family == AF_INET6) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)sa;

		inet_ntop(AF_INET6, &in6->sin6_addr, a, sizeof(a));
		port = ntohs(in6->sin6_port);
	}
	snprintf(peer->identity, sizeof(peer->identity), "verbs:%s:%u", a, port);
	if (port)
		snprintf(peer->addr, sizeof(peer->addr), "%s", a);
}

static int verbs_accept(struct pvgpu_listener *l, struct pvgpu_peer *peer,
			struct pvgpu_conn **conn)
{
	struct verbs_listener *vl = l->priv;
	struct verbs_host_conn *hc;
	struct rdma_cm_event *e;
	struct rdma_cm_id *id;
	char why[160];
	int rc;

	if (rdma_get_cm_event(vl->ch, &e))
		return errno == EAGAIN ? -EAGAIN : -errno;
	if (e->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
		/* Ids moved to a channel of their own report there, not here. */
		rdma_ack_cm_event(e);
		return -EAGAIN;
	}
	id = e->id;
	peer_name(id, peer);
	hc = calloc(1, sizeof(*hc));
	if (!hc) {
		rc = -ENOMEM;
		goto err_reject;
	}
	if (pvgpu_verbs_hello_decode(e->param.conn.private_data,
				     e->param.conn.private_data_len, &hc->hello,
				     why, sizeof(why))) {
		say("%s: refused: %s", peer->identity, why);
		rc = -EAGAIN;		/* said: nothing more for the supervisor */
		goto err_reject;
	}
	rdma_ack_cm_event(e);
	e = NULL;
	/* Its events go to the worker alone, on a channel of its own. */
	hc->ch = rdma_create_event_channel();
	if (!hc->ch || rdma_migrate_id(id, hc->ch)) {
		rc = errno ? -errno : -EIO;
		say("%s: %s", peer->identity, "rdma_migrate_id failed");
		goto err_reject;
	}
	hc->id = id;
	hc->poll_ns = 200000;	/* spin this long for ring credit, then nap */
	hc->timeout_ms = vl->timeout_ms;
	hc->base.ops = &verbs_conn_ops;
	hc->base.fd = hc->ch->fd;	/* kept by the worker */
	peer->id.kind = PVGPU_ID_TOKEN;
	snprintf(peer->id.value, sizeof(peer->id.value), "%s", hc->hello.token);
	*conn = &hc->base;
	return 0;

err_reject:
	rdma_reject(id, NULL, 0);
	if (e)
		rdma_ack_cm_event(e);
	rdma_destroy_id(id);
	if (hc && hc->ch)
		rdma_destroy_event_channel(hc->ch);
	free(hc);
	return rc;
}

/* In a worker: the listening id is the supervisor's; drop our descriptor only. */
static void verbs_forget(struct pvgpu_listener *l)
{
	struct verbs_listener *vl = l->priv;

	if (vl && vl->ch)
		close(vl->ch->fd);
	l->priv = NULL;
	l->ops = NULL;
}

static void verbs_close_listener(struct pvgpu_listener *l)
{
	struct verbs_listener *vl = l->priv;

	if (!vl)
		return;
	rdma_destroy_id(vl->id);
	rdma_destroy_event_channel(vl->ch);
	free(vl);
	l->priv = NULL;
}

/* In the worker, after fork(): everything verbs, then accept. */
static int verbs_open(struct pvgpu_conn *base, char *err, size_t errlen)
{
	struct verbs_host_conn *hc = (struct verbs_host_conn *)base;
	struct rdma_conn_param param;
	struct pvgpu_verbs_ring ring;
	struct rdma_cm_event *ev;
	struct verbs_conn *c;
	uint8_t pd[PVGPU_VERBS_ACCEPT_PD];
	char why[160];
	int rc;

	c = calloc(1, sizeof(*c));
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	c->nslots = VERBS_SLOTS;
	c->slot_size = VERBS_SLOT_SIZE;
	c->poll_ns = hc->poll_ns;
	c->timeout_ms = hc->timeout_ms;
	c->peer = hc->hello.ring;
	hc->c = c;
	/*
	 * The kernel takes rdma_cm commands only on a descriptor this process
	 * opened (ib_safe_file_access: the opener's credentials, and fork()
	 * gives the worker new ones), so the id moves once more, to a channel
	 * of the worker's own; the command is written there.
	 */
	c->ch = rdma_create_event_channel();
	if (!c->ch || rdma_migrate_id(hc->id, c->ch)) {
		rc = errno ? -errno : -EIO;
		snprintf(err, errlen, "rdma_migrate_id: %s", strerror(-rc));
		if (c->ch)
			rdma_destroy_event_channel(c->ch);
		c->ch = NULL;
		goto err_conn;
	}
	/* The connection owns the id now (verbs_conn_close). */
	c->id = hc->id;
	hc->id = NULL;
	close(hc->ch->fd);
	free(hc->ch);
	hc->ch = NULL;
	/* This process's own device context: nothing made before fork() is used. */
	c->ctx = ibv_open_device(c->id->verbs->device);
	if (!c->ctx) {
		rc = errno ? -errno : -EIO;
		snprintf(err, errlen, "ibv_open_device: %s", strerror(-rc));
		goto err_conn;
	}
	c->own_ctx = 1;
	rc = verbs_conn_resources(c, err, errlen);
	if (rc)
		goto err_conn;
	rc = verbs_conn_qp(c, err, errlen);
	if (rc)
		goto err_conn;
	if ((rc = verbs_conn_qp_state(c, IBV_QPS_INIT, err, errlen)) ||
	    (rc = verbs_conn_post_receives(c, err, errlen)) ||
	    (rc = verbs_conn_qp_state(c, IBV_QPS_RTR, err, errlen)) ||
	    (rc = verbs_conn_qp_state(c, IBV_QPS_RTS, err, errlen)))
		goto err_conn;
	verbs_conn_local_ring(c, &ring);
	memset(&param, 0, sizeof(param));
	param.private_data = pd;
	param.private_data_len = (uint8_t)pvgpu_verbs_ring_encode(pd, &ring);
	param.responder_resources = VERBS_RD_CHUNKS;
	param.initiator_depth = VERBS_RD_CHUNKS;
	param.rnr_retry_count = 7;
	param.qp_num = c->qp->qp_num;
	if (rdma_accept(c->id, &param)) {
		rc = errno ? -errno : -EIO;
		snprintf(err, errlen, "rdma_accept: %s", strerror(-rc));
		goto err_conn;
	}
	rc = verbs_cm_wait(c->ch, RDMA_CM_EVENT_ESTABLISHED,
			   verbs_cm_timeout_ms(c->timeout_ms), &ev, why, sizeof(why));
	if (rc) {
		snprintf(err, errlen, "establishing: %s", why);
		goto err_conn;
	}
	rdma_ack_cm_event(ev);
	return 0;

err_conn:
	c->broken = rc ? rc : -EIO;	/* no disconnect for what never connected */
	return c->broken;
}

static ssize_t verbs_recv(struct pvgpu_conn *base, void *buf, size_t len,
			  int nonblock)
{
	struct verbs_host_conn *hc = (struct verbs_host_conn *)base;
	ssize_t n;

	if (!hc->c)
		return -ENOTCONN;
	/*
	 * No word of why here: a worker's stderr is the guest's (device
	 * printf); the session's log says "read error: Protocol error".
	 */
	n = verbs_conn_read(hc->c, buf, len, nonblock);
	return n == -ECONNRESET ? 0 : n;	/* hung up */
}

static int verbs_sendv(struct pvgpu_conn *base, struct iovec *iov, int iovcnt)
{
	struct verbs_host_conn *hc = (struct verbs_host_conn *)base;

	return hc->c ? verbs_conn_sendv(hc->c, iov, iovcnt) : -ENOTCONN;
}

static int verbs_wait(struct pvgpu_conn *base, int64_t timeout_ns)
{
	struct verbs_host_conn *hc = (struct verbs_host_conn *)base;
	int ms = timeout_ns < 0 ? -1 :
		 (int)((timeout_ns + 999999) / 1000000 > 3600000 ? 3600000 :
		       (timeout_ns + 999999) / 1000000);
	int rc;

	if (!hc->c)
		return -ENOTCONN;
	rc = verbs_conn_wait(hc->c, ms);
	return rc < 0 ? 1 : rc;		/* gone: recv says how */
}

static int verbs_hung_up(struct pvgpu_conn *base)
{
	struct verbs_host_conn *hc = (struct verbs_host_conn *)base;

	return !hc->c || verbs_conn_poll(hc->c) < 0;
}

/*
 * The supervisor's copy after fork(), or a request refused: drop our
 * descriptor of the request's channel (see the head of this file).
 */
static void verbs_release(struct pvgpu_conn *base)
{
	struct verbs_host_conn *hc = (struct verbs_host_conn *)base;

	if (hc->ch) {
		close(hc->ch->fd);
		free(hc->ch);
	}
	free(hc);
}

static void verbs_close(struct pvgpu_conn *base)
{
	struct verbs_host_conn *hc = (struct verbs_host_conn *)base;

	if (hc->c) {
		verbs_conn_close(hc->c);
		hc->c = NULL;
	}
	verbs_release(base);
}

static const struct pvgpu_conn_ops verbs_conn_ops = {
	.open = verbs_open,
	.recv = verbs_recv,
	.sendv = verbs_sendv,
	.wait = verbs_wait,
	.hung_up = verbs_hung_up,
	.release = verbs_release,
	.close = verbs_close,
};

const struct pvgpu_host_ops pvgpu_host_verbs = {
	.scheme = "verbs",
	.listen = verbs_listen,
	.poll_fd = verbs_poll_fd,
	.accept = verbs_accept,
	.forget = verbs_forget,
	.close = verbs_close_listener,
};
