/*
 * shm/host.c - pvgpud's half of shm://PATH: a Unix socket whose callers
 * pass their memfd window with SCM_RIGHTS (the stream core's connection
 * takes the descriptor; the worker claims it with take_fd at
 * window_attach).  unix://PATH serves shm:// guests too: a guest's shm://
 * is the same socket plus a window, so the two listeners are one.
 */
#include "stream.h"
#include "../unix/unix.h"

const struct pvgpu_host_ops pvgpu_host_shm = {
	.scheme = "shm",
	.listen = pvgpu_unix_listen,
	.poll_fd = pvgpu_stream_poll_fd,
	.accept = pvgpu_unix_accept,
	.forget = pvgpu_stream_forget,
	.close = pvgpu_stream_close_listener,
};
