/*
 * transport_stream.c - byte-stream transports: unix://PATH and
 * tcp://HOST:PORT.  Both are a connected SOCK_STREAM fd; they differ only
 * in how they connect.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <linux/vm_sockets.h>
#include <time.h>
#include <unistd.h>

#include "addr.h"
#include "transport.h"
#include "wait.h"

/* Long enough for a loaded host, short enough that a dead one is no hang. */
#define TCP_CONNECT_TIMEOUT_MS	10000
/* Room for several data blocks in flight in each direction. */
#define TCP_SOCKET_BUFFER	(8 * 1024 * 1024)

static int stream_sendv(struct pvgpu_transport *t, struct iovec *iov, int iovcnt)
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

static int stream_recv(struct pvgpu_transport *t, void *buf, size_t len)
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

static void stream_close(struct pvgpu_transport *t)
{
	if (t->fd >= 0) {
		close(t->fd);
		t->fd = -1;
	}
}

static int unix_connect(struct pvgpu_transport *t, const char *path,
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

/* connect() with a deadline, so an unreachable host fails in bounded time. */
static int connect_timeout(int fd, const struct sockaddr *sa, socklen_t len)
{
	int flags = fcntl(fd, F_GETFL), so_err = 0;
	socklen_t so_len = sizeof(so_err);
	struct pollfd pfd = { .fd = fd, .events = POLLOUT };
	int rc;

	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
		return -errno;
	rc = connect(fd, sa, len);
	if (rc < 0 && errno != EINPROGRESS)
		return -errno;
	if (rc < 0) {
		do
			rc = poll(&pfd, 1, TCP_CONNECT_TIMEOUT_MS);
		while (rc < 0 && errno == EINTR);
		if (rc < 0)
			return -errno;
		if (rc == 0)
			return -ETIMEDOUT;
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_err, &so_len) < 0)
			return -errno;
		if (so_err)
			return -so_err;
	}
	if (fcntl(fd, F_SETFL, flags) < 0)
		return -errno;
	return 0;
}

static void tcp_tune(int fd)
{
	int one = 1, buf = TCP_SOCKET_BUFFER;

	/* Small control messages must not wait for Nagle. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* Best effort: the kernel caps these at net.core.[rw]mem_max. */
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
}

static int tcp_connect(struct pvgpu_transport *t, const char *addr,
		       char *err, size_t errlen)
{
	struct addrinfo hints = {
		.ai_family = AF_UNSPEC,
		.ai_socktype = SOCK_STREAM,
	};
	struct addrinfo *res, *ai;
	char host[256], port[32];
	int rc, fd = -1;

	if (pvgpu_host_port(addr, host, sizeof(host), port, sizeof(port))) {
		snprintf(err, errlen, "bad address '%s' (want HOST:PORT)", addr);
		return -EINVAL;
	}
	rc = getaddrinfo(host, port, &hints, &res);
	if (rc) {
		snprintf(err, errlen, "resolve %s: %s", addr, gai_strerror(rc));
		return -EHOSTUNREACH;
	}
	rc = -EHOSTUNREACH;
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
			    ai->ai_protocol);
		if (fd < 0) {
			rc = -errno;
			continue;
		}
		tcp_tune(fd);
		rc = connect_timeout(fd, ai->ai_addr, ai->ai_addrlen);
		if (!rc)
			break;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0) {
		snprintf(err, errlen, "connect %s: %s", addr, strerror(-rc));
		return rc;
	}
	t->fd = fd;
	return 0;
}

const struct pvgpu_transport_ops pvgpu_transport_unix = {
	.scheme = "unix",
	/* No PVGPU_TRG_SENDS_TOKEN: the backend reads SO_PEERCRED. */
	.connect = unix_connect,
	.sendv = stream_sendv,
	.recv = stream_recv,
	.close = stream_close,
};

const struct pvgpu_transport_ops pvgpu_transport_tcp = {
	.scheme = "tcp",
	.features = PVGPU_TRG_SENDS_TOKEN,
	.connect = tcp_connect,
	.sendv = stream_sendv,
	.recv = stream_recv,
	.close = stream_close,
};

/* One sendmsg carrying fd as SCM_RIGHTS, then the rest of iov as usual. */
static int unix_sendv_fd(struct pvgpu_transport *t, struct iovec *iov,
			 int iovcnt, int fd)
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
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	ssize_t n;

	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	do
		n = sendmsg(t->fd, &msg, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	while (iovcnt > 0 && (size_t)n >= iov->iov_len) {
		n -= (ssize_t)iov->iov_len;
		iov++;
		iovcnt--;
	}
	if (iovcnt > 0) {
		iov->iov_base = (char *)iov->iov_base + n;
		iov->iov_len -= (size_t)n;
	}
	return iovcnt > 0 ? stream_sendv(t, iov, iovcnt) : 0;
}

/* shm://PATH: the Unix socket for control plus a memfd window for data. */
const struct pvgpu_transport_ops pvgpu_transport_shm = {
	.scheme = "shm",
	.features = PVGPU_TRG_MEMFD_WINDOW,
	.connect = unix_connect,
	.sendv = stream_sendv,
	.recv = stream_recv,
	.close = stream_close,
	.sendv_fd = unix_sendv_fd,
};

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

const struct pvgpu_transport_ops pvgpu_transport_vsock = {
	.scheme = "vsock",
	/*
	 * AF_VSOCK refuses a MSG_WAITALL receive at or above its buffer size
	 * (256 KiB by default) with ENOMEM; plain receives in a loop it takes.
	 */
	.features = PVGPU_TRG_NO_WAITALL | PVGPU_TRG_DEVICE_WINDOW,
	.connect = vsock_connect,
	.sendv = stream_sendv,
	.recv = stream_recv,
	.close = stream_close,
};
