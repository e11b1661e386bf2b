/*
 * vchan_guest.h - what transport-vchan.so offers the guest library beyond
 * the ops table (pvgpu_transport_vchan, transport/transport.h).
 */
#ifndef PVGPU_VCHAN_GUEST_H
#define PVGPU_VCHAN_GUEST_H

#include <stddef.h>
#include <stdint.h>

struct pvgpu_transport;

/*
 * Parse "DOMID/NAME" or "DOMID//ABS/PATH" ("#N" after it is ignored) into
 * the backend's domid and the xenstore path of this domain's channel
 * (self: our domid).  0, -EINVAL or -ENAMETOOLONG.  Pure (fuzzed).
 */
int pvgpu_vchan_parse(const char *addr, unsigned int *domid, char *path,
		      size_t pathlen, int self);
/*
 * The bulk window the backend accepted (granted pages, laid out per
 * common/window.h with the header written): 0, or -ENOENT when there is
 * none and the ring carries everything.
 */
int pvgpu_vchan_guest_window(struct pvgpu_transport *t, void **base,
			     uint64_t *size);
/* pvgpu_transport_quiet() for a vchan: nothing to read and still open. */
int pvgpu_vchan_guest_quiet(struct pvgpu_transport *t);

#endif /* PVGPU_VCHAN_GUEST_H */
