/*
 * worker_io.c - the worker's side of the framing in protocol/README.md:
 * reading exactly what the guest said it would send, and sending replies
 * and DATA frames.  Anything that breaks the framing marks the session
 * fatal: a stream that is out of step cannot be trusted again.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "log.h"
#include "pvgpu_proto.h"
#include "worker.h"

int pvgpu_worker_read(struct pvgpu_worker *w, void *buf, size_t len)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = read(w->fd, p, len);

		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (!w->fatal)
			log_info("connection closed by the guest%s",
				 n < 0 ? " (read error)" : "");
		w->fatal = 1;
		return -1;
	}
	return 0;
}

static int write_all(struct pvgpu_worker *w, struct iovec *iov, int iovcnt)
{
	while (iovcnt) {
		struct msghdr msg = { .msg_iov = iov, .msg_iovlen = (size_t)iovcnt };
		ssize_t n = sendmsg(w->fd, &msg, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (!w->fatal)
				log_info("connection lost while sending: %s",
					 strerror(errno));
			w->fatal = 1;
			return -1;
		}
		while (iovcnt && (size_t)n >= iov->iov_len) {
			n -= (ssize_t)iov->iov_len;
			iov++;
			iovcnt--;
		}
		if (iovcnt) {
			iov->iov_base = (uint8_t *)iov->iov_base + n;
			iov->iov_len -= (size_t)n;
		}
	}
	return 0;
}

int pvgpu_worker_read_data_hdr(struct pvgpu_worker *w, uint32_t max,
			       uint32_t *len)
{
	uint8_t raw[PVGPU_HDR_SIZE];
	struct pvgpu_hdr h;

	if (pvgpu_worker_read(w, raw, sizeof(raw)))
		return -1;
	if (pvgpu_hdr_decode(raw, &h) || h.opcode != PVGPU_OP_DATA ||
	    h.id != w->req_id || h.length == 0 || h.length > max) {
		log_warn("protocol error: expected a DATA frame of 1..%u bytes for request %llu, got opcode %#x id %llu length %u; ending session",
			 max, (unsigned long long)w->req_id, h.opcode,
			 (unsigned long long)h.id, h.length);
		w->fatal = 1;
		return -1;
	}
	*len = h.length;
	return 0;
}

static void fill_hdr(struct pvgpu_worker *w, uint8_t *raw, uint16_t opcode,
		     uint32_t flags, uint32_t len)
{
	struct pvgpu_hdr h = {
		.magic = PVGPU_MAGIC,
		.version = (uint16_t)(w->version ? w->version : PVGPU_PROTO_VERSION),
		.opcode = opcode,
		.flags = flags,
		.length = len,
		.id = w->req_id,
	};

	pvgpu_hdr_encode(raw, &h);
}

int pvgpu_worker_send_data(struct pvgpu_worker *w, const void *buf,
			   uint32_t len)
{
	uint8_t raw[PVGPU_HDR_SIZE];
	struct iovec iov[2] = {
		{ raw, sizeof(raw) },
		{ (void *)buf, len },
	};

	fill_hdr(w, raw, PVGPU_OP_DATA, PVGPU_F_REPLY, len);
	return write_all(w, iov, 2);
}

int pvgpu_worker_send_reply(struct pvgpu_worker *w, uint16_t opcode,
			    int32_t status, const uint8_t *fields, size_t len)
{
	uint8_t raw[PVGPU_HDR_SIZE + PVGPU_REPLY_PREFIX];
	struct iovec iov[2] = {
		{ raw, sizeof(raw) },
		{ (void *)fields, len },
	};

	fill_hdr(w, raw, opcode, PVGPU_F_REPLY,
		 (uint32_t)(PVGPU_REPLY_PREFIX + len));
	pvgpu_put_u32(raw + PVGPU_HDR_SIZE, (uint32_t)status);
	pvgpu_put_u32(raw + PVGPU_HDR_SIZE + 4, (uint32_t)w->deferred);
	w->deferred = 0;
	return write_all(w, iov, len ? 2 : 1);
}

int pvgpu_worker_recv_data(struct pvgpu_worker *w, uint8_t *buf, uint64_t size)
{
	uint64_t off = 0;

	while (off < size) {
		uint32_t len;

		if (pvgpu_worker_read_data_hdr(w, PVGPU_MAX_DATA_FRAME, &len))
			return -1;
		if (len > size - off) {
			log_warn("protocol error: DATA frames exceed the announced size; ending session");
			w->fatal = 1;
			return -1;
		}
		if (pvgpu_worker_read(w, buf + off, len))
			return -1;
		off += len;
	}
	return 0;
}
