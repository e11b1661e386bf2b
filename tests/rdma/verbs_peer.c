/*
 * verbs_peer.c - a misbehaving verbs:// guest, for tests/rdma: it speaks
 * rdma_cm and the ring of transport/verbs/verbs_wire.h by hand.
 *
 *   verbs-peer baddata HOST PORT         connect request with junk private
 *                                        data: exit 0 when rejected
 *   verbs-peer garbage HOST PORT TOKEN   connect properly, then write a ring
 *                                        slot with a bad header: exit 0 when
 *                                        pvgpud drops the connection
 *   verbs-peer badref HOST PORT TOKEN    connect properly, then send a REF
 *                                        slot naming memory with a key that
 *                                        is not ours: exit 0 when pvgpud
 *                                        drops the connection
 *   verbs-peer halfway HOST PORT TOKEN   connect properly, send 8 bytes of a
 *                                        message in a slot saying more
 *                                        follows, then nothing (frozen):
 *                                        exit 0 when pvgpud drops the
 *                                        connection within 20 s, saying after
 *                                        how long
 *   verbs-peer idle HOST PORT TOKEN      the same 8 bytes as a whole slot,
 *                                        then nothing (an idle guest): exit
 *                                        0 when pvgpud keeps the connection
 *                                        for 8 s
 */
#include <time.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "verbs_wire.h"

static struct rdma_cm_event *wait_event(struct rdma_event_channel *ch, int ms)
{
	struct pollfd pfd = { ch->fd, POLLIN, 0 };
	struct rdma_cm_event *e;

	if (poll(&pfd, 1, ms) <= 0 || rdma_get_cm_event(ch, &e))
		return NULL;
	return e;
}

static int expect(struct rdma_event_channel *ch, enum rdma_cm_event_type t,
		  struct rdma_cm_event **out)
{
	struct rdma_cm_event *e = wait_event(ch, 10000);

	if (!e) {
		fprintf(stderr, "verbs-peer: no %s within 10 s\n", rdma_event_str(t));
		return -1;
	}
	if (e->event != t) {
		fprintf(stderr, "verbs-peer: %s instead of %s\n",
			rdma_event_str(e->event), rdma_event_str(t));
		rdma_ack_cm_event(e);
		return -1;
	}
	if (out)
		*out = e;
	else
		rdma_ack_cm_event(e);
	return 0;
}

int main(int argc, char **argv)
{
	struct addrinfo *ai, hints = { .ai_socktype = SOCK_STREAM };
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct rdma_conn_param param;
	struct ibv_qp_init_attr qa;
	struct pvgpu_verbs_hello hello;
	struct pvgpu_verbs_ring peer;
	struct rdma_cm_event *e;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t priv[PVGPU_VERBS_CONNECT_PD];
	static uint8_t ring[2 * 4096 + 64];
	char why[160];
	int garbage, badref, halfway, idle;
	struct timespec t0, t1;

	if (argc < 4 || (strcmp(argv[1], "baddata") && strcmp(argv[1], "garbage") &&
			 strcmp(argv[1], "badref") && strcmp(argv[1], "halfway") &&
			 strcmp(argv[1], "idle")) ||
	    (strcmp(argv[1], "baddata") && argc < 5)) {
		fprintf(stderr, "usage: verbs-peer baddata|garbage|badref|halfway|idle HOST PORT [TOKEN]\n");
		return 2;
	}
	badref = !strcmp(argv[1], "badref");
	halfway = !strcmp(argv[1], "halfway");
	idle = !strcmp(argv[1], "idle");
	garbage = badref || halfway || idle || !strcmp(argv[1], "garbage");
	if (getaddrinfo(argv[2], argv[3], &hints, &ai)) {
		fprintf(stderr, "verbs-peer: cannot resolve %s\n", argv[2]);
		return 1;
	}
	ch = rdma_create_event_channel();
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(id, NULL, ai->ai_addr, 2000) ||
	    expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL) ||
	    rdma_resolve_route(id, 2000) ||
	    expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL)) {
		fprintf(stderr, "verbs-peer: no route to %s: %s\n", argv[2], strerror(errno));
		return 1;
	}
	pd = ibv_alloc_pd(id->verbs);
	cq = pd ? ibv_create_cq(id->verbs, 16, NULL, NULL, 0) : NULL;
	mr = cq ? ibv_reg_mr(pd, ring, sizeof(ring),
			     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) : NULL;
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = qa.recv_cq = cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 8;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	if (!mr || rdma_create_qp(id, pd, &qa)) {
		fprintf(stderr, "verbs-peer: verbs resources: %s\n", strerror(errno));
		return 1;
	}
	memset(&hello, 0, sizeof(hello));
	hello.ring = (struct pvgpu_verbs_ring){ (uintptr_t)ring, mr->rkey, 2, 4096, 0 };
	if (garbage)
		snprintf(hello.token, sizeof(hello.token), "%s", argv[4]);
	pvgpu_verbs_hello_encode(priv, &hello);
	if (!garbage)
		memcpy(priv, "junk", 4);	/* not the pvgpu magic */
	memset(&param, 0, sizeof(param));
	param.private_data = priv;
	param.private_data_len = sizeof(priv);
	param.responder_resources = param.initiator_depth = 1;
	param.retry_count = param.rnr_retry_count = 7;
	if (rdma_connect(id, &param)) {
		fprintf(stderr, "verbs-peer: rdma_connect: %s\n", strerror(errno));
		return 1;
	}
	if (!garbage) {
		if (expect(ch, RDMA_CM_EVENT_REJECTED, NULL))
			return 1;
		printf("verbs-peer: bad private data rejected\n");
		return 0;
	}
	if (expect(ch, RDMA_CM_EVENT_ESTABLISHED, &e))
		return 1;
	if (pvgpu_verbs_ring_decode(e->param.conn.private_data,
				    e->param.conn.private_data_len, &peer, why,
				    sizeof(why))) {
		fprintf(stderr, "verbs-peer: pvgpud's ring: %s\n", why);
		return 1;
	}
	rdma_ack_cm_event(e);
	{
		/* Slot 0 with a header that is not what slot 0 must hold. */
		struct ibv_sge sge = { (uintptr_t)ring, 64, mr->lkey };
		struct ibv_send_wr wr, *bad;

		memset(ring, 0xa5, 64);
		if (badref) {
			/* A well-formed REF slot 0, but the key is not our memory's. */
			struct pvgpu_verbs_ref r = { (uintptr_t)ring, mr->rkey ^ 0x5a5a00u, 1u << 20 };

			pvgpu_verbs_ref_encode(ring, 0, &r);
			sge.length = PVGPU_VERBS_SLOT_HDR + PVGPU_VERBS_REF_LEN;
		}
		if (halfway || idle) {
			/* The start of a message header, well framed. */
			pvgpu_verbs_slot_encode(ring, 0, 8);
			if (halfway)
				pvgpu_verbs_slot_more(ring);
			sge.length = PVGPU_VERBS_SLOT_HDR + 8;
		}
		memset(&wr, 0, sizeof(wr));
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
		wr.imm_data = htonl(0);
		wr.wr.rdma.remote_addr = peer.addr;
		wr.wr.rdma.rkey = peer.rkey;
		if (ibv_post_send(id->qp, &wr, &bad)) {
			fprintf(stderr, "verbs-peer: ibv_post_send: %s\n", strerror(errno));
			return 1;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (idle || halfway) {
		e = wait_event(ch, idle ? 8000 : 20000);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (idle) {
			printf("verbs-peer: idle: %s\n", e ? rdma_event_str(e->event) :
			       "pvgpud kept the connection for 8 s");
			return e ? 1 : 0;
		}
		if (!e || e->event != RDMA_CM_EVENT_DISCONNECTED) {
			printf("verbs-peer: halfway: %s\n", e ? rdma_event_str(e->event) :
			       "pvgpud kept the connection for 20 s");
			return 1;
		}
		printf("verbs-peer: halfway: pvgpud disconnected after %ld ms\n",
		       (long)((t1.tv_sec - t0.tv_sec) * 1000 +
			      (t1.tv_nsec - t0.tv_nsec) / 1000000));
		return 0;
	}
	if (expect(ch, RDMA_CM_EVENT_DISCONNECTED, NULL))
		return 1;
	printf("verbs-peer: %s: pvgpud disconnected\n",
	       badref ? "a REF slot with a foreign key" : "garbage on the QP");
	return 0;
}
