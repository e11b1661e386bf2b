/* vchan_proto.c - see vchan_proto.h. */
#include "vchan_proto.h"

#include <errno.h>
#include <string.h>

#include "window.h"

static void put32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

void pvgpu_vchan_setup_encode_hdr(uint8_t *out, uint32_t npages)
{
	put32(out, PVGPU_VCHAN_SETUP_MAGIC);
	put32(out + 4, PVGPU_VCHAN_VERSION);	/* version, flags 0 */
	put32(out + 8, npages);
	put32(out + 12, 0);
}

int pvgpu_vchan_setup_decode_hdr(const uint8_t *in, size_t len,
				 struct pvgpu_vchan_setup *out)
{
	uint32_t vf;

	if (len != PVGPU_VCHAN_SETUP_HDR || get32(in) != PVGPU_VCHAN_SETUP_MAGIC)
		return -EPROTO;
	vf = get32(in + 4);
	out->version = (uint16_t)(vf & 0xffff);
	out->flags = (uint16_t)(vf >> 16);
	out->npages = get32(in + 8);
	if (out->version != PVGPU_VCHAN_VERSION || out->flags || get32(in + 12))
		return -EPROTO;
	if (out->npages > PVGPU_VCHAN_MAX_PAGES)
		return -E2BIG;
	return 0;
}

void pvgpu_vchan_reply_encode(uint8_t out[PVGPU_VCHAN_REPLY_SIZE], int32_t status)
{
	put32(out, PVGPU_VCHAN_REPLY_MAGIC);
	put32(out + 4, (uint32_t)status);
}

int pvgpu_vchan_reply_decode(const uint8_t *in, size_t len, int32_t *status)
{
	if (len != PVGPU_VCHAN_REPLY_SIZE || get32(in) != PVGPU_VCHAN_REPLY_MAGIC)
		return -EPROTO;
	*status = (int32_t)get32(in + 4);
	if (*status > 0)
		return -EPROTO;
	return 0;
}

int pvgpu_vchan_window_check(const struct pvgpu_window_header *hdr,
			     uint64_t mapped)
{
	uint64_t staging_end;

	if (hdr->magic != PVGPU_WINDOW_MAGIC || hdr->layout != PVGPU_WINDOW_LAYOUT ||
	    hdr->size != mapped || mapped < 2 * PVGPU_WINDOW_HDR_SIZE)
		return -EINVAL;
	if (hdr->staging_offset < PVGPU_WINDOW_HDR_SIZE || hdr->staging_offset > mapped ||
	    hdr->nslots > 64 || hdr->slot_size > mapped)
		return -EINVAL;
	/* 64-bit products of 32-bit fields cannot wrap. */
	staging_end = hdr->staging_offset + (uint64_t)hdr->slot_size * hdr->nslots;
	if (staging_end > mapped)
		return -EINVAL;
	return 0;
}
