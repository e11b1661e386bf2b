/*
 * verbs_guest.c - the guest half of verbs:// (a VM with an IB VF or a RoCE
 * device, or a front pvgpud's remote executor): connect with rdma_cm, the
 * per-VM token in the connect request's private data, then the byte
 * stream of verbs_conn.c behind the guest transport ops table.
 */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "addr.h"
#include "transport.h"
#include "verbs_conn.h"

/* "host:port" or "[v6]:port" -> a resolved address; 0 or -errno. */
static int resolve(const char *addr, struct addrinfo **ai, char *err,
		   size_t errlen)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM };
	char host[256], port[8];
	int rc;

	/* The parser tcp:// uses: the same ports mean the same to both ends. */
	if (pvgpu_host_port(addr, host, sizeof(host), port, sizeof(port))) {
		snprintf(err, errlen, "verbs address \"%s\": expected HOST:PORT, PORT 1..65535",
			 addr);
		return -EINVAL;
	}
	rc = getaddrinfo(host, port, &hints, ai);
	if (rc) {
		snprintf(err, errlen, "%s: %s", host, gai_strerror(rc));
		return -EHOSTUNREACH;
	}
	return 0;
}

static int verbs_connect(struct pvgpu_transport *t, const char *addr,
			 char *err, size_t errlen)
{
	struct rdma_conn_param param;
	struct pvgpu_verbs_hello hello;
	struct rdma_cm_event *ev;
	struct addrinfo *ai = NULL;
	struct verbs_conn *c;
	uint8_t pd[PVGPU_VERBS_CONNECT_PD];
	char why[160], hostport[300];
	uint32_t timeout_ms = PVGPU_VERBS_TIMEOUT_MS;
	int rc, cm_ms;

	if (t->token && strlen(t->token) > PVGPU_VERBS_TOKEN_MAX) {
		snprintf(err, errlen, "a verbs token is at most %d bytes",
			 PVGPU_VERBS_TOKEN_MAX);
		return -EINVAL;
	}
	if (pvgpu_verbs_addr_options(addr, hostport, sizeof(hostport), &timeout_ms,
				     err, errlen))
		return -EINVAL;
	rc = resolve(hostport, &ai, err, errlen);
	if (rc)
		return rc;
	c = calloc(1, sizeof(*c));
	if (!c) {
		rc = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto err_ai;
	}
	c->nslots = VERBS_SLOTS;
	c->slot_size = VERBS_SLOT_SIZE;
	c->poll_ns = t->poll_ns;
	c->timeout_ms = timeout_ms;
	c->ch = rdma_create_event_channel();
	if (!c->ch || rdma_create_id(c->ch, &c->id, NULL, RDMA_PS_TCP)) {
		rc = -errno;
		snprintf(err, errlen, "rdma_cm: %s (is an RDMA device up? rdma link)",
			 strerror(errno));
		goto err_conn;
	}
	cm_ms = verbs_cm_timeout_ms(timeout_ms);
	/* The kernel's own bound first, so that its reason comes back. */
	if (rdma_resolve_addr(c->id, NULL, ai->ai_addr, cm_ms)) {
		rc = -errno;
		snprintf(why, sizeof(why), "%s", strerror(errno));
	} else {
		rc = verbs_cm_wait(c->ch, RDMA_CM_EVENT_ADDR_RESOLVED, cm_ms + 1000, &ev,
				   why, sizeof(why));
	}
	if (rc) {
		snprintf(err, errlen, "resolving %s: %s", addr, why);
		goto err_conn;
	}
	rdma_ack_cm_event(ev);
	if (rdma_resolve_route(c->id, cm_ms)) {
		rc = -errno;
		snprintf(why, sizeof(why), "%s", strerror(errno));
	} else {
		rc = verbs_cm_wait(c->ch, RDMA_CM_EVENT_ROUTE_RESOLVED, cm_ms + 1000, &ev,
				   why, sizeof(why));
	}
	if (rc) {
		snprintf(err, errlen, "route to %s: %s", addr, why);
		goto err_conn;
	}
	rdma_ack_cm_event(ev);
	/*
	 * A context of our own: librdmacm's may have been opened by the
	 * process we were forked from (a front pvgpud's worker), and the
	 * kernel refuses commands on those.
	 */
	c->ctx = ibv_open_device(c->id->verbs->device);
	if (!c->ctx) {
		rc = errno ? -errno : -EIO;
		snprintf(err, errlen, "ibv_open_device: %s", strerror(-rc));
		goto err_conn;
	}
	c->own_ctx = 1;
	rc = verbs_conn_resources(c, err, errlen);
	if (!rc)
		rc = verbs_conn_qp(c, err, errlen);
	if (!rc)
		rc = verbs_conn_qp_state(c, IBV_QPS_INIT, err, errlen);
	if (!rc)
		rc = verbs_conn_post_receives(c, err, errlen);
	if (rc)
		goto err_conn;
	memset(&hello, 0, sizeof(hello));
	verbs_conn_local_ring(c, &hello.ring);
	if (t->token)
		snprintf(hello.token, sizeof(hello.token), "%s", t->token);
	memset(&param, 0, sizeof(param));
	param.private_data = pd;
	param.private_data_len = (uint8_t)pvgpu_verbs_hello_encode(pd, &hello);
	param.responder_resources = VERBS_RD_CHUNKS;
	param.initiator_depth = VERBS_RD_CHUNKS;
	param.retry_count = 7;
	param.rnr_retry_count = 7;
	param.qp_num = c->qp->qp_num;
	if (rdma_connect(c->id, &param)) {
		rc = -errno;
		snprintf(err, errlen, "rdma_connect: %s", strerror(errno));
		goto err_conn;
	}
	/* A QP rdma_cm did not make: the reply comes as CONNECT_RESPONSE. */
	rc = verbs_cm_wait(c->ch, RDMA_CM_EVENT_CONNECT_RESPONSE, cm_ms, &ev,
			   why, sizeof(why));
	if (rc) {
		snprintf(err, errlen, "%s: %s", addr,
			 rc == -ECONNREFUSED ? "refused (wrong token, or no verbs listener there)" : why);
		goto err_conn;
	}
	rc = pvgpu_verbs_ring_decode(ev->param.conn.private_data,
				     ev->param.conn.private_data_len, &c->peer,
				     why, sizeof(why));
	rdma_ack_cm_event(ev);
	if (rc) {
		snprintf(err, errlen, "%s: %s", addr, why);
		rc = -EPROTO;
		goto err_conn;
	}
	rc = verbs_conn_qp_state(c, IBV_QPS_RTR, err, errlen);
	if (!rc)
		rc = verbs_conn_qp_state(c, IBV_QPS_RTS, err, errlen);
	if (rc)
		goto err_conn;
	if (rdma_establish(c->id)) {
		rc = errno ? -errno : -EIO;
		snprintf(err, errlen, "rdma_establish: %s", strerror(-rc));
		goto err_conn;
	}
	freeaddrinfo(ai);
	t->priv = c;
	t->fd = -1;		/* no window: pvgpu_transport_quiet is never asked */
	return 0;

err_conn:
	verbs_conn_close(c);
err_ai:
	freeaddrinfo(ai);
	return rc ? rc : -EIO;
}

static int verbs_sendv(struct pvgpu_transport *t, struct iovec *iov, int iovcnt)
{
	return t->priv ? verbs_conn_sendv(t->priv, iov, iovcnt) : -ENOTCONN;
}

static int verbs_recv(struct pvgpu_transport *t, void *buf, size_t len)
{
	return t->priv ? verbs_conn_recv(t->priv, buf, len) : -ENOTCONN;
}

static int verbs_pin(struct pvgpu_transport *t, void *p, size_t size)
{
	return t->priv ? verbs_conn_pin(t->priv, p, size) : -ENOTCONN;
}

static void verbs_unpin(struct pvgpu_transport *t, void *p)
{
	if (t->priv)
		verbs_conn_unpin(t->priv, p);
}

static void verbs_close(struct pvgpu_transport *t)
{
	verbs_conn_close(t->priv);
	t->priv = NULL;
}

static const struct pvgpu_transport_ops verbs_guest_ops = {
	.scheme = "verbs",
	.features = PVGPU_TRG_SENDS_TOKEN,
	.connect = verbs_connect,
	.sendv = verbs_sendv,
	.recv = verbs_recv,
	.close = verbs_close,
	.sendv_fd = NULL,
	.pin = verbs_pin,
	.unpin = verbs_unpin,
};

/* What transport.c finds in transport-verbs.so: both halves. */
extern const struct pvgpu_host_ops pvgpu_host_verbs;

__attribute__((visibility("default")))
const struct pvgpu_transport_module pvgpu_transport_module = {
	.abi = PVGPU_TRANSPORT_ABI,
	.scheme = "verbs",
	.guest = &verbs_guest_ops,
	.host = &pvgpu_host_verbs,
};
