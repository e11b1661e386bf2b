/* transport.c - find the transport that serves a URI scheme. */
#include <dlfcn.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "transport.h"

/*
 * verbs:// lives in transport-verbs.so, loaded on first use, so that
 * nothing needs rdma-core unless it speaks verbs.  Looked for next to the
 * library (or plugin) this code is in: DIR/pvgpu/, DIR/../pvgpu/ (from
 * lib/pvgpud/), then the installed /usr/lib/pvgpu/.
 */
static const struct pvgpu_transport_ops *load_verbs(void)
{
	static const struct pvgpu_transport_ops *ops;
	static int tried;
	const char *const rel[] = { "pvgpu", "../pvgpu" };
	char dir[PATH_MAX], path[PATH_MAX + 64];
	Dl_info info;
	void *h = NULL;

	if (tried)
		return ops;
	tried = 1;
	if (dladdr((void *)load_verbs, &info) && info.dli_fname) {
		const char *slash = strrchr(info.dli_fname, '/');
		size_t n = slash ? (size_t)(slash - info.dli_fname) : 0;

		if (n && n < sizeof(dir)) {
			memcpy(dir, info.dli_fname, n);
			dir[n] = '\0';
			for (size_t i = 0; !h && i < 2; i++) {
				snprintf(path, sizeof(path), "%s/%s/transport-verbs.so",
					 dir, rel[i]);
				h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
			}
		}
	}
	if (!h)
		h = dlopen("/usr/lib/pvgpu/transport-verbs.so", RTLD_NOW | RTLD_LOCAL);
	if (h)
		ops = dlsym(h, "pvgpu_transport_verbs_plugin");
	return ops;
}

static const struct pvgpu_transport_ops *const transports[] = {
	&pvgpu_transport_unix,
	&pvgpu_transport_tcp,
	&pvgpu_transport_shm,
	&pvgpu_transport_vsock,
};

const struct pvgpu_transport_ops *pvgpu_transport_lookup(const char *uri,
							  const char **addr)
{
	const char *sep = strstr(uri, "://");
	size_t len;

	if (!sep)
		return NULL;
	len = (size_t)(sep - uri);
	if (len == 5 && !strncmp(uri, "verbs", 5)) {
		const struct pvgpu_transport_ops *ops = load_verbs();

		if (ops)
			*addr = sep + 3;
		return ops;
	}
	for (size_t i = 0; i < sizeof(transports) / sizeof(transports[0]); i++) {
		const struct pvgpu_transport_ops *ops = transports[i];

		if (strlen(ops->scheme) == len && !strncmp(uri, ops->scheme, len)) {
			*addr = sep + 3;
			return ops;
		}
	}
	return NULL;
}

int pvgpu_transport_quiet(struct pvgpu_transport *t)
{
	struct pollfd pfd = { t->fd, POLLIN | POLLRDHUP, 0 };

	if (t->fd < 0)
		return 0;
	return poll(&pfd, 1, 0) == 0;
}
