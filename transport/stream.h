/*
 * stream.h - the stream core the socket transports share (unix, tcp,
 * vsock, shm): sendv, recv with a bounded busy-poll, quiet, close on the
 * guest side; the connection object and listener helpers on the host
 * side.  Written once here; each transport's folder says only how it
 * connects, listens and tells who is calling.
 */
#ifndef PVGPU_TRANSPORT_STREAM_H
#define PVGPU_TRANSPORT_STREAM_H

#include <sys/socket.h>
#include <sys/types.h>

#include "transport.h"

/* Guest: whole-buffer I/O on t->fd. */
int pvgpu_stream_sendv(struct pvgpu_transport *t, struct iovec *iov, int iovcnt);
int pvgpu_stream_recv(struct pvgpu_transport *t, void *buf, size_t len);
void pvgpu_stream_close(struct pvgpu_transport *t);
int pvgpu_stream_quiet(struct pvgpu_transport *t);
/* The control ring's wake-ups: a byte on t->fd; see transport.h. */
int pvgpu_stream_kick(struct pvgpu_transport *t);
int pvgpu_stream_wait_kick(struct pvgpu_transport *t);
/* One sendmsg carrying fd as SCM_RIGHTS, then the rest of iov. */
int pvgpu_stream_sendv_fd(struct pvgpu_transport *t, struct iovec *iov,
			  int iovcnt, int fd);

/*
 * A descriptor passed over a Unix socket (SCM_RIGHTS), the control
 * message built and read in this one place.  pvgpu_sock_send_fd: one
 * sendmsg of iov carrying fd; what it returned, or -errno.
 * pvgpu_sock_recv_fd: one recvmsg into iov; *fd is the newest descriptor
 * that came with it (any other closed at once, so a peer cannot make us
 * hoard them) or -1, *msg_flags (unless NULL) recvmsg's (MSG_TRUNC,
 * MSG_CTRUNC); what it returned, or -errno.
 */
ssize_t pvgpu_sock_send_fd(int sock, struct iovec *iov, int iovcnt, int fd,
			   int flags);
ssize_t pvgpu_sock_recv_fd(int sock, struct iovec *iov, int iovcnt, int flags,
			   int *fd, int *msg_flags);
/* Connect a Unix stream socket at path into t->fd. */
int pvgpu_stream_connect_unix(struct pvgpu_transport *t, const char *path,
			      char *err, size_t errlen);

/* Host (stream_host.c); struct pvgpu_listener etc. are in host.h. */
struct pvgpu_listener;
struct pvgpu_conn;
/* bind + listen on a socket of family for sa; fd or -errno. */
int pvgpu_stream_listen_fd(int family, const struct sockaddr *sa,
			   socklen_t len, int reuse);
/* accept4 on l->fd into fd, the peer's address in ss; 0 or -errno. */
int pvgpu_stream_accept_fd(struct pvgpu_listener *l, int *fd,
			   struct sockaddr_storage *ss);
int pvgpu_stream_poll_fd(const struct pvgpu_listener *l);
void pvgpu_stream_forget(struct pvgpu_listener *l);
void pvgpu_stream_close_listener(struct pvgpu_listener *l);

#endif /* PVGPU_TRANSPORT_STREAM_H */
