/*
 * identity.h - who is calling, as the channel says it (DESIGN §5): a kind
 * and a value, never a field per kind.  Transports fill it (SO_PEERCRED's
 * uid on a Unix socket, the peer CID on vsock, the hello's token where the
 * channel says nothing, next the Xen domid or a Verbs token); policy and
 * registry look a caller up by it in one place each, so a new transport
 * brings a new kind and no new lookup.
 */
#ifndef PVGPU_IDENTITY_H
#define PVGPU_IDENTITY_H

#include <stddef.h>

enum pvgpu_id_kind {
	PVGPU_ID_NONE,		/* the channel does not say (tcp before hello) */
	PVGPU_ID_UID,		/* local process: its uid */
	PVGPU_ID_CID,		/* vsock peer CID */
	PVGPU_ID_TOKEN,		/* a secret the caller presented */
	PVGPU_ID_DOMID,		/* Xen domain id */
	PVGPU_ID_VERBS,		/* an RDMA peer's token */
	PVGPU_ID_KINDS
};

/* Room for the longest token hello carries, NUL included. */
#define PVGPU_ID_VALUE_MAX	257

struct pvgpu_identity {
	enum pvgpu_id_kind kind;
	char value[PVGPU_ID_VALUE_MAX];	/* "1000", "4", a token */
};

/* "uid", "cid", "token", "domid", "verbs"; "none" for the rest. */
const char *pvgpu_id_kind_name(enum pvgpu_id_kind kind);

/*
 * Same kind and value.  Values are compared in time independent of where
 * they differ: a token is a secret.
 */
int pvgpu_identity_equal(const struct pvgpu_identity *a,
			 const struct pvgpu_identity *b);

/* 0 and *id from kind and a value that fits; -1 otherwise. */
int pvgpu_identity_set(struct pvgpu_identity *id, enum pvgpu_id_kind kind,
		       const char *value);

#endif /* PVGPU_IDENTITY_H */
