/*
 * shm/guest.c - shm://PATH: the Unix socket for control plus a memfd
 * window for data, passed to the backend with SCM_RIGHTS.
 */
#include "stream.h"

const struct pvgpu_transport_ops pvgpu_guest_shm = {
	.scheme = "shm",
	.features = PVGPU_TRG_MEMFD_WINDOW,
	.connect = pvgpu_stream_connect_unix,
	.sendv = pvgpu_stream_sendv,
	.recv = pvgpu_stream_recv,
	.close = pvgpu_stream_close,
	.sendv_fd = pvgpu_stream_sendv_fd,
	.quiet = pvgpu_stream_quiet,
	.kick = pvgpu_stream_kick,
	.wait_kick = pvgpu_stream_wait_kick,
};
