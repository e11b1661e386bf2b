/*
 * tcp/host.c - pvgpud listening on tcp://HOST:PORT ([IPv6]:PORT too).  The
 * channel says nothing about who calls: the caller is "tcp:ADDR" here and
 * proves who it is with the token in hello (PVGPU_TR_ID_AT_HELLO).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "addr.h"
#include "host.h"
#include "stream.h"

/*
 * Port 0 took any free port: the listener's URI names the one it got, so
 * what pvgpud reports (--ready-fd, its log) is an address callers can use.
 */
static void name_bound_port(struct pvgpu_listener *l, const char *hostport,
			    const char *host)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int port;

	if (getsockname(l->fd, (struct sockaddr *)&ss, &len))
		return;
	if (ss.ss_family == AF_INET)
		port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	else if (ss.ss_family == AF_INET6)
		port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	else
		return;
	snprintf(l->uri, sizeof(l->uri), *hostport == '[' ? "tcp://[%s]:%d" :
		 "tcp://%s:%d", host, port);
}

static int tcp_listen(struct pvgpu_listener *l, const char *hostport,
		      char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC,
				  .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE };
	struct addrinfo *res;
	char host[200], port[32];
	int fd, rc;

	if (pvgpu_listen_host_port(hostport, host, sizeof(host), port,
				   sizeof(port))) {
		snprintf(err, errlen, "tcp address '%s' is not HOST:PORT (PORT 0..65535)",
			 hostport);
		return -EINVAL;
	}
	rc = getaddrinfo(host, port, &hints, &res);
	if (rc) {
		snprintf(err, errlen, "%s: %s", hostport, gai_strerror(rc));
		return -EINVAL;
	}
	fd = pvgpu_stream_listen_fd(res->ai_family, res->ai_addr,
				    res->ai_addrlen, 1);
	freeaddrinfo(res);
	if (fd < 0) {
		snprintf(err, errlen, "%s: %s", hostport, strerror(-fd));
		return fd;
	}
	l->fd = fd;
	l->features = PVGPU_TR_ID_AT_HELLO | PVGPU_TR_REATTACH;
	if (!strcmp(port, "0"))
		name_bound_port(l, hostport, host);
	return 0;
}

static int tcp_accept(struct pvgpu_listener *l, struct pvgpu_peer *peer,
		      struct pvgpu_conn **conn)
{
	struct sockaddr_storage ss;
	char host[INET6_ADDRSTRLEN] = "?";
	int fd, port = 0, one = 1, rc;

	rc = pvgpu_stream_accept_fd(l, &fd, &ss);
	if (rc)
		return rc;
	if (ss.ss_family == AF_INET) {
		struct sockaddr_in *sin = (struct sockaddr_in *)&ss;

		inet_ntop(AF_INET, &sin->sin_addr, host, sizeof(host));
		port = ntohs(sin->sin_port);
	} else if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;

		inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof(host));
		port = ntohs(sin6->sin6_port);
	}
	/* Small replies must not wait for Nagle. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	snprintf(peer->identity, sizeof(peer->identity), "tcp:%s:%d", host, port);
	snprintf(peer->addr, sizeof(peer->addr), "%s", host);
	*conn = pvgpu_stream_conn_new(fd, l->features);
	if (!*conn) {
		close(fd);
		return -ENOMEM;
	}
	return 0;
}

const struct pvgpu_host_ops pvgpu_host_tcp = {
	.scheme = "tcp",
	.listen = tcp_listen,
	.poll_fd = pvgpu_stream_poll_fd,
	.accept = tcp_accept,
	.forget = pvgpu_stream_forget,
	.close = pvgpu_stream_close_listener,
};
