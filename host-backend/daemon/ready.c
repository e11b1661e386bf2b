/* ready.c - see ready.h. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "ready.h"
#include "supervisor.h"

int pvgpu_ready_fd_ok(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || (fl & O_ACCMODE) == O_RDONLY)
		return 0;
	/* Children that exec (the MPS control daemon) must not hold it. */
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	return 1;
}

static void write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = write(fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;		/* the reader went: nothing to tell */
		buf += n;
		len -= (size_t)n;
	}
}

/*
 * sd_notify(3)'s protocol, which systemd documents as stable for daemons
 * that do not link libsystemd: one datagram to the socket $NOTIFY_SOCKET
 * names, a path or, after '@', an abstract name.
 */
static void notify_systemd(const char *msg)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	size_t len;
	socklen_t alen;
	int fd;

	if (!path || (path[0] != '/' && path[0] != '@'))
		return;
	len = strlen(path);
	if (len >= sizeof(sun.sun_path)) {
		log_warn("NOTIFY_SOCKET is too long: systemd not told we are ready");
		return;
	}
	memcpy(sun.sun_path, path, len);
	if (path[0] == '@')
		sun.sun_path[0] = '\0';
	alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || sendto(fd, msg, strlen(msg), MSG_NOSIGNAL,
			     (struct sockaddr *)&sun, alen) < 0)
		log_warn("cannot tell systemd we are ready (%s): %s", path,
			 strerror(errno));
	if (fd >= 0)
		close(fd);
}

void pvgpu_ready_say(const struct pvgpu_supervisor *sv, int fd)
{
	char line[sizeof(sv->listeners[0].uri) + 16];

	if (fd >= 0) {
		for (int i = 0; i < sv->nlisteners; i++) {
			int n = snprintf(line, sizeof(line), "listening %s\n",
					 sv->listeners[i].uri);

			write_all(fd, line, (size_t)n);
		}
		write_all(fd, "ready\n", 6);
		close(fd);
	}
	snprintf(line, sizeof(line), "READY=1\nSTATUS=listening on %d address(es)\n",
		 sv->nlisteners);
	notify_systemd(line);
}
