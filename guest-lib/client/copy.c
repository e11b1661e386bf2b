/*
 * copy.c - a copy between the guest's memory and the device, the way the
 * connection makes cheapest.  The front-end says where its host memory lies
 * in the shared window, if it does (it alone knows its registrations);
 * here the path is chosen once for every front-end:
 *
 *   in the window      the worker DMAs it in place (memcpy_*_window)
 *   64 KiB or more     through the window's staging ring, moved here while
 *                      the worker DMAs the other end (memcpy_*_staged)
 *   else               inline in the messages; a small copy to the host
 *                      lands in the ring's landing when the worker pinned
 *                      it with the completion word
 */
#include "client.h"
#include "guest_window.h"
#include "pvgpu_guest.h"
#include "pvgpu_proto.h"

/* Below this a staged copy costs more than the bytes inline. */
#define STAGED_MIN	(64u * 1024)

int32_t pvgpu_client_htod(struct pvgpu_client *c, uint64_t dst, const void *src,
			  uint64_t n, uint64_t stream, int async,
			  const uint64_t *window_off)
{
	struct pvgpu_window_map *win = pvgpu_client_window(c);

	if (win && window_off) {
		struct pvgpu_memcpy_htod_window_req req = { dst, *window_off, n, stream };
		struct pvgpu_memcpy_htod_window_async_req areq = { dst, *window_off, n, stream };
		struct pvgpu_memcpy_htod_window_rep rep;

		return async ? pvgpu_call_memcpy_htod_window_async(c, &areq) :
			       pvgpu_call_memcpy_htod_window(c, &req, &rep);
	}
	if (win && n >= STAGED_MIN) {
		struct pvgpu_memcpy_htod_staged_req req = { dst, n, stream };
		uint8_t q[PVGPU_MEMCPY_HTOD_STAGED_REQ_MAX];
		long qn = pvgpu_memcpy_htod_staged_req_encode(q, &req);

		if (qn < 0)
			return PVGPU_CLIENT_EENCODE;
		return pvgpu_client_call_staged(c, PVGPU_OP_MEMCPY_HTOD_STAGED,
						q, (size_t)qn, src, NULL, n);
	}
	if (async) {
		struct pvgpu_memcpy_htod_async_req req = { dst, n, stream };

		return pvgpu_call_memcpy_htod_async(c, &req, src);
	}
	struct pvgpu_memcpy_htod_req req = { dst, n, stream };
	struct pvgpu_memcpy_htod_rep rep;

	return pvgpu_call_memcpy_htod(c, &req, &rep, src);
}

int32_t pvgpu_client_dtoh(struct pvgpu_client *c, void *dst, uint64_t src,
			  uint64_t n, uint64_t stream, int async,
			  const uint64_t *window_off)
{
	struct pvgpu_window_map *win = pvgpu_client_window(c);
	int32_t st;

	if (win && window_off) {
		struct pvgpu_memcpy_dtoh_window_req req = { src, *window_off, n, stream };
		struct pvgpu_memcpy_dtoh_window_async_req areq = { src, *window_off, n, stream };
		struct pvgpu_memcpy_dtoh_window_rep rep;

		return async ? pvgpu_call_memcpy_dtoh_window_async(c, &areq) :
			       pvgpu_call_memcpy_dtoh_window(c, &req, &rep);
	}
	if (win && n >= STAGED_MIN) {
		struct pvgpu_memcpy_dtoh_staged_req req = { src, n, stream };
		uint8_t q[PVGPU_MEMCPY_DTOH_STAGED_REQ_MAX];
		long qn = pvgpu_memcpy_dtoh_staged_req_encode(q, &req);

		if (qn < 0)
			return PVGPU_CLIENT_EENCODE;
		return pvgpu_client_call_staged(c, PVGPU_OP_MEMCPY_DTOH_STAGED,
						q, (size_t)qn, NULL, dst, n);
	}
	if (pvgpu_client_dtoh_landing(c, dst, src, n, stream, &st))
		return st;
	/* Into memory outside the window even an async copy completes first. */
	struct pvgpu_memcpy_dtoh_req req = { src, n, stream };
	struct pvgpu_memcpy_dtoh_rep rep;

	return pvgpu_call_memcpy_dtoh(c, &req, &rep, dst);
}
