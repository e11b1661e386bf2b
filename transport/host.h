/*
 * host.h - the host half of a transport (in pvgpud), and what the daemon
 * sees of a channel: a listener, a peer (who is calling, as data) and a
 * connection object with its ops.  Nothing outside transport/ (and a
 * loadable transport's own folder) opens, polls or reads a socket, a vchan
 * or a device: the supervisor polls the fd a listener names, the worker
 * reads and writes through the connection's ops (and so does the
 * supervisor, for the hello of a caller the channel does not name).
 *
 * The caller's identity always comes from the channel: SO_PEERCRED on a
 * Unix socket, the peer CID on vsock, the domid (and the name dom0 gave
 * it) on a Xen vchan.  TCP has no such thing, so a TCP caller is only
 * "tcp:ADDR" here and proves who it is with the token in hello.
 */
#ifndef PVGPU_HOST_TRANSPORT_H
#define PVGPU_HOST_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "identity.h"
#include "transport.h"
#include "vm.h"

/*
 * What a channel is like, for those who must not know which channel it
 * is (admission, the supervisor, the worker): feature bits, not kinds.
 */
/*
 * Who: the token in hello.  The supervisor reads that hello before the
 * caller costs a worker, polling conn->fd and calling recv with nonblock,
 * so a channel with this bit has both.
 */
#define PVGPU_TR_ID_AT_HELLO	(1u << 0)
#define PVGPU_TR_VM_CALLERS	(1u << 1)	/* callers are VMs, to be registered */
#define PVGPU_TR_PASSES_FD	(1u << 2)	/* may carry a window's fd */
/* A plain stream socket: a resumed session takes a new one's descriptor. */
#define PVGPU_TR_REATTACH	(1u << 3)

struct pvgpu_listener;
struct pvgpu_peer;
struct pvgpu_conn;

/*
 * Does the daemon want a session with this caller?  Asked by transports
 * that offer a channel to each caller they find (vchan: every domain as it
 * appears) rather than wait to be called; name is the one the channel
 * vouches for ("" if none).
 */
typedef int (*pvgpu_wanted_fn)(const struct pvgpu_identity *id,
			       const char *name, void *arg);

struct pvgpu_host_ops {
	const char *scheme;
	/* addr: the URI after "scheme://".  0, or -errno and one line in err. */
	int (*listen)(struct pvgpu_listener *l, const char *addr,
		      char *err, size_t errlen);
	/* The fd the supervisor polls for POLLIN (a socket, a xenstore watch). */
	int (*poll_fd)(const struct pvgpu_listener *l);
	/* Something to accept without a new event on poll_fd; NULL: never. */
	int (*pending)(struct pvgpu_listener *l);
	/*
	 * One caller: 0 with *peer and *conn, -EAGAIN when nobody is there
	 * after all, -errno.
	 */
	int (*accept)(struct pvgpu_listener *l, struct pvgpu_peer *peer,
		      struct pvgpu_conn **conn);
	/*
	 * The session of the peer accept gave this cookie ended (its worker
	 * exited); NULL: nothing to do.
	 */
	void (*done)(struct pvgpu_listener *l, uint64_t cookie);
	/* In a forked worker: drop the supervisor's listener, quietly. */
	void (*forget)(struct pvgpu_listener *l);
	/* Stop listening (the supervisor, at shutdown or reload). */
	void (*close)(struct pvgpu_listener *l);
};

struct pvgpu_listener {
	const struct pvgpu_host_ops *ops;
	unsigned int features;		/* PVGPU_TR_* */
	int fd;				/* socket listeners; -1 for others */
	void *priv;			/* the transport's own */
	pvgpu_wanted_fn wanted;		/* NULL: every caller it finds */
	void *wanted_arg;
	char uri[256];
	char path[108];		/* a Unix socket: unlinked again on close */
	char vm[PVGPU_VM_NAME_LEN];	/* a VM's vhost-user socket: that VM */
};

struct pvgpu_peer {
	unsigned int features;	/* the channel's PVGPU_TR_* */
	/* From the channel; PVGPU_ID_NONE where it says nothing (tcp). */
	struct pvgpu_identity id;
	char identity[128];	/* "uid=1000,pid=42", "tcp:127.0.0.1:5000", "cid=4" */
	/*
	 * The caller's network address, where the channel has one (tcp,
	 * verbs; "" otherwise), as inet_ntop writes it: admission holds a
	 * token to the [vm]'s addresses = (policy.h).
	 */
	char addr[46];
	/*
	 * The registered VM the channel belongs to (vm.name "" if none): the
	 * VM whose vhost-user socket accepted it, or whose CID it has.
	 */
	struct pvgpu_vm_record vm;
	/*
	 * The VM name the channel vouches for ("" if none): a Xen domain's
	 * name, which only dom0 writes.  Admission looks the policy up by it.
	 */
	char name[PVGPU_VM_NAME_LEN];
	uint64_t cookie;	/* the listener's own, for done() */
};

/* A connection, in the worker (after fork) and briefly in the supervisor. */
struct pvgpu_conn_ops {
	/*
	 * In the worker, first: make what must not exist before fork() (a
	 * vchan, a verbs context) and wait for the guest.  NULL: nothing.
	 */
	int (*open)(struct pvgpu_conn *c, char *err, size_t errlen);
	/*
	 * Up to len bytes: > 0, 0 when the guest hung up, -errno;
	 * nonblock: -EAGAIN when nothing is there yet.
	 */
	ssize_t (*recv)(struct pvgpu_conn *c, void *buf, size_t len,
			int nonblock);
	/* Every byte of iov (consumed); 0 or -errno. */
	int (*sendv)(struct pvgpu_conn *c, struct iovec *iov, int iovcnt);
	/*
	 * Until something can be read or the guest hung up (1), timeout_ns
	 * pass (0; -1: no limit), or an error (-errno).
	 */
	int (*wait)(struct pvgpu_conn *c, int64_t timeout_ns);
	/* Non-zero once the guest has hung up (never blocks). */
	int (*hung_up)(struct pvgpu_conn *c);
	/*
	 * The descriptor the guest passed with the last message read (shm's
	 * memfd window), now the caller's; -1 if none.  NULL: never any.
	 */
	int (*take_fd)(struct pvgpu_conn *c);
	/*
	 * A window the channel mapped itself (Xen grants): 0 and base/size
	 * (the channel's memory: do not unmap), or -ENOENT.  NULL: none.
	 */
	int (*window)(struct pvgpu_conn *c, void **base, uint64_t *size);
	/* The supervisor's copy after fork(): drop it, leave the guest be. */
	void (*release)(struct pvgpu_conn *c);
	/* The worker's, at the session's end. */
	void (*close)(struct pvgpu_conn *c);
};

struct pvgpu_conn {
	const struct pvgpu_conn_ops *ops;
	/*
	 * The descriptor it holds, -1 if none: so that a forked worker
	 * closing the supervisor's descriptors keeps it, and what the
	 * supervisor polls while it waits for a hello (PVGPU_TR_ID_AT_HELLO).
	 * Nothing else polls it.
	 */
	int fd;
};

/*
 * Listen on uri with the transport its scheme names; wanted (may be NULL)
 * filters the callers of transports that offer channels.  0, or -1 with
 * one line in err.
 */
int pvgpu_listen(const char *uri, pvgpu_wanted_fn wanted, void *arg,
		 struct pvgpu_listener *l, char *err, size_t errlen);
/*
 * Listen on the Unix socket vhost-device-vsock forwards VM vm's vsock
 * connections to: mode 0600, and only root or our own uid may connect.
 */
int pvgpu_listen_vm(const char *path, const char *vm,
		    struct pvgpu_listener *l, char *err, size_t errlen);
static inline int pvgpu_listener_fd(const struct pvgpu_listener *l)
{
	return l->ops ? l->ops->poll_fd(l) : -1;
}
void pvgpu_listener_close(struct pvgpu_listener *l);
/* In a forked worker. */
void pvgpu_listener_forget(struct pvgpu_listener *l);

/* Accept one caller: 0 with *peer and *conn, or -errno (-EAGAIN: none). */
int pvgpu_accept(struct pvgpu_listener *l, struct pvgpu_peer *peer,
		 struct pvgpu_conn **conn);

/* A connection over a connected stream socket fd (the stream core). */
struct pvgpu_conn *pvgpu_stream_conn_new(int fd, unsigned int features);

#endif /* PVGPU_HOST_TRANSPORT_H */
