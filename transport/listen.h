/*
 * listen.h - the endpoints pvgpud serves (DESIGN §8 URIs) and who is calling.
 *
 * The caller's identity always comes from the channel: SO_PEERCRED on a Unix
 * socket, the peer CID on vsock.  TCP has no such thing, so a TCP caller is
 * only "tcp:ADDR" here and proves who it is with the token in hello.
 */
#ifndef PVGPU_LISTEN_H
#define PVGPU_LISTEN_H

#include <stddef.h>
#include <sys/types.h>

#include "identity.h"
#include "registry.h"

/* Private to the transports: the daemon reads only the features below. */
enum pvgpu_endpoint_kind { EP_UNIX, EP_TCP, EP_VSOCK };

/*
 * What a channel is like, for those who must not know which channel it
 * is (admission, the supervisor, the worker): feature bits, not kinds.
 */
#define PVGPU_TR_ID_AT_HELLO	(1u << 0)	/* who: the token in hello */
#define PVGPU_TR_VM_CALLERS	(1u << 1)	/* callers are VMs, to be registered */
#define PVGPU_TR_PASSES_FD	(1u << 2)	/* may carry a window's fd */

struct pvgpu_listener {
	enum pvgpu_endpoint_kind kind;
	unsigned int features;		/* PVGPU_TR_* */
	int fd;
	char uri[256];
	char path[108];		/* EP_UNIX: unlinked again on shutdown */
	char vm[PVGPU_VM_NAME_LEN];	/* a VM's vhost-user socket: that VM */
};

struct pvgpu_peer {
	unsigned int features;	/* the channel's PVGPU_TR_* */
	/* From the channel; PVGPU_ID_NONE where it says nothing (tcp). */
	struct pvgpu_identity id;
	char identity[128];	/* "uid=1000,pid=42", "tcp:127.0.0.1:5000", "cid=4" */
	/*
	 * The registered VM the channel belongs to (vm.name "" if none): the
	 * VM whose vhost-user socket accepted it, or whose CID it has.
	 */
	struct pvgpu_vm_record vm;
};

/* Open a listening socket for uri; on failure -1 and one line in err. */
int pvgpu_listen(const char *uri, struct pvgpu_listener *l,
		 char *err, size_t errlen);
/*
 * Listen on the Unix socket vhost-device-vsock forwards VM vm's vsock
 * connections to: mode 0600, and only root or our own uid may connect.
 */
int pvgpu_listen_vm(const char *path, const char *vm,
		    struct pvgpu_listener *l, char *err, size_t errlen);
void pvgpu_listener_close(struct pvgpu_listener *l);

/* Accept one connection; returns the fd (or -1) and fills peer. */
int pvgpu_accept(struct pvgpu_listener *l, struct pvgpu_peer *peer);

#endif /* PVGPU_LISTEN_H */
