/*
 * reattach.h - the supervisor's half of a session that outlives its
 * connection (host-backend/session/reattach.c has the worker's).
 *
 * Before each worker is forked the supervisor makes it a resume token
 * (16 bytes from getrandom) and a SEQPACKET socket pair; the token lives in
 * the supervisor's memory and the worker's, never in the shared table.  A
 * hello that carries a token asks to resume: the supervisor, which reads
 * the hello itself for such callers, finds the session whose token it is
 * (compared in constant time), checks that the caller is the one the
 * session was for (the same identity from the same channel), and sends the
 * worker the hello and the connection in one message that never blocks.
 */
#ifndef PVGPU_REATTACH_H
#define PVGPU_REATTACH_H

#include <stddef.h>
#include <stdint.h>

#include "host.h"
#include "identity.h"
#include "unidentified.h"

struct pvgpu_supervisor;

/* Per session slot, the supervisor's alone. */
struct pvgpu_reattach {
	uint64_t token[2];		/* 0, 0: none */
	int fd;				/* our end of the worker's pair; -1: none */
	struct pvgpu_identity id;	/* who the session's caller is */
	char lvm[PVGPU_VM_NAME_LEN];	/* the VM socket it came by ("": none) */
};

int pvgpu_reattach_init(struct pvgpu_supervisor *sv);
void pvgpu_reattach_fini(struct pvgpu_supervisor *sv);
/*
 * Before fork, for slot i: a token and a pair; *worker_fd is the worker's
 * end (-1: this session cannot be resumed; it runs all the same).
 */
void pvgpu_reattach_prepare(struct pvgpu_supervisor *sv, uint32_t i,
			    const struct pvgpu_peer *peer,
			    const struct pvgpu_listener *l, int *worker_fd);
/* In the forked worker of slot i: its token and end, nobody else's. */
void pvgpu_reattach_child(struct pvgpu_supervisor *sv, uint32_t i,
			  int worker_fd);
/* Slot i's session ended (or never started): its token is void. */
void pvgpu_reattach_end(struct pvgpu_supervisor *sv, uint32_t i);
/*
 * Does a live session of this caller (same identity, same channel) have
 * a token?  0: none; 2: one waits for its guest (detached); 1: one is
 * live.  Then its hello is read here, in case it asks to resume.
 */
int pvgpu_reattach_expected(const struct pvgpu_supervisor *sv,
			    const struct pvgpu_peer *peer,
			    const struct pvgpu_listener *l);
/*
 * A hello with a resume token: 0 when the connection went to its session
 * (the caller releases its copy), 1 when that session has not yet seen
 * its old connection go (answered CUDA_ERROR_NOT_READY: the guest tries
 * again), -1 when refused (why says so; the caller answers and logs).
 */
int pvgpu_reattach_try(struct pvgpu_supervisor *sv,
		       const struct pvgpu_pending *p,
		       const struct pvgpu_hello_req *req, char *why,
		       size_t whylen);

#endif
