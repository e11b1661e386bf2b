/* tcp/guest.c - tcp://HOST:PORT ([IPv6]:PORT too): a TCP stream. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "addr.h"
#include "stream.h"

/* Long enough for a loaded host, short enough that a dead one is no hang. */
#define TCP_CONNECT_TIMEOUT_MS	10000
/* Room for several data blocks in flight in each direction. */
#define TCP_SOCKET_BUFFER	(8 * 1024 * 1024)

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
		snprintf(err, errlen, "bad address '%s' (want HOST:PORT, PORT 1..65535)",
			 addr);
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

const struct pvgpu_transport_ops pvgpu_guest_tcp = {
	.scheme = "tcp",
	.features = PVGPU_TRG_SENDS_TOKEN,
	.connect = tcp_connect,
	.sendv = pvgpu_stream_sendv,
	.recv = pvgpu_stream_recv,
	.close = pvgpu_stream_close,
	.quiet = pvgpu_stream_quiet,
	.kick = pvgpu_stream_kick,
	.wait_kick = pvgpu_stream_wait_kick,
};
