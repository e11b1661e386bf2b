/* listen.c - listening sockets for unix://, tcp:// and vsock:// URIs. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <linux/vm_sockets.h>

#include "addr.h"
#include "listen.h"

static int listen_unix(const char *path, mode_t mode,
		       struct pvgpu_listener *l, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (!*path || strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "unix socket path '%s' is empty or too long",
			 path);
		return -1;
	}
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto err_errno;
	/* A socket file left by a daemon that died is stale: replace it. */
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		snprintf(err, errlen, "%s: another pvgpud is already listening",
			 path);
		close(fd);
		return -1;
	}
	unlink(path);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(fd, 64) < 0)
		goto err_close;
	chmod(path, mode);
	strcpy(l->path, path);
	l->kind = EP_UNIX;
	l->features = PVGPU_TR_PASSES_FD;
	return fd;

err_close:
	close(fd);
err_errno:
	snprintf(err, errlen, "%s: %s", path, strerror(errno));
	return -1;
}

static int listen_tcp(const char *hostport, struct pvgpu_listener *l,
		      char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC,
				  .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE };
	struct addrinfo *res;
	char host[200], port[32];
	int fd, one = 1, rc;

	if (pvgpu_host_port(hostport, host, sizeof(host), port, sizeof(port))) {
		snprintf(err, errlen, "tcp address '%s' is not HOST:PORT",
			 hostport);
		return -1;
	}
	rc = getaddrinfo(host, port, &hints, &res);
	if (rc) {
		snprintf(err, errlen, "%s: %s", hostport, gai_strerror(rc));
		return -1;
	}
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto err_errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 64) < 0)
		goto err_close;
	freeaddrinfo(res);
	l->kind = EP_TCP;
	l->features = PVGPU_TR_ID_AT_HELLO;
	return fd;

err_close:
	close(fd);
err_errno:
	snprintf(err, errlen, "%s: %s", hostport, strerror(errno));
	freeaddrinfo(res);
	return -1;
}

static int listen_vsock(const char *cidport, struct pvgpu_listener *l,
			char *err, size_t errlen)
{
	struct sockaddr_vm sa = { .svm_family = AF_VSOCK };
	int fd;

	if (pvgpu_vsock_addr(cidport, 1, &sa.svm_cid, &sa.svm_port)) {
		snprintf(err, errlen, "vsock address '%s' is not any:PORT or CID:PORT",
			 cidport);
		return -1;
	}
	fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(fd, 64) < 0) {
		snprintf(err, errlen, "vsock %s: %s", cidport, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	l->kind = EP_VSOCK;
	l->features = PVGPU_TR_VM_CALLERS;
	return fd;
}

int pvgpu_listen(const char *uri, struct pvgpu_listener *l,
		 char *err, size_t errlen)
{
	memset(l, 0, sizeof(*l));
	l->fd = -1;
	snprintf(l->uri, sizeof(l->uri), "%s", uri);
	if (!strncmp(uri, "unix://", 7))
		/* Who may connect is decided by policy, from the caller's
		 * uid: the socket itself is open to every local user. */
		l->fd = listen_unix(uri + 7, 0666, l, err, errlen);
	else if (!strncmp(uri, "tcp://", 6))
		l->fd = listen_tcp(uri + 6, l, err, errlen);
	else if (!strncmp(uri, "vsock://", 8))
		l->fd = listen_vsock(uri + 8, l, err, errlen);
	else
		snprintf(err, errlen,
			 "unsupported listen URI '%s' (unix://PATH, tcp://HOST:PORT, vsock://any:PORT)",
			 uri);
	return l->fd < 0 ? -1 : 0;
}

int pvgpu_listen_vm(const char *path, const char *vm,
		    struct pvgpu_listener *l, char *err, size_t errlen)
{
	memset(l, 0, sizeof(*l));
	snprintf(l->uri, sizeof(l->uri), "unix://%s", path);
	snprintf(l->vm, sizeof(l->vm), "%s", vm);
	/*
	 * Whoever connects here is the VM, so only vhost-device-vsock may:
	 * the socket is ours alone, and accept checks the peer's uid too.
	 */
	l->fd = listen_unix(path, 0600, l, err, errlen);
	return l->fd < 0 ? -1 : 0;
}

void pvgpu_listener_close(struct pvgpu_listener *l)
{
	if (l->fd >= 0)
		close(l->fd);
	l->fd = -1;
	if (l->kind == EP_UNIX && l->path[0])
		unlink(l->path);
}

int pvgpu_accept(struct pvgpu_listener *l, struct pvgpu_peer *peer)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int fd, one = 1;

	fd = accept4(l->fd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC);
	if (fd < 0)
		return -1;
	memset(peer, 0, sizeof(*peer));
	peer->features = l->features;
	switch (l->kind) {
	case EP_UNIX: {
		struct ucred cred;
		socklen_t clen = sizeof(cred);

		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0) {
			close(fd);
			return -1;
		}
		if (l->vm[0] && cred.uid != 0 && cred.uid != geteuid()) {
			close(fd);
			errno = EPERM;
			return -1;
		}
		snprintf(peer->id.value, sizeof(peer->id.value), "%u",
			 (unsigned int)cred.uid);
		peer->id.kind = PVGPU_ID_UID;
		if (l->vm[0])
			snprintf(peer->identity, sizeof(peer->identity),
				 "vm %s via vhost-user (pid %d)", l->vm,
				 (int)cred.pid);
		else
			snprintf(peer->identity, sizeof(peer->identity),
				 "uid=%u,pid=%d", (unsigned int)cred.uid,
				 (int)cred.pid);
		break;
	}
	case EP_TCP: {
		char host[INET6_ADDRSTRLEN] = "?";
		int port = 0;

		if (ss.ss_family == AF_INET) {
			struct sockaddr_in *sin = (struct sockaddr_in *)&ss;

			inet_ntop(AF_INET, &sin->sin_addr, host, sizeof(host));
			port = ntohs(sin->sin_port);
		} else if (ss.ss_family == AF_INET6) {
			struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;

			inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof(host));
			port = ntohs(sin6->sin6_port);
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		snprintf(peer->identity, sizeof(peer->identity), "tcp:%s:%d",
			 host, port);
		break;
	}
	case EP_VSOCK: {
		struct sockaddr_vm *svm = (struct sockaddr_vm *)&ss;

		snprintf(peer->id.value, sizeof(peer->id.value), "%u",
			 svm->svm_cid);
		peer->id.kind = PVGPU_ID_CID;
		snprintf(peer->identity, sizeof(peer->identity), "cid=%u",
			 svm->svm_cid);
		break;
	}
	}
	return fd;
}
