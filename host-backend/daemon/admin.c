/* admin.c - see admin.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "admin.h"
#include "clock.h"
#include "log.h"

/* "ID": 1..2^63-1, digits only, no leading zero. */
static int parse_id(const char *p, size_t len, uint64_t *out)
{
	uint64_t v = 0;

	if (!len || len > 19 || p[0] == '0')
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -1;
		v = v * 10 + (uint64_t)(p[i] - '0');
	}
	if (v > INT64_MAX)
		return -1;
	*out = v;
	return 0;
}

int pvgpu_admin_parse(const char *line, size_t len, struct pvgpu_admin_req *req)
{
	static const struct {
		const char *word;
		enum pvgpu_admin_verb verb;
	} verbs[] = {
		{ "suspend ", PVGPU_ADMIN_SUSPEND },
		{ "resume ", PVGPU_ADMIN_RESUME },
	};

	memset(req, 0, sizeof(*req));
	if (len == 4 && !memcmp(line, "list", 4)) {
		req->verb = PVGPU_ADMIN_LIST;
		return 0;
	}
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
		size_t n = strlen(verbs[i].word);

		if (len > n && !memcmp(line, verbs[i].word, n) &&
		    !parse_id(line + n, len - n, &req->session)) {
			req->verb = verbs[i].verb;
			return 0;
		}
	}
	return -1;
}

/* The directory the socket goes in, made if it is not there. */
static int make_dir(const char *path, char *err, size_t errlen)
{
	char dir[PVGPU_ADMIN_PATH_MAX];
	char *slash;

	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0;
	*slash = '\0';
	if (mkdir(dir, 0700) && errno != EEXIST) {
		snprintf(err, errlen, "--admin %s: cannot make %s: %s",
			 log_esc(path), log_esc(dir), strerror(errno));
		return -1;
	}
	return 0;
}

int pvgpu_admin_open(struct pvgpu_admin *a, const char *path,
		     pvgpu_admin_fn fn, void *arg, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	mode_t old;
	int fd = -1;

	memset(a, 0, sizeof(*a));
	a->fd = -1;
	a->uid = geteuid();
	a->fn = fn;
	a->arg = arg;
	if (path[0] != '/' || strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "--admin %s: want an absolute path under %zu bytes",
			 log_esc(path), sizeof(sa.sun_path));
		return -1;
	}
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (make_dir(path, err, errlen))
		return -1;
	if (!lstat(path, &st)) {
		int probe;

		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, errlen, "--admin %s exists and is not a socket; not replacing it",
				 log_esc(path));
			return -1;
		}
		/* Someone answering there is another pvgpud: leave it be. */
		probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (probe >= 0 && !connect(probe, (struct sockaddr *)&sa, sizeof(sa))) {
			close(probe);
			snprintf(err, errlen, "--admin %s: another pvgpud listens there",
				 log_esc(path));
			return -1;
		}
		if (probe >= 0)
			close(probe);
		unlink(path);
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		goto err_errno;
	/* Never, even for a moment, a socket others may connect to. */
	old = umask(0177);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		umask(old);
		goto err_errno;
	}
	umask(old);
	if (chmod(path, 0600) || listen(fd, PVGPU_ADMIN_CLIENTS))
		goto err_unlink;
	a->fd = fd;
	snprintf(a->path, sizeof(a->path), "%s", path);
	return 0;

err_unlink:
	unlink(path);
err_errno:
	snprintf(err, errlen, "--admin %s: %s", log_esc(path), strerror(errno));
	if (fd >= 0)
		close(fd);
	return -1;
}

static void drop(struct pvgpu_admin *a, unsigned int i)
{
	close(a->c[i].fd);
	free(a->c[i].out);
	a->c[i] = a->c[--a->n];
}

void pvgpu_admin_close(struct pvgpu_admin *a)
{
	while (a->n)
		drop(a, a->n - 1);
	if (a->fd >= 0) {
		close(a->fd);
		unlink(a->path);
	}
	a->fd = -1;
}

void pvgpu_admin_forget(struct pvgpu_admin *a)
{
	for (unsigned int i = 0; i < a->n; i++)
		close(a->c[i].fd);
	if (a->fd >= 0)
		close(a->fd);
}

unsigned int pvgpu_admin_fds(const struct pvgpu_admin *a, struct pollfd *pfd)
{
	if (a->fd < 0)
		return 0;
	pfd[0] = (struct pollfd){ .fd = a->fd, .events = POLLIN };
	for (unsigned int i = 0; i < a->n; i++)
		pfd[1 + i] = (struct pollfd){
			.fd = a->c[i].fd,
			.events = a->c[i].out ? POLLOUT : POLLIN };
	return 1 + a->n;
}

int pvgpu_admin_timeout_ms(const struct pvgpu_admin *a)
{
	uint64_t now = pvgpu_now_ns(), first = UINT64_MAX;

	for (unsigned int i = 0; i < a->n; i++)
		if (a->c[i].deadline_ns < first)
			first = a->c[i].deadline_ns;
	if (first == UINT64_MAX)
		return -1;
	return first <= now ? 0 : (int)((first - now + 999999) / 1000000);
}

/* Send what the answer has left: 1 when all of it went (or never will). */
static int send_out(struct pvgpu_admin_client *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
				 MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ||
			       errno == EINTR ? 0 : 1;
		c->out_off += (size_t)n;
	}
	return 1;
}

/* Its answer is ready: send it, now or as the caller reads. */
static int answer(struct pvgpu_admin_client *c, char *line)
{
	if (!line)
		line = strdup("error out of memory\n");
	if (!line)
		return 1;
	c->out = line;
	c->out_len = strlen(line);
	c->out_off = 0;
	return send_out(c);
}

/* Read what the caller sent; 1 when done with it. */
static int serve(struct pvgpu_admin *a, struct pvgpu_admin_client *c)
{
	struct pvgpu_admin_req req;
	ssize_t n;
	char *nl;

	n = recv(c->fd, c->in + c->got, sizeof(c->in) - c->got, MSG_DONTWAIT);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ||
		       errno == EINTR ? 0 : 1;
	if (n == 0)
		return 1;		/* hung up before a whole line */
	c->got += (size_t)n;
	nl = memchr(c->in, '\n', c->got);
	if (!nl) {
		char skip[4096];

		if (c->got < sizeof(c->in))
			return 0;
		/*
		 * What it sent beyond is dropped (a little of it, never a
		 * wait): closed with bytes unread, the socket would reset
		 * and the caller lose the answer.
		 */
		for (int k = 0; k < 16 && recv(c->fd, skip, sizeof(skip), MSG_DONTWAIT) > 0; k++)
			;
		return answer(c, strdup("error request too long\n"));
	}
	if (pvgpu_admin_parse(c->in, (size_t)(nl - c->in), &req))
		return answer(c, strdup("error want: list | suspend ID | resume ID\n"));
	return answer(c, a->fn(a->arg, &req));
}

/* One caller taken (served or turned away): 0; nobody waits: -1. */
static int accept_one(struct pvgpu_admin *a)
{
	struct pvgpu_admin_client *c;
	struct ucred cred;
	socklen_t len = sizeof(cred);
	int fd;

	fd = accept4(a->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0)
		return -1;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) ||
	    (cred.uid != 0 && cred.uid != a->uid)) {
		uint64_t now = pvgpu_now_ns();

		/* The socket's mode keeps others out: one line a second at most. */
		if (now - a->refused_said_ns >= 1000000000ull) {
			a->refused_said_ns = now;
			log_warn("admin socket: uid %d refused (only root and uid %d)",
				 (int)cred.uid, (int)a->uid);
		}
		(void)!send(fd, "error not permitted\n", 20,
			    MSG_DONTWAIT | MSG_NOSIGNAL);
		close(fd);
		return 0;
	}
	if (a->n == PVGPU_ADMIN_CLIENTS) {
		(void)!send(fd, "error busy\n", 11, MSG_DONTWAIT | MSG_NOSIGNAL);
		close(fd);
		return 0;
	}
	c = &a->c[a->n++];
	memset(c, 0, sizeof(*c));
	c->fd = fd;
	c->deadline_ns = pvgpu_now_ns() + PVGPU_ADMIN_TIMEOUT_MS * 1000000ull;
	return 0;
}

void pvgpu_admin_run(struct pvgpu_admin *a, const struct pollfd *pfd,
		     unsigned int npfd)
{
	uint64_t now = pvgpu_now_ns();

	if (a->fd < 0 || !npfd)
		return;
	/* From the last: one that leaves is replaced by the last, seen already. */
	for (unsigned int i = npfd - 1 < a->n ? npfd - 1 : a->n; i-- > 0;) {
		struct pvgpu_admin_client *c = &a->c[i];
		int done = 0;

		if (pfd[1 + i].revents & (POLLIN | POLLOUT | POLLHUP | POLLERR))
			done = c->out ? send_out(c) : serve(a, c);
		if (done || now >= c->deadline_ns)
			drop(a, i);
	}
	/* A few a round: callers past them wait in the backlog. */
	if (pfd[0].revents & POLLIN)
		for (int k = 0; k < PVGPU_ADMIN_CLIENTS && !accept_one(a); k++)
			;
}
