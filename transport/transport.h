/*
 * transport.h - the guest half of a transport, and the registry that finds
 * a transport (both halves) by URI scheme.
 *
 * Every transport is a folder, transport/NAME/, holding its guest half
 * (an ops table, struct pvgpu_transport_ops, here) and its host half (an
 * ops table, struct pvgpu_host_ops, in host.h).  The registry
 * (transport/list.h, one line each) says which are built in and which are
 * shared objects loaded at run time (transport-NAME.so: heavy
 * dependencies such as libxenvchan or libibverbs stay out of the guest
 * library and pvgpud unless used).  The protocol client only ever sees
 * whole-buffer send and receive: a transport that cannot make progress
 * reports an error and the client marks the connection broken.
 */
#ifndef PVGPU_TRANSPORT_H
#define PVGPU_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct pvgpu_transport;
struct pvgpu_host_ops;

/* What a guest transport is like: feature bits, not fields per quirk. */
#define PVGPU_TRG_SENDS_TOKEN	(1u << 0)	/* identity: the token in hello */
#define PVGPU_TRG_MEMFD_WINDOW	(1u << 1)	/* bulk data: a memfd sent with sendv_fd */
#define PVGPU_TRG_DEVICE_WINDOW	(1u << 2)	/* in a VM: a /dev/pvgpuN window */
#define PVGPU_TRG_NO_WAITALL	(1u << 3)	/* refuses large MSG_WAITALL receives */

struct pvgpu_transport_ops {
	const char *scheme;
	unsigned int features;		/* PVGPU_TRG_* */
	/*
	 * addr is the URI after "scheme://".  Returns 0, or -errno with one
	 * human-readable reason in err.
	 */
	int (*connect)(struct pvgpu_transport *t, const char *addr,
		       char *err, size_t errlen);
	/* Send every byte iov describes (iov is consumed); 0 or -errno. */
	int (*sendv)(struct pvgpu_transport *t, struct iovec *iov, int iovcnt);
	/* Receive exactly len bytes; 0, or -errno (-ECONNRESET on EOF). */
	int (*recv)(struct pvgpu_transport *t, void *buf, size_t len);
	/* Release the channel; safe to call twice. */
	void (*close)(struct pvgpu_transport *t);
	/*
	 * Transports with a shared window (shm, the VM device): send iov with
	 * a file descriptor attached; NULL where there is none to pass.
	 */
	int (*sendv_fd)(struct pvgpu_transport *t, struct iovec *iov,
			int iovcnt, int fd);
	/*
	 * Non-zero while nothing is waiting on the channel: no message, no
	 * hang-up (never blocks).  A shared-window copy waits only as long.
	 */
	int (*quiet)(struct pvgpu_transport *t);
	/*
	 * A window the channel itself set up (Xen: granted pages), laid out
	 * per common/window.h with its header written: 0 and base/size, or
	 * -ENOENT.  NULL where the channel has none of its own.
	 */
	int (*window)(struct pvgpu_transport *t, void **base, uint64_t *size);
	/*
	 * The control ring's wake-ups (transport/ring.h), where messages
	 * move through a ring in the window and the channel only wakes the
	 * other side: kick() sends one wake-up (never blocks for long);
	 * wait_kick() sleeps until one arrives or the peer hangs up, and
	 * drops what arrived: 0, or -errno (-ECONNRESET: hung up).  NULL
	 * where the channel cannot (the ring is then not used).
	 */
	int (*kick)(struct pvgpu_transport *t);
	int (*wait_kick)(struct pvgpu_transport *t);
	/*
	 * Pinned memory the program got (cuMemHostAlloc) where there is no
	 * window: a transport that can let the backend read it in place
	 * (verbs: registered once, fetched by RDMA READ) takes note; 0, or
	 * -errno (its copies are then staged like any other).  unpin comes
	 * before the memory is freed.  NULL: nothing of the kind.
	 */
	int (*pin)(struct pvgpu_transport *t, void *p, size_t size);
	void (*unpin)(struct pvgpu_transport *t, void *p);
};

struct pvgpu_transport {
	const struct pvgpu_transport_ops *ops;
	int fd;			/* stream transports; -1 when closed */
	uint64_t poll_ns;	/* busy-poll before a blocking receive */
	void *priv;		/* transports that need more than a fd */
	/* Who we are, for channels that carry it at connect (verbs); or NULL. */
	const char *token;
};

/*
 * One transport, both halves: what the registry holds per scheme and what
 * a loadable transport-NAME.so exports as PVGPU_TRANSPORT_SYMBOL.  guest
 * or host is NULL where this program links no such half (the guest
 * library has no host halves, pvgpud no guest ones).
 */
#define PVGPU_TRANSPORT_ABI	1
#define PVGPU_TRANSPORT_SYMBOL	"pvgpu_transport_module"

struct pvgpu_transport_module {
	unsigned int abi;		/* PVGPU_TRANSPORT_ABI */
	const char *scheme;
	const struct pvgpu_transport_ops *guest;
	const struct pvgpu_host_ops *host;
};

/*
 * The transport for uri ("scheme://rest"), with *addr pointing at "rest":
 * a built-in one, or transport-SCHEME.so loaded from
 * <dir of the loaded library or program>/pvgpu/, the same dir, or
 * <dir of the program>/../lib/pvgpu/.  NULL with one line in err when the
 * scheme is unknown, or its object cannot be loaded.
 */
const struct pvgpu_transport_module *pvgpu_transport_find(const char *uri,
							   const char **addr,
							   char *err,
							   size_t errlen);

/* The guest half for uri; NULL with one line in err. */
const struct pvgpu_transport_ops *pvgpu_transport_lookup(const char *uri,
							  const char **addr,
							  char *err,
							  size_t errlen);

/* ops->quiet where the transport has one, else the stream default. */
int pvgpu_transport_quiet(struct pvgpu_transport *t);

#endif /* PVGPU_TRANSPORT_H */
