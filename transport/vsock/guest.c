/* vsock/guest.c - vsock://CID:PORT from inside a VM. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <linux/vm_sockets.h>

#include "addr.h"
#include "stream.h"

#define VSOCK_CONNECT_TIMEOUT_S 20

/*
 * vsock://CID:PORT, from inside a VM: the host is CID 2.  Who we are comes
 * from the channel (the backend sees our CID, or the vhost-user instance we
 * came through), never from anything we send.
 */
static int vsock_connect(struct pvgpu_transport *t, const char *addr,
			 char *err, size_t errlen)
{
	struct sockaddr_vm sa = { .svm_family = AF_VSOCK };
	int fd;

	if (pvgpu_vsock_addr(addr, 0, &sa.svm_cid, &sa.svm_port)) {
		snprintf(err, errlen, "vsock address '%s' is not CID:PORT", addr);
		return -EINVAL;
	}
	fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
	/*
	 * The kernel gives up on a connect after 2 s; a busy host (many guests
	 * booting, the backend forking a worker) can take longer to answer.
	 * A host with no listener still refuses at once.
	 */
	if (fd >= 0) {
		struct timeval tv = { .tv_sec = VSOCK_CONNECT_TIMEOUT_S };

		(void)setsockopt(fd, AF_VSOCK, SO_VM_SOCKETS_CONNECT_TIMEOUT, &tv, sizeof(tv));
	}
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;

		snprintf(err, errlen, "vsock %s: %s", addr, strerror(e));
		if (fd >= 0)
			close(fd);
		return -e;
	}
	t->fd = fd;
	return 0;
}

const struct pvgpu_transport_ops pvgpu_guest_vsock = {
	.scheme = "vsock",
	/*
	 * AF_VSOCK refuses a MSG_WAITALL receive at or above its buffer size
	 * (256 KiB by default) with ENOMEM; plain receives in a loop it takes.
	 */
	.features = PVGPU_TRG_NO_WAITALL | PVGPU_TRG_DEVICE_WINDOW,
	.connect = vsock_connect,
	.sendv = pvgpu_stream_sendv,
	.recv = pvgpu_stream_recv,
	.close = pvgpu_stream_close,
	.quiet = pvgpu_stream_quiet,
	.kick = pvgpu_stream_kick,
	.wait_kick = pvgpu_stream_wait_kick,
};
