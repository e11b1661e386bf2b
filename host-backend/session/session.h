/*
 * session.h - a session as the supervisor sees it: the configuration it
 * gives each worker, and the worker's entry point (worker.c).  All the
 * supervisor needs of session/; the worker's insides are worker.h's.
 */
#ifndef PVGPU_SESSION_H
#define PVGPU_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "accounting.h"
#include "executor.h"
#include "host.h"

struct pvgpu_policy;
struct pvgpu_sched;

struct pvgpu_worker_config {
	const struct pvgpu_executor_ops *exec;
	uint32_t block;			/* bulk block (DATA frame) size */
	const char *module_cache;	/* directory of images by hash */
	uint64_t module_cache_max;	/* its bytes in all (modcache.h) */
	uint64_t poll_ns;		/* busy-poll before a blocking read */
	uint64_t wait_spin_ns;		/* watch of a call waiting on the device */
	const struct pvgpu_policy *policy;	/* NULL: no policy file */
	struct pvgpu_sched *sched;	/* GPU time between VMs; NULL: none */
	int capture_output;		/* fd 1/2 are the guest's (output.c) */
	/* The remote executor's nodes (--remote, else [remote]). */
	const char *const *remotes;
	unsigned int nremotes;
	const char *remote_token;
	/* Per GPU: its MPS control daemon's pipe directory ("": none; mps.h). */
	const char *mps_pipe[PVGPU_MAX_DEVICES];
	/*
	 * Suspend and resume (suspend.h): the supervisor's eventfd a worker
	 * writes to ask for a resume, and how long a call waits for one
	 * before the session ends.  resume_wait_ns 0: no supervisor that
	 * suspends (wake_fd is then not to be used).
	 */
	int wake_fd;
	uint64_t resume_wait_ns;
	/*
	 * A session that outlives its connection (reattach.c): this
	 * worker's end of the socket the supervisor hands a resuming
	 * connection over (-1: none, no resume), and the session's resume
	 * token.  Set in the forked worker only (supervisor.c).
	 */
	int reattach_fd;
	uint64_t resume_token[2];
};

/*
 * Serve one session on conn until it ends (conn is closed then); returns
 * the process exit code.  first (first_len bytes, header and payload): the
 * message the supervisor read from conn to learn who calls (a caller's
 * hello, PVGPU_TR_ID_AT_HELLO), served before anything is read; NULL
 * where the channel named the caller.
 */
int pvgpu_worker_run(struct pvgpu_conn *conn, const struct pvgpu_peer *peer,
		     const struct pvgpu_worker_config *cfg,
		     struct pvgpu_accounting *acct, struct pvgpu_slot *slot,
		     const uint8_t *first, size_t first_len);

#endif /* PVGPU_SESSION_H */
