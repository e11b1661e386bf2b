/* unix/guest.c - unix://PATH from a local process: a Unix stream socket. */
#include "stream.h"

const struct pvgpu_transport_ops pvgpu_guest_unix = {
	.scheme = "unix",
	/* No PVGPU_TRG_SENDS_TOKEN: the backend reads SO_PEERCRED. */
	.connect = pvgpu_stream_connect_unix,
	.sendv = pvgpu_stream_sendv,
	.recv = pvgpu_stream_recv,
	.close = pvgpu_stream_close,
	.quiet = pvgpu_stream_quiet,
	.kick = pvgpu_stream_kick,
	.wait_kick = pvgpu_stream_wait_kick,
};
