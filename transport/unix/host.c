/*
 * unix/host.c - pvgpud listening on unix://PATH: who calls is SO_PEERCRED's
 * uid; a VM's vhost-user socket (l->vm) is that VM, and only root or our
 * own uid (vhost-device-vsock) may connect to it.  The callers of a Unix
 * socket may pass a window's memfd (shm://), so its connections take
 * descriptors (PVGPU_TR_PASSES_FD).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "stream.h"
#include "unix.h"

int pvgpu_unix_listen(struct pvgpu_listener *l, const char *path,
		      char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	/*
	 * Who may connect is decided by policy, from the caller's uid: the
	 * socket itself is open to every local user, but a VM's is ours.
	 */
	mode_t mode = l->vm[0] ? 0600 : 0666;
	struct stat st;
	int fd;

	if (path[0] != '/' || strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "unix socket path '%s' is not absolute or is longer than %zu bytes",
			 path, sizeof(sa.sun_path) - 1);
		return -EINVAL;
	}
	/* Only a socket is ever replaced: a typo must not unlink a file. */
	if (!lstat(path, &st) && !S_ISSOCK(st.st_mode)) {
		snprintf(err, errlen, "%s exists and is not a socket; not replacing it",
			 path);
		return -EEXIST;
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
		return -EADDRINUSE;
	}
	close(fd);
	unlink(path);
	fd = pvgpu_stream_listen_fd(AF_UNIX, (struct sockaddr *)&sa, sizeof(sa), 0);
	if (fd < 0) {
		errno = -fd;
		goto err_errno;
	}
	chmod(path, mode);
	strcpy(l->path, path);
	l->fd = fd;
	l->features = PVGPU_TR_PASSES_FD | PVGPU_TR_REATTACH;
	return 0;

err_errno:
	snprintf(err, errlen, "%s: %s", path, strerror(errno));
	return -errno;
}

int pvgpu_unix_accept(struct pvgpu_listener *l, struct pvgpu_peer *peer,
		      struct pvgpu_conn **conn)
{
	struct sockaddr_storage ss;
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	int fd, rc;

	rc = pvgpu_stream_accept_fd(l, &fd, &ss);
	if (rc)
		return rc;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0) {
		rc = -errno;
		goto err_close;
	}
	if (l->vm[0] && cred.uid != 0 && cred.uid != geteuid()) {
		rc = -EPERM;
		goto err_close;
	}
	snprintf(peer->id.value, sizeof(peer->id.value), "%u",
		 (unsigned int)cred.uid);
	peer->id.kind = PVGPU_ID_UID;
	if (l->vm[0])
		snprintf(peer->identity, sizeof(peer->identity),
			 "vm %s via vhost-user (pid %d)", l->vm, (int)cred.pid);
	else
		snprintf(peer->identity, sizeof(peer->identity),
			 "uid=%u,pid=%d", (unsigned int)cred.uid, (int)cred.pid);
	*conn = pvgpu_stream_conn_new(fd, l->features);
	if (!*conn) {
		rc = -ENOMEM;
		goto err_close;
	}
	return 0;

err_close:
	close(fd);
	return rc;
}

const struct pvgpu_host_ops pvgpu_host_unix = {
	.scheme = "unix",
	.listen = pvgpu_unix_listen,
	.poll_fd = pvgpu_stream_poll_fd,
	.accept = pvgpu_unix_accept,
	.forget = pvgpu_stream_forget,
	.close = pvgpu_stream_close_listener,
};
