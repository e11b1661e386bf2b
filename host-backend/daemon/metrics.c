/* metrics.c - the Prometheus endpoint (see metrics.h). */
#include <arpa/inet.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef PVGPU_NO_MHD
#include <microhttpd.h>
#endif

#include "log.h"
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

int pvgpu_metrics_fd(struct pvgpu_metrics *m)
{
	(void)m;
	return -1;
}

int pvgpu_metrics_timeout_ms(struct pvgpu_metrics *m)
{
	(void)m;
	return -1;
}

void pvgpu_metrics_run(struct pvgpu_metrics *m)
{
	(void)m;
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
	int started;			/* past start-up: messages go to the log */
	char why[256];			/* libmicrohttpd's complaint at start */
	/* The fds a forked worker closes (pvgpu_metrics_forget). */
	int listen_fd, epoll_fd;
	int conn_fd[MAX_CONNECTIONS];	/* -1: free */
	struct pvgpu_snapshot snap;	/* what GET /metrics answers */
};

/*
 * At start-up, libmicrohttpd's message becomes part of the error; later
 * ones (a client that broke the protocol, say) are for debugging only.
 */
static void mhd_message(void *cls, const char *fmt, va_list ap)
{
	struct pvgpu_metrics *m = cls;
	char line[256];

	vsnprintf(line, sizeof(line), fmt, ap);
	line[strcspn(line, "\n")] = '\0';
	if (!m->started)
		snprintf(m->why, sizeof(m->why), "%s", line);
	else
		log_debug("metrics: %s", log_esc(line));
}

/* Keep each client socket's number, so a forked worker can close its copy. */
static void notify(void *cls, struct MHD_Connection *c, void **socket_ctx,
		   enum MHD_ConnectionNotificationCode what)
{
	struct pvgpu_metrics *m = cls;
	const union MHD_ConnectionInfo *ci;

	if (what == MHD_CONNECTION_NOTIFY_CLOSED) {
		if (*socket_ctx)
			*(int *)*socket_ctx = -1;
		return;
	}
	ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	for (int i = 0; ci && i < MAX_CONNECTIONS; i++) {
		if (m->conn_fd[i] < 0) {
			m->conn_fd[i] = ci->connect_fd;
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
	text = pvgpu_snapshot_format(&m->snap, &len);
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
	/* No thread: the supervisor's loop runs it (see metrics.h). */
	unsigned int flags = MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
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
	m->epoll_fd = -1;
	for (int i = 0; i < MAX_CONNECTIONS; i++)
		m->conn_fd[i] = -1;
	if (sa.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
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
				     MHD_OPTION_EXTERNAL_LOGGER, mhd_message, m,
				     MHD_OPTION_END);
	if (!m->daemon) {
		snprintf(err, errlen, "--metrics %s: cannot serve there: %s",
			 addr, m->why[0] ? m->why : "libmicrohttpd would not start");
		goto err_free;
	}
	info = MHD_get_daemon_info(m->daemon, MHD_DAEMON_INFO_EPOLL_FD);
	if (!info || info->epoll_fd < 0) {
		snprintf(err, errlen, "--metrics %s: libmicrohttpd has no epoll fd to poll",
			 addr);
		goto err_stop;
	}
	m->epoll_fd = info->epoll_fd;
	info = MHD_get_daemon_info(m->daemon, MHD_DAEMON_INFO_LISTEN_FD);
	if (info)
		m->listen_fd = info->listen_fd;
	m->started = 1;
	return m;

err_stop:
	MHD_stop_daemon(m->daemon);
err_free:
	free(m);
	return NULL;
}

void pvgpu_metrics_publish(struct pvgpu_metrics *m,
			   const struct pvgpu_snapshot *snap)
{
	if (m)
		memcpy(&m->snap, snap, sizeof(*snap));
}

int pvgpu_metrics_fd(struct pvgpu_metrics *m)
{
	return m ? m->epoll_fd : -1;
}

int pvgpu_metrics_timeout_ms(struct pvgpu_metrics *m)
{
	MHD_UNSIGNED_LONG_LONG ms;

	if (!m || MHD_get_timeout(m->daemon, &ms) != MHD_YES)
		return -1;
	return ms > INT_MAX ? INT_MAX : (int)ms;
}

void pvgpu_metrics_run(struct pvgpu_metrics *m)
{
	if (m)
		MHD_run(m->daemon);
}

void pvgpu_metrics_forget(struct pvgpu_metrics *m, int keep_fd)
{
	if (!m)
		return;
	/* keep_fd is the worker's session: never closed, whatever happens. */
	if (m->listen_fd > 2 && m->listen_fd != keep_fd)
		close(m->listen_fd);
	if (m->epoll_fd > 2 && m->epoll_fd != keep_fd)
		close(m->epoll_fd);
	for (int i = 0; i < MAX_CONNECTIONS; i++)
		if (m->conn_fd[i] > 2 && m->conn_fd[i] != keep_fd)
			close(m->conn_fd[i]);
}

void pvgpu_metrics_stop(struct pvgpu_metrics *m)
{
	if (!m)
		return;
	MHD_stop_daemon(m->daemon);
	free(m);
}

#endif /* libmicrohttpd */
