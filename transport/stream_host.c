/*
 * stream_host.c - the host side of the stream core: a connection over a
 * connected socket (receives with the descriptors a guest may pass along,
 * sends, waits) and the listening-socket helpers unix, tcp, vsock and shm
 * share.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "host.h"
#include "stream.h"

struct stream_conn {
	struct pvgpu_conn base;
	unsigned int features;	/* PVGPU_TR_* */
	int passed_fd;		/* newest descriptor the guest sent; -1: none */
};

/*
 * A guest passes a window's file descriptor with SCM_RIGHTS alongside the
 * window_attach request (shm://), so reads on a channel that may pass
 * them take ancillary data too.  The newest descriptor waits until
 * take_fd claims it; any other is closed at once, so a guest cannot make
 * us hoard them.
 */
static ssize_t stream_conn_recv(struct pvgpu_conn *base, void *buf, size_t len,
				int nonblock)
{
	struct stream_conn *c = (struct stream_conn *)base;
	struct iovec iov = { buf, len };
	int flags = nonblock ? MSG_DONTWAIT : 0, fd;
	ssize_t n;

	if (!(c->features & PVGPU_TR_PASSES_FD)) {
		n = recv(base->fd, buf, len, flags);
		return n < 0 ? -errno : n;
	}
	n = pvgpu_sock_recv_fd(base->fd, &iov, 1, MSG_CMSG_CLOEXEC | flags, &fd,
			       NULL);
	if (fd >= 0) {
		if (c->passed_fd >= 0)
			close(c->passed_fd);
		c->passed_fd = fd;
	}
	return n;
}

static int stream_conn_sendv(struct pvgpu_conn *c, struct iovec *iov, int iovcnt)
{
	while (iovcnt) {
		struct msghdr msg = { .msg_iov = iov, .msg_iovlen = (size_t)iovcnt };
		/* MSG_NOSIGNAL: a guest gone is an error, not a SIGPIPE. */
		ssize_t n = sendmsg(c->fd, &msg, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		while (iovcnt && (size_t)n >= iov->iov_len) {
			n -= (ssize_t)iov->iov_len;
			iov++;
			iovcnt--;
		}
		if (iovcnt) {
			iov->iov_base = (uint8_t *)iov->iov_base + n;
			iov->iov_len -= (size_t)n;
		}
	}
	return 0;
}

static int stream_conn_wait(struct pvgpu_conn *c, int64_t timeout_ns)
{
	struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
	struct timespec ts = { timeout_ns / 1000000000, timeout_ns % 1000000000 };
	int n = ppoll(&pfd, 1, timeout_ns < 0 ? NULL : &ts, NULL);

	return n < 0 ? -errno : n > 0;
}

static int stream_conn_hung_up(struct pvgpu_conn *c)
{
	struct pollfd pfd = { c->fd, POLLRDHUP, 0 };

	return poll(&pfd, 1, 0) > 0 &&
	       (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static int stream_conn_take_fd(struct pvgpu_conn *base)
{
	struct stream_conn *c = (struct stream_conn *)base;
	int fd = c->passed_fd;

	c->passed_fd = -1;
	return fd;
}

static void stream_conn_release(struct pvgpu_conn *base)
{
	struct stream_conn *c = (struct stream_conn *)base;

	if (base->fd >= 0)
		close(base->fd);
	if (c->passed_fd >= 0)
		close(c->passed_fd);
	free(c);
}

static const struct pvgpu_conn_ops stream_conn_ops = {
	.recv = stream_conn_recv,
	.sendv = stream_conn_sendv,
	.wait = stream_conn_wait,
	.hung_up = stream_conn_hung_up,
	.take_fd = stream_conn_take_fd,
	.release = stream_conn_release,
	.close = stream_conn_release,
};

struct pvgpu_conn *pvgpu_stream_conn_new(int fd, unsigned int features)
{
	struct stream_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->base.ops = &stream_conn_ops;
	c->base.fd = fd;
	c->features = features;
	c->passed_fd = -1;
	return &c->base;
}

int pvgpu_stream_listen_fd(int family, const struct sockaddr *sa,
			   socklen_t len, int reuse)
{
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, e;

	if (fd < 0)
		return -errno;
	if (reuse)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, sa, len) < 0 || listen(fd, 64) < 0)
		goto err_close;
	return fd;

err_close:
	e = errno;
	close(fd);
	return -e;
}

int pvgpu_stream_accept_fd(struct pvgpu_listener *l, int *fd,
			   struct sockaddr_storage *ss)
{
	socklen_t len = sizeof(*ss);

	*fd = accept4(l->fd, (struct sockaddr *)ss, &len, SOCK_CLOEXEC);
	return *fd < 0 ? -errno : 0;
}

int pvgpu_stream_poll_fd(const struct pvgpu_listener *l)
{
	return l->fd;
}

void pvgpu_stream_forget(struct pvgpu_listener *l)
{
	if (l->fd >= 0)
		close(l->fd);
	l->fd = -1;
}

void pvgpu_stream_close_listener(struct pvgpu_listener *l)
{
	pvgpu_stream_forget(l);
	if (l->path[0])
		unlink(l->path);
}
