/*
 * verbs_host.c - the host half of verbs:// (verbs_host.h).
 *
 * The supervisor only ever holds rdma_cm ids: the listening one and, for a
 * moment, each connect request, whose private data it checks.  The worker
 * it forks moves the request's id to an event channel of its own, opens its
 * own device context and makes everything else (PD, CQs, QP, rings), brings
 * the QP to RTS by rdma_init_qp_attr and accepts with that QP's number:
 * no verbs object crosses fork().
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "verbs_conn.h"
#include "verbs_host.h"

struct pvgpu_verbs_listener {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
};

struct pvgpu_verbs_pending {
	struct rdma_cm_id *id;
	struct pvgpu_verbs_hello hello;
};

struct pvgpu_verbs_conn {
	struct verbs_conn c;		/* first: verbs_conn_close frees it */
};

static int host_listen(const char *addr, struct pvgpu_verbs_listener **out,
		       char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE };
	struct pvgpu_verbs_listener *l;
	struct addrinfo *ai = NULL;
	char host[256];
	const char *port = strrchr(addr, ':');
	size_t hl;
	int rc, flags;

	if (!port || port == addr || (hl = (size_t)(port - addr)) >= sizeof(host)) {
		snprintf(err, errlen, "verbs address \"%s\": expected ADDR:PORT", addr);
		return -EINVAL;
	}
	memcpy(host, addr, hl);
	host[hl] = '\0';
	if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
		memmove(host, host + 1, hl - 2);
		host[hl - 2] = '\0';
	}
	rc = getaddrinfo(host, port + 1, &hints, &ai);
	if (rc) {
		snprintf(err, errlen, "%s: %s", host, gai_strerror(rc));
		return -EINVAL;
	}
	l = calloc(1, sizeof(*l));
	if (!l) {
		rc = -ENOMEM;
		goto err_ai;
	}
	l->ch = rdma_create_event_channel();
	if (!l->ch || rdma_create_id(l->ch, &l->id, l, RDMA_PS_TCP))
		goto err_cm;
	if (rdma_bind_addr(l->id, ai->ai_addr) || rdma_listen(l->id, 64))
		goto err_cm;
	flags = fcntl(l->ch->fd, F_GETFL);
	if (flags < 0 || fcntl(l->ch->fd, F_SETFL, flags | O_NONBLOCK))
		goto err_cm;
	freeaddrinfo(ai);
	*out = l;
	return 0;

err_cm:
	rc = errno ? -errno : -EIO;
	snprintf(err, errlen, "verbs://%s: %s (an RDMA device on that address? rdma link)",
		 addr, strerror(-rc));
	if (l->id)
		rdma_destroy_id(l->id);
	if (l->ch)
		rdma_destroy_event_channel(l->ch);
	free(l);
err_ai:
	freeaddrinfo(ai);
	return rc;
}

static int host_listener_fd(struct pvgpu_verbs_listener *l)
{
	return l->ch->fd;
}

static void peer_name(struct rdma_cm_id *id, char *out, size_t len)
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
	snprintf(out, len, "verbs:%s:%u", a, port);
}

static int host_accept(struct pvgpu_verbs_listener *l,
		       struct pvgpu_verbs_pending **out,
		       struct pvgpu_verbs_identity *id, char *err, size_t errlen)
{
	struct pvgpu_verbs_pending *p;
	struct rdma_cm_event *e;
	char why[160];

	if (rdma_get_cm_event(l->ch, &e))
		return errno == EAGAIN ? -EAGAIN : -errno;
	if (e->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
		/* Events of ids that moved to a worker never come here. */
		rdma_ack_cm_event(e);
		return -EAGAIN;
	}
	memset(id, 0, sizeof(*id));
	peer_name(e->id, id->peer, sizeof(id->peer));
	p = calloc(1, sizeof(*p));
	if (!p) {
		rdma_reject(e->id, NULL, 0);
		rdma_destroy_id(e->id);
		rdma_ack_cm_event(e);
		return -ENOMEM;
	}
	if (pvgpu_verbs_hello_decode(e->param.conn.private_data,
				     e->param.conn.private_data_len, &p->hello,
				     why, sizeof(why))) {
		snprintf(err, errlen, "%s: refused: %s", id->peer, why);
		rdma_reject(e->id, NULL, 0);
		rdma_ack_cm_event(e);
		rdma_destroy_id(e->id);
		free(p);
		return -EPROTO;
	}
	p->id = e->id;
	snprintf(id->token, sizeof(id->token), "%s", p->hello.token);
	rdma_ack_cm_event(e);
	*out = p;
	return 0;
}

static void host_reject(struct pvgpu_verbs_pending *p)
{
	if (!p)
		return;
	rdma_reject(p->id, NULL, 0);
	rdma_destroy_id(p->id);
	free(p);
}

static int to_state(struct verbs_conn *c, enum ibv_qp_state s, char *err,
		    size_t errlen)
{
	struct ibv_qp_attr attr;
	int mask = 0;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = s;
	if (rdma_init_qp_attr(c->id, &attr, &mask)) {
		snprintf(err, errlen, "rdma_init_qp_attr(%d): %s", s, strerror(errno));
		return -errno;
	}
	if (s == IBV_QPS_INIT)
		attr.qp_access_flags |= IBV_ACCESS_REMOTE_WRITE;
	if (ibv_modify_qp(c->qp, &attr, mask)) {
		snprintf(err, errlen, "ibv_modify_qp(%d): %s", s, strerror(errno));
		return -errno;
	}
	return 0;
}

static int host_establish(struct pvgpu_verbs_pending *p, uint64_t poll_ns,
			  struct pvgpu_verbs_conn **out, char *err,
			  size_t errlen)
{
	struct pvgpu_verbs_conn *vc;
	struct verbs_conn *c;
	struct rdma_conn_param param;
	struct pvgpu_verbs_ring ring;
	struct ibv_qp_init_attr qa;
	struct rdma_cm_event *ev;
	uint8_t pd[PVGPU_VERBS_ACCEPT_PD];
	char why[160];
	int rc;

	vc = calloc(1, sizeof(*vc));
	if (!vc) {
		host_reject(p);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	c = &vc->c;
	c->nslots = VERBS_SLOTS;
	c->slot_size = VERBS_SLOT_SIZE;
	c->poll_ns = poll_ns;
	c->peer = p->hello.ring;
	c->ch = rdma_create_event_channel();
	if (!c->ch || rdma_migrate_id(p->id, c->ch)) {
		rc = -errno;
		snprintf(err, errlen, "rdma_migrate_id: %s", strerror(errno));
		goto err_reject;
	}
	c->id = p->id;
	free(p);
	p = NULL;
	/* This process's own device context: nothing made before fork() is used. */
	c->ctx = ibv_open_device(c->id->verbs->device);
	if (!c->ctx) {
		rc = -errno;
		snprintf(err, errlen, "ibv_open_device: %s", strerror(errno));
		goto err_conn;
	}
	c->own_ctx = 1;
	rc = verbs_conn_resources(c, err, errlen);
	if (rc)
		goto err_conn;
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = c->scq;
	qa.recv_cq = c->rcq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = c->nslots + 4;
	qa.cap.max_recv_wr = c->nslots + 2;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	c->qp = ibv_create_qp(c->pd, &qa);
	if (!c->qp) {
		rc = -errno;
		snprintf(err, errlen, "ibv_create_qp: %s", strerror(errno));
		goto err_conn;
	}
	c->own_qp = 1;
	if ((rc = to_state(c, IBV_QPS_INIT, err, errlen)) ||
	    (rc = verbs_conn_post_receives(c, err, errlen)) ||
	    (rc = to_state(c, IBV_QPS_RTR, err, errlen)) ||
	    (rc = to_state(c, IBV_QPS_RTS, err, errlen)))
		goto err_conn;
	verbs_conn_local_ring(c, &ring);
	memset(&param, 0, sizeof(param));
	param.private_data = pd;
	param.private_data_len = (uint8_t)pvgpu_verbs_ring_encode(pd, &ring);
	param.responder_resources = 1;
	param.initiator_depth = 1;
	param.rnr_retry_count = 7;
	param.qp_num = c->qp->qp_num;
	if (rdma_accept(c->id, &param)) {
		rc = -errno;
		snprintf(err, errlen, "rdma_accept: %s", strerror(errno));
		goto err_conn;
	}
	rc = verbs_cm_wait(c->ch, RDMA_CM_EVENT_ESTABLISHED, VERBS_CM_TIMEOUT_MS,
			   &ev, why, sizeof(why));
	if (rc) {
		snprintf(err, errlen, "establishing: %s", why);
		goto err_conn;
	}
	rdma_ack_cm_event(ev);
	*out = vc;
	return 0;

err_reject:
	if (c->ch)
		rdma_destroy_event_channel(c->ch);
	c->ch = NULL;
	host_reject(p);
	free(vc);
	return rc ? rc : -EIO;
err_conn:
	c->broken = rc ? rc : -EIO;	/* no disconnect for what never connected */
	verbs_conn_close(c);		/* frees vc too: c is its first member */
	return rc ? rc : -EIO;
}

static int host_sendv(struct pvgpu_verbs_conn *c, struct iovec *iov, int n)
{
	return verbs_conn_sendv(&c->c, iov, n);
}

static int host_recv(struct pvgpu_verbs_conn *c, void *buf, size_t len)
{
	return verbs_conn_recv(&c->c, buf, len);
}

static int host_wait(struct pvgpu_verbs_conn *c, int timeout_ms)
{
	struct pollfd pfd[2];
	struct ibv_cq *cq;
	void *ctx;
	int rc = verbs_conn_poll(&c->c);

	if (rc)
		return rc;
	if (ibv_req_notify_cq(c->c.rcq, 0))
		return -EIO;
	rc = verbs_conn_poll(&c->c);
	if (rc)
		return rc;
	pfd[0] = (struct pollfd){ verbs_conn_fd(&c->c), POLLIN, 0 };
	pfd[1] = (struct pollfd){ c->c.ch->fd, POLLIN, 0 };
	if (poll(pfd, 2, timeout_ms) <= 0)
		return 0;
	if ((pfd[0].revents & POLLIN) && !ibv_get_cq_event(c->c.comp, &cq, &ctx))
		ibv_ack_cq_events(cq, 1);
	return verbs_conn_poll(&c->c);
}

static const char *host_error(struct pvgpu_verbs_conn *c)
{
	return c->c.why[0] ? c->c.why : "no error";
}

static void host_close(struct pvgpu_verbs_conn *c)
{
	if (c)
		verbs_conn_close(&c->c);
}

static void host_listener_close(struct pvgpu_verbs_listener *l)
{
	if (!l)
		return;
	rdma_destroy_id(l->id);
	rdma_destroy_event_channel(l->ch);
	free(l);
}

const struct pvgpu_verbs_host_ops pvgpu_verbs_host = {
	.listen = host_listen,
	.listener_fd = host_listener_fd,
	.accept = host_accept,
	.reject = host_reject,
	.establish = host_establish,
	.sendv = host_sendv,
	.recv = host_recv,
	.wait = host_wait,
	.error = host_error,
	.close = host_close,
	.listener_close = host_listener_close,
};
