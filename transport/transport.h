/*
 * transport.h - how the guest library moves bytes to one backend.
 *
 * Every transport is a small ops table behind a URI scheme ("unix",
 * "tcp", later "vsock", "shm", "vchan", "verbs").  The protocol client only
 * ever sees whole-buffer send and receive: a transport that cannot make
 * progress reports an error and the client marks the connection broken.
 * Adding a transport is one file plus one line in transport.c.
 */
#ifndef PVGPU_TRANSPORT_H
#define PVGPU_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct pvgpu_transport;

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
 * The transport for uri ("scheme://rest"), with *addr pointing at "rest";
 * NULL when the scheme is unknown or the URI has none.
 */
const struct pvgpu_transport_ops *pvgpu_transport_lookup(const char *uri,
							  const char **addr);

extern const struct pvgpu_transport_ops pvgpu_transport_unix;
extern const struct pvgpu_transport_ops pvgpu_transport_tcp;
extern const struct pvgpu_transport_ops pvgpu_transport_shm;
extern const struct pvgpu_transport_ops pvgpu_transport_vsock;

/*
 * Non-zero while nothing is waiting on the channel: no message, no hang-up
 * (polls without blocking).  A shared-window copy waits only as long.
 */
int pvgpu_transport_quiet(struct pvgpu_transport *t);

#endif /* PVGPU_TRANSPORT_H */
