/*
 * stream.c - the guest side of the stream core: whole-buffer sendv and
 * recv on a connected socket (with a bounded busy-poll before a blocking
 * receive), quiet, close, fd passing and the Unix connect that unix://
 * and shm:// share.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "stream.h"
#include "wait.h"

int pvgpu_stream_sendv(struct pvgpu_transport *t, struct iovec *iov, int iovcnt)
{
	while (iovcnt > 0) {
		struct msghdr msg = { .msg_iov = iov, .msg_iovlen = (size_t)iovcnt };
		ssize_t n;

		if (t->fd < 0)
			return -EBADF;
		/* MSG_NOSIGNAL: a dead peer is an error, not a SIGPIPE. */
		n = sendmsg(t->fd, &msg, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		/* Skip what went out; resume inside a partly sent element. */
		while (iovcnt > 0 && (size_t)n >= iov->iov_len) {
			n -= (ssize_t)iov->iov_len;
			iov++;
			iovcnt--;
		}
		if (iovcnt > 0) {
			iov->iov_base = (char *)iov->iov_base + n;
			iov->iov_len -= (size_t)n;
		}
	}
	return 0;
}

/*
 * A reply to a small call comes back within microseconds; polling for that
 * long (PVGPU_POLL_US, default 50) beats sleeping in recv and being woken.
 * Returns what recv returned, or -2 when nothing came in time.
 */
static ssize_t poll_recv(struct pvgpu_transport *t, void *buf, size_t len)
{
	struct pvgpu_poll poll = { 0 };

	while (t->poll_ns) {
		ssize_t n = recv(t->fd, buf, len, MSG_DONTWAIT);

		if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
			return n;
		if (!pvgpu_poll_again(&poll, t->poll_ns))
			break;
	}
	return -2;
}

int pvgpu_stream_recv(struct pvgpu_transport *t, void *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n;

		if (t->fd < 0)
			return -EBADF;
		n = poll_recv(t, (char *)buf + got, len - got);
		if (n == -2)
			n = recv(t->fd, (char *)buf + got, len - got,
				 t->ops->features & PVGPU_TRG_NO_WAITALL ? 0 : MSG_WAITALL);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		got += (size_t)n;
	}
	return 0;
}

void pvgpu_stream_close(struct pvgpu_transport *t)
{
	if (t->fd >= 0) {
		close(t->fd);
		t->fd = -1;
	}
}

int pvgpu_stream_quiet(struct pvgpu_transport *t)
{
	struct pollfd pfd = { t->fd, POLLIN | POLLRDHUP, 0 };

	if (t->fd < 0)
		return 0;
	return poll(&pfd, 1, 0) == 0;
}

int pvgpu_stream_connect_unix(struct pvgpu_transport *t, const char *path,
			char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, rc;

	if (!*path || strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "bad socket path '%s'", path);
		return -EINVAL;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto err_errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		goto err_close;
	t->fd = fd;
	return 0;

err_close:
	rc = -errno;
	close(fd);
	snprintf(err, errlen, "connect %s: %s", path, strerror(-rc));
	return rc;
err_errno:
	rc = -errno;
	snprintf(err, errlen, "socket: %s", strerror(-rc));
	return rc;
}

ssize_t pvgpu_sock_send_fd(int sock, struct iovec *iov, int iovcnt, int fd,
			   int flags)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int))];
	} control;
	struct msghdr msg = {
		.msg_iov = iov,
		.msg_iovlen = (size_t)iovcnt,
		.msg_control = control.buf,
		.msg_controllen = sizeof(control.buf),
	};
	struct cmsghdr *cm;
	ssize_t n;

	memset(control.buf, 0, sizeof(control.buf));
	cm = CMSG_FIRSTHDR(&msg);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	n = sendmsg(sock, &msg, flags);
	return n < 0 ? -errno : n;
}

/* Room for a few: one more than a peer should send is still read and closed. */
#define RECV_FDS_MAX	4

ssize_t pvgpu_sock_recv_fd(int sock, struct iovec *iov, int iovcnt, int flags,
			   int *fd, int *msg_flags)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * RECV_FDS_MAX)];
	} control;
	struct msghdr msg = {
		.msg_iov = iov,
		.msg_iovlen = (size_t)iovcnt,
		.msg_control = control.buf,
		.msg_controllen = sizeof(control.buf),
	};
	struct cmsghdr *cm;
	ssize_t n;

	*fd = -1;
	n = recvmsg(sock, &msg, flags);
	if (n < 0)
		return -errno;
	if (msg_flags)
		*msg_flags = msg.msg_flags;
	for (cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
		size_t nfds;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		nfds = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < nfds; i++) {
			if (*fd >= 0)
				close(*fd);
			memcpy(fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
		}
	}
	return n;
}

/* One sendmsg carrying fd as SCM_RIGHTS, then the rest of iov as usual. */
int pvgpu_stream_sendv_fd(struct pvgpu_transport *t, struct iovec *iov,
			 int iovcnt, int fd)
{
	ssize_t n;

	do
		n = pvgpu_sock_send_fd(t->fd, iov, iovcnt, fd, MSG_NOSIGNAL);
	while (n == -EINTR);
	if (n < 0)
		return (int)n;
	while (iovcnt > 0 && (size_t)n >= iov->iov_len) {
		n -= (ssize_t)iov->iov_len;
		iov++;
		iovcnt--;
	}
	if (iovcnt > 0) {
		iov->iov_base = (char *)iov->iov_base + n;
		iov->iov_len -= (size_t)n;
	}
	return iovcnt > 0 ? pvgpu_stream_sendv(t, iov, iovcnt) : 0;
}

/* One wake-up byte; a socket too full to take it is awake enough. */
int pvgpu_stream_kick(struct pvgpu_transport *t)
{
	if (t->fd < 0)
		return -EBADF;
	if (send(t->fd, "k", 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 &&
	    errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
		return -errno;
	return 0;
}

/* Until a wake-up byte or the hang-up; the bytes that came are dropped. */
int pvgpu_stream_wait_kick(struct pvgpu_transport *t)
{
	struct pollfd pfd = { .fd = t->fd, .events = POLLIN | POLLRDHUP };
	char buf[64];
	ssize_t n;

	if (t->fd < 0)
		return -EBADF;
	if (poll(&pfd, 1, -1) < 0)
		return errno == EINTR ? 0 : -errno;
	n = recv(t->fd, buf, sizeof(buf), MSG_DONTWAIT);
	if (n == 0)
		return -ECONNRESET;
	if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
		return -errno;
	return 0;
}
