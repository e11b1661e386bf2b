/*
 * vchan_proto.h - the setup frame that opens every vchan:// channel, before
 * the pvgpu protocol's hello.
 *
 * The guest half sends it right after libxenvchan_client_init: which
 * pages it granted to the backend domain for the bulk window (none, if
 * the guest could not or would not grant any).  The host half maps them
 * (xengnttab) and answers with a status word; from then on the ring
 * carries the ordinary pvgpu byte stream, and the window is laid out like
 * every other shared window (common/window.h), so the worker's staged and
 * zero-copy paths apply unchanged.
 *
 *   guest -> host   u32 magic "PVXS", u16 version, u16 flags (0),
 *                   u32 npages, u32 reserved (0), u32 grant_ref[npages]
 *   host -> guest   u32 magic "PVXR", i32 status (0, or -errno: the window
 *                   was refused and the channel carries everything)
 *
 * Little-endian (x86 only).  Nothing here needs libxen: the fuzz target
 * and the unit test link it alone.
 */
#ifndef PVGPU_VCHAN_PROTO_H
#define PVGPU_VCHAN_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define PVGPU_VCHAN_SETUP_MAGIC	0x53585650u	/* "PVXS" */
#define PVGPU_VCHAN_REPLY_MAGIC	0x52585650u	/* "PVXR" */
#define PVGPU_VCHAN_VERSION	1
#define PVGPU_VCHAN_SETUP_HDR	16u
#define PVGPU_VCHAN_REPLY_SIZE	8u
/*
 * The most pages a window may have: Xen 4.17's default grant table
 * (max_grant_frames 64, 512 v1 entries a frame) holds 32768 grants in all,
 * and the vchan ring needs some of them.
 */
#define PVGPU_VCHAN_MAX_PAGES	32000u
#define PVGPU_VCHAN_PAGE	4096u

struct pvgpu_vchan_setup {
	uint16_t version;
	uint16_t flags;
	uint32_t npages;
};

/* Bytes of a setup frame for npages grants. */
static inline size_t pvgpu_vchan_setup_size(uint32_t npages)
{
	return PVGPU_VCHAN_SETUP_HDR + (size_t)npages * 4u;
}

/* Encode the header into out[PVGPU_VCHAN_SETUP_HDR]. */
void pvgpu_vchan_setup_encode_hdr(uint8_t *out, uint32_t npages);
/*
 * Decode and check the fixed header (exactly PVGPU_VCHAN_SETUP_HDR bytes):
 * 0, or -EPROTO (bad magic, version, flags, reserved) or -E2BIG (npages
 * past PVGPU_VCHAN_MAX_PAGES).
 */
int pvgpu_vchan_setup_decode_hdr(const uint8_t *in, size_t len,
				 struct pvgpu_vchan_setup *out);
void pvgpu_vchan_reply_encode(uint8_t out[PVGPU_VCHAN_REPLY_SIZE], int32_t status);
/* 0 and *status, or -EPROTO. */
int pvgpu_vchan_reply_decode(const uint8_t *in, size_t len, int32_t *status);

/*
 * Check a window's header as the host mapped it (a copy, taken once):
 * 0 when its layout fits `mapped` bytes, else -EINVAL.  The worker checks
 * it again at attach (host-backend/session/window.c); this check is what
 * the transport itself relies on.
 */
struct pvgpu_window_header;
int pvgpu_vchan_window_check(const struct pvgpu_window_header *hdr,
			     uint64_t mapped);

#endif /* PVGPU_VCHAN_PROTO_H */
