/*
 * metrics.h - pvgpud --metrics ADDR:PORT: GET /metrics answers the figures
 * of stats.h in the Prometheus text format, served by libmicrohttpd from a
 * thread of its own inside the supervisor.
 *
 * The thread never touches the accounting table or the supervisor: the
 * supervisor publishes a finished snapshot, the thread formats its own
 * copy.  Only loopback addresses are accepted: the figures name every VM,
 * and there is no authentication.
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
/*
 * In a child just forked from the supervisor: close the server's listening
 * socket and client connections (but never keep_fd), so that a worker does
 * not keep the port bound after the supervisor is gone, nor a scraper's
 * connection open.  The server thread does not exist in the child; this
 * reads only what was saved for the purpose and calls nothing of
 * libmicrohttpd.  (Its internal epoll and wake-up fds stay: nothing in the
 * worker uses them, and they hold nothing anyone waits on.)
 */
void pvgpu_metrics_forget(struct pvgpu_metrics *m, int keep_fd);
void pvgpu_metrics_stop(struct pvgpu_metrics *m);

#endif /* PVGPU_METRICS_H */
