/* wire.c - the few non-inline helpers behind wire.h. */
#include <stdlib.h>

#include "pvgpu_proto.h"
#include "wire.h"

int pvgpu_buf_reserve(struct pvgpu_buf *b, size_t extra)
{
	size_t need, cap;
	uint8_t *p;

	if (extra > SIZE_MAX - b->len)
		return -1;
	need = b->len + extra;
	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 256;
	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	p = realloc(b->data, cap);
	if (!p)
		return -1;
	b->data = p;
	b->cap = cap;
	return 0;
}

void pvgpu_buf_free(struct pvgpu_buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

int pvgpu_op_waits_on_device(uint16_t opcode)
{
	switch (opcode) {
	case PVGPU_OP_CTX_SYNCHRONIZE:
	case PVGPU_OP_STREAM_SYNCHRONIZE:
	case PVGPU_OP_MEMCPY_HTOD:
	case PVGPU_OP_MEMCPY_DTOH:
	case PVGPU_OP_MEMCPY_DTOD:
	case PVGPU_OP_MEMCPY_HTOD_WINDOW:
	case PVGPU_OP_MEMCPY_DTOH_WINDOW:
	case PVGPU_OP_MEMCPY_HTOD_STAGED:
	case PVGPU_OP_MEMCPY_DTOH_STAGED:
	case PVGPU_OP_MEMCPY_PEER:
		return 1;
	default:
		return 0;
	}
}
