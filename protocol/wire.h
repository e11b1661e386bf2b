/*
 * wire.h - the fixed part of the pvgpu wire format, shared by the guest
 * library and the host backend.  The per-operation part is generated from
 * protocol/ops.spec into pvgpu_proto.h.
 *
 * Every message is a 24-byte little-endian header followed by `length`
 * payload bytes.  Nothing in a header or payload is trusted by the side that
 * receives it: lengths are checked against limits before anything is read
 * or allocated.
 */
#ifndef PVGPU_WIRE_H
#define PVGPU_WIRE_H

#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define PVGPU_MAGIC		0x50475650u	/* "PVGP" as bytes */
#define PVGPU_HDR_SIZE		24

/* Header flags */
#define PVGPU_F_REPLY		0x1u	/* backend -> guest answer */
/*
 * PVGPU_FEATURE_SIGNAL.  On a request: the guest may learn of its completion
 * from the device's word (transport/ring.h).  On its reply: the work is
 * queued, and the device writes the request id's low 32 bits (0 as 1) to the
 * word when it is done; a second reply to the same request follows only if
 * it failed.
 */
#define PVGPU_F_SIGNAL		0x2u

/* The value the device writes for request id (PVGPU_F_SIGNAL). */
static inline uint32_t pvgpu_signal_value(uint64_t id)
{
	return (uint32_t)id ? (uint32_t)id : 1;
}

/* Opcodes outside ops.spec: the framing itself. */
#define PVGPU_OP_DATA		0x0001	/* bulk bytes of the preceding copy */
#define PVGPU_OP_BATCH		0x0002	/* payload is a run of async messages */
/*
 * Backend -> guest, before a reply, with its id: what the session's kernels
 * printed (u32 stream: 1 stdout, 2 stderr; then the bytes).  Only to a
 * guest that agreed to PVGPU_FEATURE_OUTPUT.
 */
#define PVGPU_OP_OUTPUT		0x0003

/*
 * Limits.  A control payload is small; bulk data travels in DATA frames of
 * at most PVGPU_MAX_DATA_FRAME bytes so a receiver never needs more than one
 * frame of buffer, and a batch holds at most PVGPU_MAX_BATCH bytes.
 */
#define PVGPU_MAX_PAYLOAD	(64u * 1024)
#define PVGPU_MAX_BATCH		(256u * 1024)
#define PVGPU_MAX_DATA_FRAME	(16u * 1024 * 1024)

/*
 * What a guest from before feature bits (hello without `features`) can do:
 * protocol 1 had shared windows and batches from the start.  Bits added
 * later (PVGPU_FEATURE_* from ops.spec) are agreed only when both sides
 * name them.
 */
#define PVGPU_FEATURES_V1	(PVGPU_FEATURE_WINDOW | PVGPU_FEATURE_BATCH)

/* Default bulk block size; the backend tells the guest its setting. */
#define PVGPU_DEFAULT_BLOCK	(1u * 1024 * 1024)

struct pvgpu_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t opcode;
	uint32_t flags;
	uint32_t length;
	uint64_t id;
};

/*
 * Does the reply to this opcode wait for the device: a synchronize, a
 * synchronous copy?  (The guest spins longer for it; the worker looks
 * for device output before it.)  A generic driver call may (the guest's
 * client knows which of its own do: cuEventSynchronize).
 */
int pvgpu_op_waits_on_device(uint16_t opcode);

/*
 * Fields are little-endian at any alignment: memcpy and a byte swap only
 * where the machine is big-endian, so a field is one load or store (byte
 * loops were not merged into one by the compiler).
 */
static inline void pvgpu_put_u16(uint8_t *p, uint16_t v)
{
	v = htole16(v);
	memcpy(p, &v, sizeof(v));
}

static inline void pvgpu_put_u32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, sizeof(v));
}

static inline void pvgpu_put_u64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, sizeof(v));
}

static inline uint16_t pvgpu_get_u16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return le16toh(v);
}

static inline uint32_t pvgpu_get_u32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return le32toh(v);
}

static inline uint64_t pvgpu_get_u64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return le64toh(v);
}

static inline void pvgpu_hdr_encode(uint8_t out[PVGPU_HDR_SIZE],
				    const struct pvgpu_hdr *h)
{
	pvgpu_put_u32(out, h->magic);
	pvgpu_put_u16(out + 4, h->version);
	pvgpu_put_u16(out + 6, h->opcode);
	pvgpu_put_u32(out + 8, h->flags);
	pvgpu_put_u32(out + 12, h->length);
	pvgpu_put_u64(out + 16, h->id);
}

/* Decodes and checks the magic; 0 on success, -1 on a bad header. */
static inline int pvgpu_hdr_decode(const uint8_t in[PVGPU_HDR_SIZE],
				   struct pvgpu_hdr *h)
{
	h->magic = pvgpu_get_u32(in);
	h->version = pvgpu_get_u16(in + 4);
	h->opcode = pvgpu_get_u16(in + 6);
	h->flags = pvgpu_get_u32(in + 8);
	h->length = pvgpu_get_u32(in + 12);
	h->id = pvgpu_get_u64(in + 16);
	return h->magic == PVGPU_MAGIC ? 0 : -1;
}

/* A growable byte buffer that encoders append to. */
struct pvgpu_buf {
	uint8_t *data;
	size_t len;
	size_t cap;
};

int pvgpu_buf_reserve(struct pvgpu_buf *b, size_t extra);
void pvgpu_buf_free(struct pvgpu_buf *b);

/* A read cursor over an untrusted payload. */
struct pvgpu_cur {
	const uint8_t *p;
	size_t left;
	int bad;		/* sticky: set by the first failed read */
};

#endif /* PVGPU_WIRE_H */
