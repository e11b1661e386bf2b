/* verbs_wire.c - encode and check what verbs:// peers exchange (verbs_wire.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verbs_wire.h"

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/*
 * Both layouts start with magic (4), version (2), slot-size log2 (1),
 * nslots - 1 (1), ring address (8), rkey (4): 20 bytes.
 */
static void ring_put(uint8_t *out, const struct pvgpu_verbs_ring *r)
{
	unsigned int lg = 0;

	while ((1u << lg) < r->slot_size)
		lg++;
	put32(out, PVGPU_VERBS_MAGIC);
	out[4] = PVGPU_VERBS_VERSION;
	out[5] = (uint8_t)r->features;
	out[6] = (uint8_t)lg;
	out[7] = (uint8_t)(r->nslots - 1);
	put64(out + 8, r->addr);
	put32(out + 16, r->rkey);
}

static int ring_get(const uint8_t *p, size_t len, struct pvgpu_verbs_ring *r,
		    char *err, size_t errlen)
{
	unsigned int lg;

	if (len < 20) {
		snprintf(err, errlen, "private data of %zu bytes, expected at least 20", len);
		return -1;
	}
	if (get32(p) != PVGPU_VERBS_MAGIC) {
		snprintf(err, errlen, "private data without the pvgpu magic (0x%08x)",
			 get32(p));
		return -1;
	}
	if (p[4] != PVGPU_VERBS_VERSION || (p[5] & ~PVGPU_VERBS_FEATURES)) {
		snprintf(err, errlen, "verbs channel version %u (features 0x%x), this end speaks %u (0x%x)",
			 p[4], p[5], PVGPU_VERBS_VERSION, PVGPU_VERBS_FEATURES);
		return -1;
	}
	r->features = p[5];
	lg = p[6];
	r->nslots = (uint32_t)p[7] + 1;
	if (lg > 31 || (1u << lg) < PVGPU_VERBS_MIN_SLOT ||
	    (1u << lg) > PVGPU_VERBS_MAX_SLOT ||
	    r->nslots < PVGPU_VERBS_MIN_SLOTS || r->nslots > PVGPU_VERBS_MAX_SLOTS) {
		snprintf(err, errlen, "bad ring shape: %u slots of 2^%u bytes",
			 r->nslots, lg);
		return -1;
	}
	r->slot_size = 1u << lg;
	r->addr = get64(p + 8);
	r->rkey = get32(p + 16);
	return 0;
}

size_t pvgpu_verbs_hello_encode(uint8_t out[PVGPU_VERBS_CONNECT_PD],
				const struct pvgpu_verbs_hello *h)
{
	size_t tl = strnlen(h->token, PVGPU_VERBS_TOKEN_MAX);

	memset(out, 0, PVGPU_VERBS_CONNECT_PD);
	ring_put(out, &h->ring);
	out[20] = (uint8_t)tl;
	memcpy(out + 21, h->token, tl);
	return PVGPU_VERBS_CONNECT_PD;
}

int pvgpu_verbs_hello_decode(const uint8_t *p, size_t len,
			     struct pvgpu_verbs_hello *h, char *err,
			     size_t errlen)
{
	size_t tl;

	memset(h, 0, sizeof(*h));
	if (ring_get(p, len, &h->ring, err, errlen))
		return -1;
	if (len < 21) {
		snprintf(err, errlen, "private data ends before the token");
		return -1;
	}
	tl = p[20];
	if (tl > PVGPU_VERBS_TOKEN_MAX || 21 + tl > len) {
		snprintf(err, errlen, "token of %zu bytes in %zu bytes of private data",
			 tl, len);
		return -1;
	}
	for (size_t i = 0; i < tl; i++) {
		if (p[21 + i] < 0x21 || p[21 + i] > 0x7e) {
			snprintf(err, errlen, "token with a byte that is not printable ASCII");
			return -1;
		}
	}
	memcpy(h->token, p + 21, tl);
	h->token[tl] = '\0';
	return 0;
}

size_t pvgpu_verbs_ring_encode(uint8_t out[PVGPU_VERBS_ACCEPT_PD],
			       const struct pvgpu_verbs_ring *r)
{
	memset(out, 0, PVGPU_VERBS_ACCEPT_PD);
	ring_put(out, r);
	return PVGPU_VERBS_ACCEPT_PD;
}

int pvgpu_verbs_ring_decode(const uint8_t *p, size_t len,
			    struct pvgpu_verbs_ring *r, char *err, size_t errlen)
{
	return ring_get(p, len, r, err, errlen);
}

void pvgpu_verbs_slot_encode(uint8_t out[PVGPU_VERBS_SLOT_HDR], uint32_t seq,
			     uint32_t len)
{
	put32(out, seq);
	put32(out + 4, len);
	put32(out + 8, PVGPU_VERBS_MAGIC);
	put32(out + 12, 0);
}

void pvgpu_verbs_slot_more(uint8_t out[PVGPU_VERBS_SLOT_HDR])
{
	put32(out + 12, get32(out + 12) | PVGPU_VERBS_SLOT_MORE);
}

void pvgpu_verbs_ref_encode(uint8_t *out, uint32_t seq,
			    const struct pvgpu_verbs_ref *r)
{
	pvgpu_verbs_slot_encode(out, seq, PVGPU_VERBS_REF_LEN);
	put32(out + 12, PVGPU_VERBS_SLOT_REF);
	put64(out + PVGPU_VERBS_SLOT_HDR, r->addr);
	put32(out + PVGPU_VERBS_SLOT_HDR + 8, r->rkey);
	put32(out + PVGPU_VERBS_SLOT_HDR + 12, r->len);
}

int pvgpu_verbs_ref_decode(const uint8_t *payload, uint32_t plen,
			   struct pvgpu_verbs_ref *r)
{
	if (plen != PVGPU_VERBS_REF_LEN)
		return -1;
	r->addr = get64(payload);
	r->rkey = get32(payload + 8);
	r->len = get32(payload + 12);
	return r->len && r->len <= PVGPU_VERBS_REF_MAX ? 0 : -1;
}

int pvgpu_verbs_slot_check(const uint8_t in[PVGPU_VERBS_SLOT_HDR],
			   uint32_t seq, uint32_t slot_size, uint32_t *len)
{
	uint32_t l = get32(in + 4);

	uint32_t word = get32(in + 12);
	uint32_t kind = word & ~PVGPU_VERBS_SLOT_MORE;

	if (get32(in) != seq || get32(in + 8) != PVGPU_VERBS_MAGIC ||
	    kind > PVGPU_VERBS_SLOT_REF || slot_size < PVGPU_VERBS_SLOT_HDR ||
	    l > slot_size - PVGPU_VERBS_SLOT_HDR ||
	    (kind == PVGPU_VERBS_SLOT_REF && l != PVGPU_VERBS_REF_LEN))
		return -1;
	*len = l;
	return (int)word;
}

int pvgpu_verbs_addr_options(const char *addr, char *hostport, size_t len,
			     uint32_t *timeout_ms, char *err, size_t errlen)
{
	const char *q = strchr(addr, '?');
	size_t hl = q ? (size_t)(q - addr) : strlen(addr);
	unsigned long v;
	char *end;

	if (hl >= len) {
		snprintf(err, errlen, "verbs address too long");
		return -1;
	}
	memcpy(hostport, addr, hl);
	hostport[hl] = '\0';
	if (!q)
		return 0;
	if (strncmp(q + 1, "timeout=", 8))
		goto err_option;
	errno = 0;
	v = strtoul(q + 9, &end, 10);
	if (end == q + 9 || errno || q[9] == '-')
		goto err_option;
	if (!strcmp(end, "ms"))
		;
	else if (!*end || !strcmp(end, "s"))
		v = v > PVGPU_VERBS_TIMEOUT_MAX_MS ? v : v * 1000;
	else
		goto err_option;
	if (!v || v > PVGPU_VERBS_TIMEOUT_MAX_MS)
		goto err_option;
	*timeout_ms = (uint32_t)v;
	return 0;

err_option:
	snprintf(err, errlen, "verbs address option \"%s\": want timeout=SECONDS (1..3600) or timeout=Nms",
		 q + 1);
	return -1;
}
