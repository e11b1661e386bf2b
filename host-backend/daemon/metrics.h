/*
 * metrics.h - pvgpud --metrics ADDR:PORT: GET /metrics answers the figures
 * of stats.h in the Prometheus text format, served by libmicrohttpd.
 *
 * libmicrohttpd runs inside the supervisor's own poll loop (its external
 * epoll mode), not in a thread of its own: the supervisor forks a worker
 * per session, and a fork taken while another thread holds a lock inside
 * the C library or the sanitizers' allocator leaves that lock held forever
 * in the child.  (With a server thread, ASan builds of pvgpud hung in a
 * worker's first malloc after a scrape raced a fork.)  The supervisor
 * polls pvgpu_metrics_fd(), sleeps no longer than
 * pvgpu_metrics_timeout_ms(), and calls pvgpu_metrics_run() after each
 * wake-up; a request costs it the formatting of a few kilobytes, and no
 * socket call blocks.
 *
 * Only loopback addresses are accepted: the figures name every VM, and
 * there is no authentication.
 *
 * Built without libmicrohttpd (-DPVGPU_NO_MHD, a GPU host with no package
 * registry), start fails saying so, and everything else is a no-op.
 */
#ifndef PVGPU_METRICS_H
#define PVGPU_METRICS_H

#include <stddef.h>
#include <sys/socket.h>

#include "stats.h"

struct pvgpu_metrics;

/*
 * "127.0.0.1:9400", "[::1]:9400", "localhost:9400" into a socket address:
 * 0, or -1 with one line in err (not ADDR:PORT, not a loopback address).
 */
int pvgpu_metrics_parse_addr(const char *s, struct sockaddr_storage *sa,
			     socklen_t *salen, char *err, size_t errlen);

/* Serve on addr (checked by the above): the server, or NULL and why in err. */
struct pvgpu_metrics *pvgpu_metrics_start(const char *addr, char *err,
					  size_t errlen);
/* What GET /metrics answers from now on. */
void pvgpu_metrics_publish(struct pvgpu_metrics *m,
			   const struct pvgpu_snapshot *snap);
/* The fd to poll for input; -1 without a server. */
int pvgpu_metrics_fd(struct pvgpu_metrics *m);
/* Milliseconds until the server must run even without input; -1: never. */
int pvgpu_metrics_timeout_ms(struct pvgpu_metrics *m);
/* Serve what is ready, without blocking. */
void pvgpu_metrics_run(struct pvgpu_metrics *m);
/*
 * In a child just forked from the supervisor: close the server's sockets
 * and its epoll fd (but never keep_fd), so that a worker does not keep the
 * port bound after the supervisor is gone, nor a scraper's connection
 * open.  Calls nothing of libmicrohttpd: its state is the supervisor's.
 */
void pvgpu_metrics_forget(struct pvgpu_metrics *m, int keep_fd);
void pvgpu_metrics_stop(struct pvgpu_metrics *m);

#endif /* PVGPU_METRICS_H */
