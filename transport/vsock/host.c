/*
 * vsock/host.c - pvgpud listening on vsock://any:PORT (or CID:PORT): the
 * caller is the peer CID the kernel reports; callers are VMs, to be found
 * in the registry (PVGPU_TR_VM_CALLERS).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <linux/vm_sockets.h>

#include "addr.h"
#include "host.h"
#include "stream.h"

static int vsock_listen(struct pvgpu_listener *l, const char *cidport,
			char *err, size_t errlen)
{
	struct sockaddr_vm sa = { .svm_family = AF_VSOCK };
	int fd;

	if (pvgpu_vsock_addr(cidport, 1, &sa.svm_cid, &sa.svm_port)) {
		snprintf(err, errlen, "vsock address '%s' is not any:PORT or CID:PORT",
			 cidport);
		return -EINVAL;
	}
	fd = pvgpu_stream_listen_fd(AF_VSOCK, (struct sockaddr *)&sa, sizeof(sa), 0);
	if (fd < 0) {
		snprintf(err, errlen, "vsock %s: %s", cidport, strerror(-fd));
		return fd;
	}
	l->fd = fd;
	l->features = PVGPU_TR_VM_CALLERS | PVGPU_TR_REATTACH;
	return 0;
}

static int vsock_accept(struct pvgpu_listener *l, struct pvgpu_peer *peer,
			struct pvgpu_conn **conn)
{
	struct sockaddr_storage ss;
	struct sockaddr_vm *svm = (struct sockaddr_vm *)&ss;
	int fd, rc;

	rc = pvgpu_stream_accept_fd(l, &fd, &ss);
	if (rc)
		return rc;
	snprintf(peer->id.value, sizeof(peer->id.value), "%u", svm->svm_cid);
	peer->id.kind = PVGPU_ID_CID;
	snprintf(peer->identity, sizeof(peer->identity), "cid=%u", svm->svm_cid);
	*conn = pvgpu_stream_conn_new(fd, l->features);
	if (!*conn) {
		close(fd);
		return -ENOMEM;
	}
	return 0;
}

const struct pvgpu_host_ops pvgpu_host_vsock = {
	.scheme = "vsock",
	.listen = vsock_listen,
	.poll_fd = pvgpu_stream_poll_fd,
	.accept = vsock_accept,
	.forget = pvgpu_stream_forget,
	.close = pvgpu_stream_close_listener,
};
