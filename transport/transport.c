/* transport.c - find the transport that serves a URI scheme. */
#include <poll.h>
#include <string.h>

#include "transport.h"

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
