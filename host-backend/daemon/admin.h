/*
 * admin.h - pvgpud's operator socket: `pvgpuctl session list|suspend|resume`
 * reach the supervisor through a Unix socket (--admin PATH, mode 0600).
 *
 * A caller is root or pvgpud's own uid (SO_PEERCRED), else it is answered
 * "error not permitted" and closed.  It sends one line, gets one line and
 * is closed:
 *
 *   list            ok N [ID VM STATE RESIDENT SUSPENDED]...
 *   suspend ID      ok suspending ID | error ...
 *   resume ID       ok resuming ID | error ...
 *
 * (ID: a session's number, as pvgpud's session start/end lines give it;
 * the list's fields are separated by single spaces, a session's five by
 * spaces too, sessions one after another; bytes in decimal.)
 *
 * Everything here runs in the supervisor's event loop and never blocks:
 * the sockets are non-blocking, a request is at most PVGPU_ADMIN_LINE_MAX
 * bytes, a caller has PVGPU_ADMIN_TIMEOUT_MS to send it and read its
 * answer, and at most PVGPU_ADMIN_CLIENTS callers are served at once (one
 * more is closed at once), so a slow or silent caller costs one slot for
 * a bounded time and never the loop.
 */
#ifndef PVGPU_ADMIN_H
#define PVGPU_ADMIN_H

#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <unistd.h>

#define PVGPU_ADMIN_LINE_MAX	64
#define PVGPU_ADMIN_CLIENTS	8
#define PVGPU_ADMIN_TIMEOUT_MS	2000
/* The list's line: far more than 65536 sessions' fields need. */
#define PVGPU_ADMIN_REPLY_MAX	(16u << 20)
#define PVGPU_ADMIN_PATH_MAX	108	/* sun_path */

/*
 * Where pvgpud listens, and pvgpuctl connects, unless told otherwise:
 * in the run directory, /run/pvgpu for root, else a directory of the
 * user's own under /tmp (as the module cache's default).  pvgpud under
 * systemd (the package's unit runs it as the user pvgpu, with
 * RuntimeDirectory=pvgpu) takes $RUNTIME_DIRECTORY instead, which is
 * where root's pvgpuctl looks.
 */
static inline void pvgpu_admin_default_path(char *buf, size_t len)
{
	if (geteuid() == 0)
		snprintf(buf, len, "/run/pvgpu/pvgpud-admin.sock");
	else
		snprintf(buf, len, "/tmp/pvgpud-%u/admin.sock",
			 (unsigned int)geteuid());
}

enum pvgpu_admin_verb {
	PVGPU_ADMIN_LIST = 1,
	PVGPU_ADMIN_SUSPEND,
	PVGPU_ADMIN_RESUME,
};

struct pvgpu_admin_req {
	enum pvgpu_admin_verb verb;
	uint64_t session;		/* suspend, resume */
};

/*
 * One request line, without its newline: "list", "suspend ID" or
 * "resume ID", ID 1..2^63-1 in decimal without sign or leading zero,
 * single spaces, nothing else.  0, or -1.
 */
int pvgpu_admin_parse(const char *line, size_t len, struct pvgpu_admin_req *req);

/*
 * The answer to a request: a malloc'ed line ending in '\n', at most
 * PVGPU_ADMIN_REPLY_MAX bytes, or NULL when out of memory.
 */
typedef char *(*pvgpu_admin_fn)(void *arg, const struct pvgpu_admin_req *req);

struct pvgpu_admin_client {
	int fd;
	uint64_t deadline_ns;		/* CLOCK_MONOTONIC */
	char in[PVGPU_ADMIN_LINE_MAX];
	size_t got;
	char *out;			/* the answer being sent; NULL: reading */
	size_t out_len, out_off;
};

struct pvgpu_admin {
	int fd;				/* listening; -1: none */
	char path[PVGPU_ADMIN_PATH_MAX];
	uid_t uid;			/* pvgpud's */
	pvgpu_admin_fn fn;
	void *arg;
	uint64_t refused_said_ns;	/* the last "not permitted" line */
	struct pvgpu_admin_client c[PVGPU_ADMIN_CLIENTS];
	unsigned int n;
};

/*
 * Listen on path (its directory made, 0700, if missing).  A stale socket
 * there is replaced; a live one (another pvgpud's) or anything not a
 * socket is not: 0, or -1 with a line in err.
 */
int pvgpu_admin_open(struct pvgpu_admin *a, const char *path,
		     pvgpu_admin_fn fn, void *arg, char *err, size_t errlen);
/* Stop listening, drop the callers and remove the socket. */
void pvgpu_admin_close(struct pvgpu_admin *a);
/* In a forked child: close the descriptors, leave the socket file. */
void pvgpu_admin_forget(struct pvgpu_admin *a);
/* What to poll (at most 1 + PVGPU_ADMIN_CLIENTS entries): their count. */
unsigned int pvgpu_admin_fds(const struct pvgpu_admin *a, struct pollfd *pfd);
/* After poll, with the entries pvgpu_admin_fds filled. */
void pvgpu_admin_run(struct pvgpu_admin *a, const struct pollfd *pfd,
		     unsigned int npfd);
/* Milliseconds to the first caller's deadline; -1: nobody waits. */
int pvgpu_admin_timeout_ms(const struct pvgpu_admin *a);

#endif /* PVGPU_ADMIN_H */
