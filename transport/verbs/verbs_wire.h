/*
 * verbs_wire.h - what two ends of a verbs:// connection tell each other,
 * byte by byte: the rdma_cm private data and the header of each ring slot.
 * No rdma-core types here: the checks are unit-tested without it.
 *
 * The channel is a byte stream (what the protocol client and the worker
 * expect of any transport) over one RC queue pair:
 *
 *   - each side registers, once, a receive ring of nslots slots of
 *     slot_size bytes (remote-writable) followed by an 8-byte credit word,
 *     and a send staging area of the same shape (local only);
 *   - bytes go out by RDMA WRITE WITH IMMEDIATE of a staging slot into the
 *     peer's ring slot seq % nslots; the immediate is seq, and consumes one
 *     of the receives the peer pre-posted (they carry no buffer);
 *   - the receiver hands slots back by RDMA WRITE of its count of consumed
 *     slots into the sender's credit word; a sender never has more than
 *     nslots slots unconsumed.
 *
 * Everything in a slot header and the private data is checked before use:
 * the peer is untrusted.
 */
#ifndef PVGPU_VERBS_WIRE_H
#define PVGPU_VERBS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define PVGPU_VERBS_MAGIC	0x76677670u	/* "pvgv" */
#define PVGPU_VERBS_VERSION	1
/* rdma_cm carries at most 56 bytes with a connect request (IB and RoCE). */
#define PVGPU_VERBS_CONNECT_PD	56
#define PVGPU_VERBS_TOKEN_MAX	32	/* the per-VM token, in those bytes */
#define PVGPU_VERBS_ACCEPT_PD	24

#define PVGPU_VERBS_MIN_SLOTS	2
#define PVGPU_VERBS_MAX_SLOTS	256
#define PVGPU_VERBS_MIN_SLOT	4096
#define PVGPU_VERBS_MAX_SLOT	(4u << 20)
#define PVGPU_VERBS_SLOT_HDR	16

/* What an end can do, in the private data (byte 5). */
#define PVGPU_VERBS_F_REF	1u	/* reads REF slots (RDMA READ) */
#define PVGPU_VERBS_F_MORE	2u	/* reads PVGPU_VERBS_SLOT_MORE */
#define PVGPU_VERBS_FEATURES	(PVGPU_VERBS_F_REF | PVGPU_VERBS_F_MORE)

/* A ring as its owner describes it to the peer. */
struct pvgpu_verbs_ring {
	uint64_t addr;			/* slot 0; the credit word after the last */
	uint32_t rkey;
	uint32_t nslots;
	uint32_t slot_size;		/* header included */
	uint32_t features;		/* PVGPU_VERBS_F_* of the ring's owner */
};

/* What the active side (guest, front node) sends with its connect request. */
struct pvgpu_verbs_hello {
	struct pvgpu_verbs_ring ring;
	char token[PVGPU_VERBS_TOKEN_MAX + 1];	/* NUL-terminated; "" none */
};

/* Encoders return the bytes written (fixed sizes above). */
size_t pvgpu_verbs_hello_encode(uint8_t out[PVGPU_VERBS_CONNECT_PD],
				const struct pvgpu_verbs_hello *h);
/* 0, or -1 with one line in err: wrong magic, version, ring shape, token. */
int pvgpu_verbs_hello_decode(const uint8_t *p, size_t len,
			     struct pvgpu_verbs_hello *h, char *err,
			     size_t errlen);
size_t pvgpu_verbs_ring_encode(uint8_t out[PVGPU_VERBS_ACCEPT_PD],
			       const struct pvgpu_verbs_ring *r);
int pvgpu_verbs_ring_decode(const uint8_t *p, size_t len,
			    struct pvgpu_verbs_ring *r, char *err, size_t errlen);

/* The head of every ring slot. */
struct pvgpu_verbs_slot {
	uint32_t seq;			/* low 32 bits of the slot's sequence */
	uint32_t len;			/* payload bytes after the header */
	uint32_t magic;
	uint32_t zero;
};

void pvgpu_verbs_slot_encode(uint8_t out[PVGPU_VERBS_SLOT_HDR], uint32_t seq,
			     uint32_t len);

/*
 * A REF slot (the header's last word PVGPU_VERBS_SLOT_REF) carries no
 * bytes of the stream but says where they are: len bytes of the sender's
 * registered memory, for the receiver to fetch by RDMA READ (pinned
 * memory moved in place, never copied into the ring).  The sender keeps
 * the memory as it is until the receiver hands the slot back.
 */
#define PVGPU_VERBS_SLOT_REF	1u
#define PVGPU_VERBS_REF_LEN	16	/* the payload: addr, rkey, len */
#define PVGPU_VERBS_REF_MAX	(1u << 30)

struct pvgpu_verbs_ref {
	uint64_t addr;
	uint32_t rkey;
	uint32_t len;
};

/* Header and payload of a REF slot: PVGPU_VERBS_SLOT_HDR + REF_LEN bytes. */
void pvgpu_verbs_ref_encode(uint8_t *out, uint32_t seq,
			    const struct pvgpu_verbs_ref *r);
/* 0 and *r when payload (plen bytes) is a sound reference; -1 otherwise. */
int pvgpu_verbs_ref_decode(const uint8_t *payload, uint32_t plen,
			   struct pvgpu_verbs_ref *r);

/*
 * Beside the kind in the header's last word (to a peer that said
 * PVGPU_VERBS_F_MORE): the sender's message goes on in the next slot.  A
 * receiver left waiting after such a slot knows its peer stopped halfway
 * through a message, which an idle peer never does.
 */
#define PVGPU_VERBS_SLOT_MORE	0x100u
void pvgpu_verbs_slot_more(uint8_t out[PVGPU_VERBS_SLOT_HDR]);

/*
 * The header expected at seq in a slot of slot_size: 0 (bytes of the
 * stream, *len of them), PVGPU_VERBS_SLOT_REF (a reference, *len bytes of
 * payload), either with PVGPU_VERBS_SLOT_MORE, or -1.
 */
int pvgpu_verbs_slot_check(const uint8_t in[PVGPU_VERBS_SLOT_HDR],
			   uint32_t seq, uint32_t slot_size, uint32_t *len);

/*
 * A peer that stops handing credit back (or completing our writes)
 * without a disconnect -- frozen, or its host gone quietly -- ends the
 * connection after this long.  verbs://HOST:PORT?timeout=SECONDS sets it.
 */
#define PVGPU_VERBS_TIMEOUT_MS		10000
#define PVGPU_VERBS_TIMEOUT_MAX_MS	(3600u * 1000)

/*
 * "HOST:PORT" or "HOST:PORT?timeout=N" (seconds, or Nms): the address
 * part into hostport, the timeout into *timeout_ms (left alone when not
 * given).  0, or -1 with one line in err.
 */
int pvgpu_verbs_addr_options(const char *addr, char *hostport, size_t len,
			     uint32_t *timeout_ms, char *err, size_t errlen);

#endif /* PVGPU_VERBS_WIRE_H */
