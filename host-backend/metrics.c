/* metrics.c - the Prometheus endpoint (see metrics.h). */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef PVGPU_NO_MHD
#include <microhttpd.h>
#endif

#include "metrics.h"

static int is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

		return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
	}
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;

		return IN6_IS_ADDR_LOOPBACK(a) ||
		       (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return 0;
}

int pvgpu_metrics_parse_addr(const char *s, struct sockaddr_storage *sa,
			     socklen_t *salen, char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICSERV };
	struct addrinfo *res, *r;
	const char *host = s, *port, *end;
	char name[256], *tail;
	unsigned long p;
	int rc;

	/* "[::1]:9400" brackets an IPv6 address; otherwise one colon. */
	if (s[0] == '[') {
		host = s + 1;
		end = strchr(host, ']');
		port = end && end[1] == ':' ? end + 2 : NULL;
	} else {
		end = strchr(s, ':');
		port = end && !strchr(end + 1, ':') ? end + 1 : NULL;
	}
	if (!port || end == host || (size_t)(end - host) >= sizeof(name)) {
		snprintf(err, errlen, "--metrics %s: expected ADDR:PORT, e.g. 127.0.0.1:9400", s);
		return -1;
	}
	p = strtoul(port, &tail, 10);
	if (tail == port || *tail || p < 1 || p > 65535) {
		snprintf(err, errlen, "--metrics %s: the port must be 1..65535", s);
		return -1;
	}
	memcpy(name, host, (size_t)(end - host));
	name[end - host] = '\0';
	rc = getaddrinfo(name, port, &hints, &res);
	if (rc) {
		snprintf(err, errlen, "--metrics %s: %s", s, gai_strerror(rc));
		return -1;
	}
	for (r = res; r; r = r->ai_next)
		if (is_loopback(r->ai_addr) && r->ai_addrlen <= sizeof(*sa))
			break;
	if (!r) {
		freeaddrinfo(res);
		/* Anyone who can reach it learns every VM's name and load. */
		snprintf(err, errlen, "--metrics %s: not a loopback address; the endpoint has no authentication, so it serves on 127.0.0.0/8 or ::1 only",
			 s);
		return -1;
	}
	memcpy(sa, r->ai_addr, r->ai_addrlen);
	*salen = r->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

#ifdef PVGPU_NO_MHD

struct pvgpu_metrics *pvgpu_metrics_start(const char *addr, char *err,
					  size_t errlen)
{
	snprintf(err, errlen, "--metrics %s: this pvgpud was built without libmicrohttpd (libmicrohttpd-dev)",
		 addr);
	return NULL;
}

void pvgpu_metrics_publish(struct pvgpu_metrics *m,
			   const struct pvgpu_snapshot *snap)
{
	(void)m;
	(void)snap;
}

void pvgpu_metrics_forget(struct pvgpu_metrics *m, int keep_fd)
{
	(void)m;
	(void)keep_fd;
}

void pvgpu_metrics_stop(struct pvgpu_metrics *m)
{
	(void)m;
}

#else /* libmicrohttpd */

/* Scrapers are few; a bound keeps a flood of clients from costing much. */
#define MAX_CONNECTIONS		16
#define CONNECTION_TIMEOUT_S	10

/* The handler's return type was int before libmicrohttpd 0.9.71. */
#if MHD_VERSION >= 0x00097002
typedef enum MHD_Result mhd_result;
#else
typedef int mhd_result;
#endif

struct pvgpu_metrics {
	struct MHD_Daemon *daemon;
	/*
	 * The sockets a forked worker must close (pvgpu_metrics_forget):
	 * saved here, as plain numbers, because the child may not call into
	 * libmicrohttpd, whose thread did not survive the fork.
	 */
	int listen_fd;
	_Atomic int conn_fd[MAX_CONNECTIONS];	/* -1: free */
	char why[256];			/* libmicrohttpd's complaint at start */
	atomic_int started;

	pthread_mutex_t lock;		/* guards snap */
	struct pvgpu_snapshot snap;
};

/*
 * libmicrohttpd's messages are kept for the start-up error only.  Once the
 * server runs, its thread writes nothing: a worker forked while that
 * thread held a lock inside the C library's logging could never log.
 */
static void keep_message(void *cls, const char *fmt, va_list ap)
{
	struct pvgpu_metrics *m = cls;

	if (!atomic_load(&m->started))
		vsnprintf(m->why, sizeof(m->why), fmt, ap);
}

/* Track each client socket, so a forked worker can close its copy. */
static void notify(void *cls, struct MHD_Connection *c, void **socket_ctx,
		   enum MHD_ConnectionNotificationCode what)
{
	struct pvgpu_metrics *m = cls;
	const union MHD_ConnectionInfo *ci;

	if (what == MHD_CONNECTION_NOTIFY_CLOSED) {
		if (*socket_ctx)
			atomic_store((_Atomic int *)*socket_ctx, -1);
		return;
	}
	ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!ci)
		return;
	for (int i = 0; i < MAX_CONNECTIONS; i++) {
		int free_slot = -1;

		if (atomic_compare_exchange_strong(&m->conn_fd[i], &free_slot,
						   ci->connect_fd)) {
			*socket_ctx = &m->conn_fd[i];
			return;
		}
	}
}

static mhd_result reply_text(struct MHD_Connection *c, unsigned int code,
			     const char *text)
{
	struct MHD_Response *r;
	mhd_result rc;

	r = MHD_create_response_from_buffer(strlen(text), (void *)text,
					    MHD_RESPMEM_PERSISTENT);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
				"text/plain; charset=utf-8");
	if (code == MHD_HTTP_METHOD_NOT_ALLOWED)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
	rc = MHD_queue_response(c, code, r);
	MHD_destroy_response(r);
	return rc;
}

static mhd_result answer(void *cls, struct MHD_Connection *c, const char *url,
			 const char *method, const char *version,
			 const char *upload, size_t *upload_size, void **req_cls)
{
	struct pvgpu_metrics *m = cls;
	struct pvgpu_snapshot *snap;
	struct MHD_Response *r;
	mhd_result rc;
	size_t len;
	char *text;

	(void)version;
	(void)upload;
	(void)upload_size;
	(void)req_cls;
	if (strcmp(url, "/metrics"))
		return reply_text(c, MHD_HTTP_NOT_FOUND,
				  "not found: the figures are at /metrics\n");
	if (strcmp(method, MHD_HTTP_METHOD_GET) &&
	    strcmp(method, MHD_HTTP_METHOD_HEAD))
		return reply_text(c, MHD_HTTP_METHOD_NOT_ALLOWED,
				  "only GET and HEAD\n");
	/* Format a private copy: the supervisor waits on the lock, not on us. */
	snap = malloc(sizeof(*snap));
	if (!snap)
		return reply_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
	pthread_mutex_lock(&m->lock);
	memcpy(snap, &m->snap, sizeof(*snap));
	pthread_mutex_unlock(&m->lock);
	text = pvgpu_snapshot_format(snap, &len);
	free(snap);
	if (!text)
		return reply_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
	r = MHD_create_response_from_buffer_with_free_callback(len, text, free);
	if (!r) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
				"text/plain; version=0.0.4; charset=utf-8");
	rc = MHD_queue_response(c, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return rc;
}

struct pvgpu_metrics *pvgpu_metrics_start(const char *addr, char *err,
					  size_t errlen)
{
	struct pvgpu_metrics *m;
	struct sockaddr_storage sa;
	const union MHD_DaemonInfo *info;
	unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO |
			     MHD_USE_ERROR_LOG;
	socklen_t salen;
	uint16_t port;

	if (pvgpu_metrics_parse_addr(addr, &sa, &salen, err, errlen))
		return NULL;
	m = calloc(1, sizeof(*m));
	if (!m) {
		snprintf(err, errlen, "--metrics %s: out of memory", addr);
		return NULL;
	}
	m->listen_fd = -1;
	for (int i = 0; i < MAX_CONNECTIONS; i++)
		atomic_init(&m->conn_fd[i], -1);
	if (pthread_mutex_init(&m->lock, NULL)) {
		snprintf(err, errlen, "--metrics %s: cannot make a lock", addr);
		goto err_free;
	}
	if (sa.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	/*
	 * The thread starts with the supervisor's signal mask, which blocks
	 * the signals its signalfd reads: they keep going there.
	 */
	/* The port only for its messages: it binds to sa. */
	port = ntohs(sa.ss_family == AF_INET6 ?
		     ((struct sockaddr_in6 *)&sa)->sin6_port :
		     ((struct sockaddr_in *)&sa)->sin_port);
	m->daemon = MHD_start_daemon(flags, port, NULL, NULL, answer, m,
				     MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
				     MHD_OPTION_CONNECTION_LIMIT,
				     (unsigned int)MAX_CONNECTIONS,
				     MHD_OPTION_CONNECTION_TIMEOUT,
				     (unsigned int)CONNECTION_TIMEOUT_S,
				     MHD_OPTION_NOTIFY_CONNECTION, notify, m,
				     MHD_OPTION_EXTERNAL_LOGGER, keep_message, m,
				     MHD_OPTION_END);
	if (!m->daemon) {
		snprintf(err, errlen, "--metrics %s: cannot serve there: %s",
			 addr, m->why[0] ? m->why : "libmicrohttpd would not start");
		/* Its messages end in a newline; one log line must not. */
		err[strcspn(err, "\n")] = '\0';
		goto err_lock;
	}
	atomic_store(&m->started, 1);
	info = MHD_get_daemon_info(m->daemon, MHD_DAEMON_INFO_LISTEN_FD);
	if (info)
		m->listen_fd = info->listen_fd;
	return m;

err_lock:
	pthread_mutex_destroy(&m->lock);
err_free:
	free(m);
	return NULL;
}

void pvgpu_metrics_publish(struct pvgpu_metrics *m,
			   const struct pvgpu_snapshot *snap)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	memcpy(&m->snap, snap, sizeof(*snap));
	pthread_mutex_unlock(&m->lock);
}

void pvgpu_metrics_forget(struct pvgpu_metrics *m, int keep_fd)
{
	if (!m)
		return;
	/*
	 * An fd number read here may be one the server closed a moment ago
	 * and the supervisor reused: never close stdio or the one the
	 * child is told to keep.
	 */
	if (m->listen_fd > 2 && m->listen_fd != keep_fd)
		close(m->listen_fd);
	for (int i = 0; i < MAX_CONNECTIONS; i++) {
		int fd = atomic_load(&m->conn_fd[i]);

		if (fd > 2 && fd != keep_fd)
			close(fd);
	}
}

void pvgpu_metrics_stop(struct pvgpu_metrics *m)
{
	if (!m)
		return;
	MHD_stop_daemon(m->daemon);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

#endif /* libmicrohttpd */
