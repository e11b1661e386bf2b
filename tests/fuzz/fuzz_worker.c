/*
 * fuzz_worker.c - libFuzzer target: a whole session of untrusted bytes.
 *
 * The input is what a hostile guest sends down the connection.  It is fed
 * to a real session worker (sim executor) through a socketpair while a
 * thread drains the replies; the worker must survive whatever arrives:
 * no crash, no leak, no sanitizer report, and it ends when the input ends.
 * This covers the header checks, the generated decoders, the batch walker,
 * the handlers' handle and range checks and the DATA-frame bookkeeping.
 */
#include <pthread.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "accounting.h"
#include "exec_sim.h"
#include "log.h"
#include "worker.h"

static void *drain(void *arg)
{
	int fd = *(int *)arg;
	char buf[65536];

	while (read(fd, buf, sizeof(buf)) > 0)
		;
	return NULL;
}

static void *feed(void *arg)
{
	const struct { int fd; const uint8_t *p; size_t n; } *in = arg;
	size_t off = 0;

	while (off < in->n) {
		ssize_t k = send(in->fd, in->p + off, in->n - off, MSG_NOSIGNAL);

		if (k <= 0)
			break;
		off += (size_t)k;
	}
	shutdown(in->fd, SHUT_WR);
	return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct pvgpu_accounting *acct;
	static struct pvgpu_sched *sched;
	struct pvgpu_worker_config cfg = {
		.exec = &pvgpu_exec_sim,
		.block = 64 * 1024,
	};
	struct pvgpu_peer peer = { .features = PVGPU_TR_PASSES_FD,
				   .identity = "fuzz" };
	struct { int fd; const uint8_t *p; size_t n; } in;
	pthread_t feeder, drainer;
	struct pvgpu_slot *slot;
	int sv[2];

	if (!acct) {
		/* A small device, so hostile sizes hit its limit, not the host's. */
		setenv("PVGPU_SIM_MEMORY_MB", "64", 1);
		pvgpu_log_set_level("error");
		acct = pvgpu_accounting_create(1);
		/* Hostile launches go through the scheduler's bookkeeping too. */
		sched = pvgpu_sched_create(acct, PVGPU_SCHED_QUANTUM_US);
	}
	cfg.sched = sched;
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return 0;
	slot = pvgpu_accounting_claim(acct);
	in.fd = sv[0];
	in.p = data;
	in.n = size;
	pthread_create(&feeder, NULL, feed, &in);
	pthread_create(&drainer, NULL, drain, &sv[0]);
	{
		struct pvgpu_conn *conn = pvgpu_stream_conn_new(sv[1], peer.features);

		if (conn)	/* the worker closes it, sv[1] with it */
			pvgpu_worker_run(conn, &peer, &cfg, acct, slot, NULL, 0);
		else
			close(sv[1]);
	}
	pthread_join(feeder, NULL);
	pthread_join(drainer, NULL);
	close(sv[0]);
	{
		/* One process, nobody else holds a lock: done at once. */
		struct pvgpu_shlock_watch watch[PVGPU_MAX_DEVICES] = { 0 };

		pvgpu_sched_slot_gone(sched, slot, watch);
	}
	pvgpu_accounting_release(slot);
	return 0;
}
