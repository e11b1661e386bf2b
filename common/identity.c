/* identity.c - see identity.h. */
#include <string.h>

#include "identity.h"

static const char *const kind_names[PVGPU_ID_KINDS] = {
	[PVGPU_ID_NONE] = "none",
	[PVGPU_ID_UID] = "uid",
	[PVGPU_ID_CID] = "cid",
	[PVGPU_ID_TOKEN] = "token",
	[PVGPU_ID_DOMID] = "domid",
	[PVGPU_ID_VERBS] = "verbs",
};

const char *pvgpu_id_kind_name(enum pvgpu_id_kind kind)
{
	return (unsigned int)kind < PVGPU_ID_KINDS ? kind_names[kind] : "none";
}

int pvgpu_identity_equal(const struct pvgpu_identity *a,
			 const struct pvgpu_identity *b)
{
	size_t la = strnlen(a->value, sizeof(a->value));
	size_t lb = strnlen(b->value, sizeof(b->value));
	unsigned char diff = la != lb;

	if (a->kind != b->kind || a->kind == PVGPU_ID_NONE)
		return 0;
	for (size_t i = 0; i < la; i++)
		diff |= (unsigned char)(a->value[i] ^ b->value[i < lb ? i : 0]);
	return !diff;
}

int pvgpu_identity_set(struct pvgpu_identity *id, enum pvgpu_id_kind kind,
		       const char *value)
{
	size_t len = strlen(value);

	if (len >= sizeof(id->value) || (unsigned int)kind >= PVGPU_ID_KINDS)
		return -1;
	memset(id, 0, sizeof(*id));
	id->kind = kind;
	memcpy(id->value, value, len + 1);
	return 0;
}
