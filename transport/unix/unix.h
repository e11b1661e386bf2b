/* unix.h - the Unix socket's host half, which shm:// shares. */
#ifndef PVGPU_TRANSPORT_UNIX_H
#define PVGPU_TRANSPORT_UNIX_H

#include "host.h"

int pvgpu_unix_listen(struct pvgpu_listener *l, const char *path,
		      char *err, size_t errlen);
int pvgpu_unix_accept(struct pvgpu_listener *l, struct pvgpu_peer *peer,
		      struct pvgpu_conn **conn);

#endif
