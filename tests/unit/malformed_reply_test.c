/*
 * malformed_reply_test.c - what a guest reads back after a request that
 * does not decode.
 *
 * protocol/README.md: a sync reply carries the op's output fields whatever
 * its status.  A real worker (sim executor) on a socketpair gets, for ops
 * with outputs of every shape (fixed words, a float, arrays, a string,
 * bytes), a request with one byte too many; each reply must say
 * CUDA_ERROR_INVALID_VALUE and decode, with the guest's own generated
 * decoder, to zeroed outputs.  A reply cut short is refused by that
 * decoder without reading past it (run it in the sanitizer build).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "accounting.h"
#include "exec_sim.h"
#include "gpusched.h"
#include "log.h"
#include "pvgpu_proto.h"
#include "worker.h"

#include "unit_check.h"

#define CUDA_ERROR_INVALID_VALUE	1

struct worker_arg {
	int fd;
	struct pvgpu_accounting *acct;
	struct pvgpu_sched *sched;
	struct pvgpu_slot *slot;
};

static void *run_worker(void *p)
{
	struct worker_arg *a = p;
	struct pvgpu_worker_config cfg = {
		.exec = &pvgpu_exec_sim,
		.block = 64 * 1024,
		.sched = a->sched,
	};
	struct pvgpu_peer peer = { .features = PVGPU_TR_PASSES_FD,
				   .identity = "malformed-reply-test" };
	struct pvgpu_conn *conn = pvgpu_stream_conn_new(a->fd, peer.features);

	if (conn)	/* the worker closes it, the fd with it */
		pvgpu_worker_run(conn, &peer, &cfg, a->acct, a->slot, NULL, 0);
	else
		close(a->fd);
	return NULL;
}

static int read_all(int fd, uint8_t *buf, size_t len)
{
	while (len) {
		ssize_t k = read(fd, buf, len);

		if (k <= 0)
			return -1;
		buf += k;
		len -= (size_t)k;
	}
	return 0;
}

/* Send one request; the reply's payload into rep (malloc'd), its length. */
static int call(int fd, uint16_t opcode, uint64_t id, const uint8_t *payload,
		size_t len, uint8_t **rep, size_t *rep_len)
{
	struct pvgpu_hdr h = {
		.magic = PVGPU_MAGIC, .version = PVGPU_PROTO_VERSION,
		.opcode = opcode, .length = (uint32_t)len, .id = id,
	};
	uint8_t raw[PVGPU_HDR_SIZE];

	pvgpu_hdr_encode(raw, &h);
	if (write(fd, raw, sizeof(raw)) != (ssize_t)sizeof(raw) ||
	    (len && write(fd, payload, len) != (ssize_t)len))
		return -1;
	if (read_all(fd, raw, sizeof(raw)) || pvgpu_hdr_decode(raw, &h) ||
	    h.opcode != opcode || h.id != id || !(h.flags & PVGPU_F_REPLY) ||
	    h.length < PVGPU_REPLY_PREFIX)
		return -1;
	*rep = malloc(h.length);
	if (!*rep || read_all(fd, *rep, h.length)) {
		free(*rep);
		return -1;
	}
	*rep_len = h.length;
	return 0;
}

/*
 * One op: its zeroed request plus a byte (trailing bytes never decode),
 * the reply's status and outputs as the guest's decoder reads them, and
 * every shorter cut of those outputs refused.  Each cut is copied to a
 * buffer of exactly its size, so that a read past it is the sanitizer's.
 */
#define CHECK_OP(fd, id, name, UPPER) do {					\
	struct pvgpu_##name##_req req;						\
	struct pvgpu_##name##_rep out, zero;					\
	uint8_t q[PVGPU_##UPPER##_REQ_MAX + 1], *r = NULL;			\
	size_t rn = 0;								\
	long qn;								\
										\
	memset(&req, 0, sizeof(req));						\
	memset(&zero, 0, sizeof(zero));						\
	qn = pvgpu_##name##_req_encode(q, &req);				\
	CHECK(qn >= 0);								\
	q[qn] = 0x5a;								\
	CHECK(call(fd, PVGPU_OP_##UPPER, id, q, (size_t)qn + 1, &r, &rn) == 0);	\
	if (r) {								\
		size_t fields = rn - PVGPU_REPLY_PREFIX;			\
										\
		CHECK(pvgpu_get_u32(r) == CUDA_ERROR_INVALID_VALUE);		\
		CHECK(pvgpu_##name##_rep_decode(r + PVGPU_REPLY_PREFIX,		\
						fields, &out) == 0);		\
		CHECK(!memcmp(&out, &zero, sizeof(out)));			\
		for (size_t cut = 0; cut < fields; cut++) {			\
			uint8_t *c = malloc(cut ? cut : 1);			\
										\
			memcpy(c, r + PVGPU_REPLY_PREFIX, cut);			\
			CHECK(pvgpu_##name##_rep_decode(c, cut, &out) == -1);	\
			free(c);						\
		}								\
		free(r);							\
	}									\
} while (0)

int main(void)
{
	struct pvgpu_hello_req hello = { .version_min = 1,
					 .version_max = PVGPU_PROTO_VERSION };
	struct worker_arg arg;
	uint8_t q[PVGPU_HELLO_REQ_MAX], *r = NULL;
	pthread_t worker;
	size_t rn = 0;
	int sv[2];
	long qn;

	/* The worker's lines about each malformed request are expected. */
	pvgpu_log_set_level("error");
	arg.acct = pvgpu_accounting_create(1);
	arg.sched = pvgpu_sched_create(arg.acct, PVGPU_SCHED_QUANTUM_US);
	arg.slot = pvgpu_accounting_claim(arg.acct);
	CHECK(arg.acct && arg.sched && arg.slot);
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return 1;
	arg.fd = sv[1];
	pthread_create(&worker, NULL, run_worker, &arg);

	qn = pvgpu_hello_req_encode(q, &hello);
	CHECK(call(sv[0], PVGPU_OP_HELLO, 1, q, (size_t)qn, &r, &rn) == 0);
	CHECK(r && pvgpu_get_u32(r) == 0);
	free(r);

	CHECK_OP(sv[0], 2, mem_alloc, MEM_ALLOC);
	CHECK_OP(sv[0], 3, mem_get_info, MEM_GET_INFO);
	CHECK_OP(sv[0], 4, device_total_mem, DEVICE_TOTAL_MEM);
	CHECK_OP(sv[0], 5, device_get_attributes, DEVICE_GET_ATTRIBUTES);
	CHECK_OP(sv[0], 6, device_get_name, DEVICE_GET_NAME);
	CHECK_OP(sv[0], 7, ipc_get_mem_handle, IPC_GET_MEM_HANDLE);
	CHECK_OP(sv[0], 8, module_get_function, MODULE_GET_FUNCTION);
	CHECK_OP(sv[0], 9, driver_call, DRIVER_CALL);

	/* The session goes on: a well-formed request is served. */
	{
		struct pvgpu_mem_get_info_rep info;

		CHECK(call(sv[0], PVGPU_OP_MEM_GET_INFO, 10, NULL, 0, &r, &rn) == 0);
		CHECK(r && pvgpu_mem_get_info_rep_decode(r + PVGPU_REPLY_PREFIX,
							 rn - PVGPU_REPLY_PREFIX,
							 &info) == 0);
		free(r);
	}

	shutdown(sv[0], SHUT_WR);
	pthread_join(worker, NULL);
	close(sv[0]);
	{
		/* The worker thread has ended: no lock is held. */
		struct pvgpu_shlock_watch watch[PVGPU_MAX_DEVICES] = { 0 };

		CHECK(pvgpu_sched_slot_gone(arg.sched, arg.slot, watch) == 0);
	}
	pvgpu_accounting_release(arg.slot);
	pvgpu_sched_destroy(arg.sched);
	pvgpu_accounting_destroy(arg.acct);
	return UNIT_REPORT();
}
