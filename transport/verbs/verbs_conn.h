/*
 * verbs_conn.h - one verbs:// connection as a byte stream (verbs_wire.h
 * says how), shared by the guest half (verbs_guest.c) and the host half
 * (verbs_host.c).  Private to transport-verbs.so.
 */
#ifndef PVGPU_VERBS_CONN_H
#define PVGPU_VERBS_CONN_H

#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "verbs_wire.h"

#define VERBS_SLOTS		16
#define VERBS_SLOT_SIZE		(256u << 10)
/*
 * Connection setup (the address, the route, the peer's accept) waits for
 * the peer as long as ?timeout= says, never under VERBS_CM_TIMEOUT_MS: a
 * fixed few seconds are nothing to a starved TCG guest, and a connection
 * between two of them on a loaded CI machine failed in its setup.
 */
#define VERBS_CM_TIMEOUT_MS	5000
/* A peer that keeps sending while never reading: the connection ends. */
#define VERBS_STASH_MAX		(256u << 20)
/*
 * Pinned memory of the program's (cuMemHostAlloc), registered once: a
 * piece of at least VERBS_REF_MIN bytes goes as a REF slot (verbs_wire.h)
 * and the peer fetches it by RDMA READ, VERBS_RD_CHUNKS reads of
 * VERBS_RD_CHUNK bytes in flight, into memory it registered once.
 * 64 KiB, not more: a READ's whole response comes back as one burst (1024
 * packets for 1 MiB on Soft-RoCE's 1 KiB MTU) and a link that drops some
 * (rxe over Ethernet without pause frames) makes the reader ask again
 * for the rest, as one burst again: between two guests of the test suite
 * 1 MiB reads never finished, 64 KiB ones do; 256 KiB in flight is still
 * several times a real NIC's bandwidth-delay product.
 */
#define VERBS_REF_MIN		(64u << 10)
/*
 * The most one REF slot asks the peer to read.  The peer hands a slot
 * back once it has read all of it, and that is the only progress the
 * sender sees: each slot must be read within the sender's ?timeout= on
 * the slowest link served (Soft-RoCE between TCG guests: some 6 MB/s
 * quiet, a few on a busy machine, where one 16 MiB slot ran past 10 s).
 * Larger slots gain nothing: the reader keeps VERBS_RD_CHUNKS reads in
 * flight either way.
 */
#define VERBS_REF_SLOT		(4u << 20)
#define VERBS_RD_CHUNK		(64u << 10)
#define VERBS_RD_CHUNKS		4

struct verbs_pin {
	uint8_t *base;
	size_t size;
	struct ibv_mr *mr;
};

struct verbs_conn {
	struct rdma_event_channel *ch;	/* this connection's own */
	struct rdma_cm_id *id;
	struct ibv_context *ctx;	/* opened here (in the worker) */
	int own_ctx;			/* ctx is ours to close */
	struct ibv_pd *pd;
	struct ibv_comp_channel *comp;	/* receive completions wake us */
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *qp;
	int own_qp;			/* made with ibv_create_qp, not rdma_create_qp */
	/* Receive ring (remote-writable) + the credit word after it. */
	uint8_t *rx;
	struct ibv_mr *rx_mr;
	/* Send staging + one word for the credits we hand back. */
	uint8_t *tx;
	struct ibv_mr *tx_mr;
	struct pvgpu_verbs_ring peer;	/* where our writes go */
	uint32_t nslots, slot_size;
	uint64_t tx_seq;		/* slots written */
	uint64_t tx_done;		/* of which the write completed */
	uint64_t rx_seq;		/* slots arrived (completions seen) */
	uint64_t rx_used;		/* slots consumed */
	uint64_t credit_sent;		/* rx_used as last told to the peer */
	uint32_t rx_off, rx_len;	/* the current slot's unread bytes */
	/*
	 * What arrived while we waited to send (both sides sending, both
	 * rings full): taken out of the ring so that the peer gets credit
	 * and can finish its send, read before the ring.
	 */
	uint8_t *stash;
	size_t stash_off, stash_len, stash_cap;
	int rx_have;			/* a slot is being read */
	int rx_more;			/* the last slot opened said more follows */
	/* Pinned memory (the guest half), and the last REF slot sent. */
	struct verbs_pin *pins;
	size_t npins, cappins;
	uint64_t ref_wait;		/* credit that hands back our REF slots */
	/* The current slot is a REF: its bytes come by RDMA READ into rd. */
	int rx_ref;
	struct pvgpu_verbs_ref ref;
	uint32_t rd_posted, rd_done;	/* bytes of ref asked for, arrived */
	uint8_t *rd;			/* VERBS_RD_CHUNKS chunks, registered once */
	struct ibv_mr *rd_mr;
	int credit_pending;		/* a credit write still reads its word */
	int outstanding;		/* signalled sends not yet completed */
	int broken;			/* -errno once the connection failed */
	uint64_t poll_ns;
	uint32_t timeout_ms;		/* for credit and completions (verbs_wire.h) */
	uint64_t stall_look;		/* when stalled() last looked, ns */
	char why[160];			/* first failure, for the log */
};

/* Memory, PD, CQs (on ctx); 0 or -errno with err. */
int verbs_conn_resources(struct verbs_conn *c, char *err, size_t errlen);
/*
 * The QP, on this process's own context (ibv_create_qp: never through
 * librdmacm's contexts, which may have been opened before a fork()).
 */
int verbs_conn_qp(struct verbs_conn *c, char *err, size_t errlen);
/* Move the QP to s with what rdma_cm says of the connection. */
int verbs_conn_qp_state(struct verbs_conn *c, enum ibv_qp_state s, char *err,
			size_t errlen);
/* Post the ring's receives. */
int verbs_conn_post_receives(struct verbs_conn *c, char *err, size_t errlen);
void verbs_conn_local_ring(struct verbs_conn *c, struct pvgpu_verbs_ring *r);

int verbs_conn_sendv(struct verbs_conn *c, struct iovec *iov, int iovcnt);
/* Exactly len bytes; 0 or -errno. */
int verbs_conn_recv(struct verbs_conn *c, void *buf, size_t len);
/* Up to len bytes, at least one (nonblock: -EAGAIN when none); -errno. */
ssize_t verbs_conn_read(struct verbs_conn *c, void *buf, size_t len,
			int nonblock);
/* Something to read (1), nothing within ms (0; -1: no limit), or -errno. */
int verbs_conn_wait(struct verbs_conn *c, int ms);
/* Something to read (1), nothing yet (0), or -errno. */
int verbs_conn_poll(struct verbs_conn *c);
/* The fd that becomes readable on receive completions (after arming). */
int verbs_conn_fd(struct verbs_conn *c);
void verbs_conn_close(struct verbs_conn *c);
/* Register [p, p+size) once, for the peer to read in place; 0 or -errno. */
int verbs_conn_pin(struct verbs_conn *c, void *p, size_t size);
/* Before p (a pinned base) is freed. */
void verbs_conn_unpin(struct verbs_conn *c, void *p);

/* How long a step of connection setup waits, for a connection's ?timeout=. */
static inline int verbs_cm_timeout_ms(uint32_t timeout_ms)
{
	return timeout_ms > VERBS_CM_TIMEOUT_MS ? (int)timeout_ms :
						  VERBS_CM_TIMEOUT_MS;
}

/* Wait for one rdma_cm event of type want on ch; 0 or -errno with err. */
int verbs_cm_wait(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
		  int timeout_ms, struct rdma_cm_event **ev, char *err,
		  size_t errlen);

#endif /* PVGPU_VERBS_CONN_H */
