/* host.c - pvgpud's way into a transport's host half: listen, accept, close. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "host.h"

/* l is set up but for ops; listen on uri with the transport it names. */
static int listen_uri(const char *uri, struct pvgpu_listener *l, char *err,
		      size_t errlen)
{
	const struct pvgpu_transport_module *mod;
	const char *addr;
	char why[256];

	l->fd = -1;
	snprintf(l->uri, sizeof(l->uri), "%s", uri);
	mod = pvgpu_transport_find(uri, &addr, why, sizeof(why));
	if (!mod || !mod->host) {
		snprintf(err, errlen,
			 "unsupported listen URI '%s' (%s; unix://PATH, shm://PATH, tcp://HOST:PORT, vsock://any:PORT, vchan://NAME, verbs://ADDR:PORT)",
			 uri, mod ? "no host half" : why);
		return -1;
	}
	if (mod->host->listen(l, addr, err, errlen)) {
		l->fd = -1;
		return -1;
	}
	l->ops = mod->host;
	return 0;
}

int pvgpu_listen(const char *uri, pvgpu_wanted_fn wanted, void *arg,
		 struct pvgpu_listener *l, char *err, size_t errlen)
{
	memset(l, 0, sizeof(*l));
	l->wanted = wanted;
	l->wanted_arg = arg;
	return listen_uri(uri, l, err, errlen);
}

int pvgpu_listen_vm(const char *path, const char *vm,
		    struct pvgpu_listener *l, char *err, size_t errlen)
{
	char uri[sizeof(l->uri)];

	/*
	 * Whoever connects here is the VM, so only vhost-device-vsock may:
	 * the Unix transport makes a VM's socket ours alone (0600) and checks
	 * the caller's uid at accept.
	 */
	memset(l, 0, sizeof(*l));
	snprintf(l->vm, sizeof(l->vm), "%s", vm);
	snprintf(uri, sizeof(uri), "unix://%s", path);
	return listen_uri(uri, l, err, errlen);
}

void pvgpu_listener_close(struct pvgpu_listener *l)
{
	if (l->ops)
		l->ops->close(l);
	l->ops = NULL;
	l->fd = -1;
}

void pvgpu_listener_forget(struct pvgpu_listener *l)
{
	if (l->ops && l->ops->forget)
		l->ops->forget(l);
}

int pvgpu_accept(struct pvgpu_listener *l, struct pvgpu_peer *peer,
		 struct pvgpu_conn **conn)
{
	memset(peer, 0, sizeof(*peer));
	peer->features = l->features;
	return l->ops->accept(l, peer, conn);
}
