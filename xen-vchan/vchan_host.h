/*
 * vchan_host.h - the host half of vchan:// (in the driver domain that runs
 * pvgpud), as plain functions to bind to the daemon's host ops table.
 *
 * Two levels, so that no vchan context exists before the worker's fork()
 * (DESIGN §4):
 *
 *  In the supervisor: a listener watches xenstore (@introduceDomain,
 *  @releaseDomain) and knows which domains exist and which the filter (the
 *  policy or registry) wants; pvgpu_vchan_host_wait() sleeps on the watch,
 *  pvgpu_vchan_host_accept() hands out the next wanted domain without a
 *  session, with its identity: the domid and the name dom0 gave it in
 *  xenstore (/local/domain/DOMID/name; a domU cannot write it).  The
 *  session's end is reported with pvgpu_vchan_host_done(), and the domain
 *  is offered again while it lives.
 *
 *  In the worker (after fork): pvgpu_vchan_chan_open() offers the channel
 *  (libxenvchan_server_init at BASE/DOMID, serialised across processes with
 *  an flock so xenstored's transaction quota is never hit), waits for the
 *  guest (bounded, and ended when the domain goes), reads the setup frame
 *  and maps the granted window.  recv/sendv move the byte stream with
 *  bounded waits; a peer that corrupts the ring gets -EPROTO.
 */
#ifndef PVGPU_VCHAN_HOST_H
#define PVGPU_VCHAN_HOST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

/* Where channels are offered: BASE/DOMID (vchan://0/pvgpu in the guest). */
#define PVGPU_VCHAN_DEFAULT_BASE "/local/domain/0/data/pvgpu"
#define PVGPU_VCHAN_LOCK "/run/pvgpu-vchan.lock"

struct pvgpu_vchan_listener;
struct pvgpu_vchan_chan;

/* Identity, as data: kind "xen", value "domid=N", and the VM's name. */
struct pvgpu_vchan_peer {
	unsigned int domid;
	char kind[8];		/* "xen" */
	char value[32];		/* "domid=N" */
	char name[64];		/* xenstore name; "" if it has none */
};

/* Does the policy/registry want domain `name` (domid)? NULL: every domU. */
typedef int (*pvgpu_vchan_filter)(const char *name, unsigned int domid,
				  void *arg);

/*
 * Listen: open xenstore and watch domains come and go.  base: NULL for
 * PVGPU_VCHAN_DEFAULT_BASE.  0 and *out, or -errno with one line in err.
 */
int pvgpu_vchan_host_listen(const char *base, pvgpu_vchan_filter filter,
			    void *arg, struct pvgpu_vchan_listener **out,
			    char *err, size_t errlen);
/* The fd to poll with the daemon's other listeners (the xenstore watch). */
int pvgpu_vchan_host_fd(struct pvgpu_vchan_listener *l);
/*
 * Wait up to timeout_ms (-1: no limit) for a domain to accept: 1 when
 * one is ready, 0 on a timeout, -errno.
 */
int pvgpu_vchan_host_wait(struct pvgpu_vchan_listener *l, int timeout_ms);
/* The next domain to serve: 0 and *peer, or -EAGAIN when none is ready. */
int pvgpu_vchan_host_accept(struct pvgpu_vchan_listener *l,
			    struct pvgpu_vchan_peer *peer);
/* Its session ended: offer the domain again if it still exists. */
void pvgpu_vchan_host_done(struct pvgpu_vchan_listener *l, unsigned int domid);
/* Whether domid is (still) running, per the last look at xenstore. */
int pvgpu_vchan_host_alive(struct pvgpu_vchan_listener *l, unsigned int domid);
const char *pvgpu_vchan_host_base(struct pvgpu_vchan_listener *l);
void pvgpu_vchan_host_close(struct pvgpu_vchan_listener *l);

/*
 * In the worker: offer the channel to peer at base/DOMID and wait up to
 * wait_ms (-1: as long as the domain lives) for the guest and its setup
 * frame.  0 and *out, or -errno (-ETIMEDOUT, -ECONNRESET when the domain
 * went, -EPROTO for a bad setup frame) with one line in err.
 */
int pvgpu_vchan_chan_open(const char *base, const struct pvgpu_vchan_peer *peer,
			  int wait_ms, struct pvgpu_vchan_chan **out,
			  char *err, size_t errlen);
/* Exactly len bytes; idle_ms bounds the wait for the first (-1: none). */
int pvgpu_vchan_chan_recv(struct pvgpu_vchan_chan *c, void *buf, size_t len,
			  int idle_ms);
/*
 * Up to len bytes, as a stream: > 0, 0 when the guest closed or its
 * domain went, -EPROTO for a corrupt ring, -errno; nonblock: -EAGAIN
 * when nothing is there.  Blocking waits have no limit but wake to check
 * the domain lives.
 */
ssize_t pvgpu_vchan_chan_read(struct pvgpu_vchan_chan *c, void *buf, size_t len,
			      int nonblock);
int pvgpu_vchan_chan_sendv(struct pvgpu_vchan_chan *c, struct iovec *iov,
			   int iovcnt);
/* The guest closed, its ring is corrupt or its domain went (never blocks). */
int pvgpu_vchan_chan_hung_up(struct pvgpu_vchan_chan *c);
/* 1 when something can be read (or the peer went), 0 on a timeout, -errno. */
int pvgpu_vchan_chan_wait(struct pvgpu_vchan_chan *c, int timeout_ms);
int pvgpu_vchan_chan_fd(struct pvgpu_vchan_chan *c);
/*
 * The mapped bulk window (layout checked once at open, common/window.h):
 * 0, or -ENOENT when the guest granted none.
 */
int pvgpu_vchan_chan_window(struct pvgpu_vchan_chan *c, void **base,
			    uint64_t *size);
void pvgpu_vchan_chan_close(struct pvgpu_vchan_chan *c);

#endif /* PVGPU_VCHAN_HOST_H */
