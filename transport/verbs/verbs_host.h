/*
 * verbs_host.h - the host half of verbs:// (pvgpud --listen verbs://ADDR:PORT),
 * as functions, to be bound into the host transport ops table.
 *
 *   supervisor:  listen -> (poll fd) -> accept: a connect request whose
 *                private data was checked, with the caller's identity
 *                (token, address); bad private data is rejected here and
 *                only that caller hears about it.
 *   worker:      establish (after fork(): device context, PD, CQs, QP and
 *                the rings are made here, never in the supervisor), then
 *                sendv / recv / wait, and close.
 *
 * pvgpud reaches these through transport-verbs.so (dlopen), whose exported
 * `pvgpu_verbs_host` table holds them, so pvgpud needs rdma-core only when
 * it listens on verbs://.
 */
#ifndef PVGPU_VERBS_HOST_H
#define PVGPU_VERBS_HOST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "verbs_wire.h"

struct pvgpu_verbs_listener;
struct pvgpu_verbs_pending;
struct pvgpu_verbs_conn;

/* Who is calling: what the channel says (DESIGN §5: never the message). */
struct pvgpu_verbs_identity {
	char token[PVGPU_VERBS_TOKEN_MAX + 1];	/* from the private data; "" none */
	char peer[64];				/* "verbs:ADDR:PORT" */
};

struct pvgpu_verbs_host_ops {
	/* Listen on "ADDR:PORT"; 0 or -errno with one line in err. */
	int (*listen)(const char *addr, struct pvgpu_verbs_listener **out,
		      char *err, size_t errlen);
	/* Readable when accept has something to look at. */
	int (*listener_fd)(struct pvgpu_verbs_listener *l);
	/*
	 * The next connect request: 0 with *out and *id; -EAGAIN when the
	 * event was none (or not a request); -EPROTO when its private data
	 * was bad (rejected, err says why); other -errno.
	 */
	int (*accept)(struct pvgpu_verbs_listener *l,
		      struct pvgpu_verbs_pending **out,
		      struct pvgpu_verbs_identity *id, char *err, size_t errlen);
	/* Refuse a checked request (policy said no). */
	void (*reject)(struct pvgpu_verbs_pending *p);
	/* In the worker: make the connection; consumes p. */
	int (*establish)(struct pvgpu_verbs_pending *p, uint64_t poll_ns,
			 struct pvgpu_verbs_conn **out, char *err, size_t errlen);
	int (*sendv)(struct pvgpu_verbs_conn *c, struct iovec *iov, int iovcnt);
	int (*recv)(struct pvgpu_verbs_conn *c, void *buf, size_t len);
	/* 1 when something can be read, 0 after timeout_ms, -errno when gone. */
	int (*wait)(struct pvgpu_verbs_conn *c, int timeout_ms);
	/* Why the connection failed (for the log). */
	const char *(*error)(struct pvgpu_verbs_conn *c);
	void (*close)(struct pvgpu_verbs_conn *c);
	void (*listener_close)(struct pvgpu_verbs_listener *l);
};

extern const struct pvgpu_verbs_host_ops pvgpu_verbs_host;

#endif /* PVGPU_VERBS_HOST_H */
