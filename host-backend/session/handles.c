/* handles.c - the session's handle and allocation tables (handles.h). */
#include <stdlib.h>
#include <string.h>

#include "handles.h"

/* An id is (generation << 24) | (index + 1): never 0, and stale after reuse. */
#define ID_INDEX_BITS 24
#define ID_INDEX_MASK ((1u << ID_INDEX_BITS) - 1)

int pvgpu_handles_room(struct pvgpu_handles *t, uint32_t n)
{
	uint32_t max = t->max ? atomic_load(t->max) : 0;

	if (!max || max > PVGPU_HANDLES_MAX)
		max = PVGPU_HANDLES_MAX;
	if (t->live <= max && n <= max - t->live)
		return 0;
	t->refused++;
	return -1;
}

uint64_t pvgpu_handle_add(struct pvgpu_handles *t, enum pvgpu_handle_kind kind,
			  uint64_t exec_handle, uint64_t ctx, int32_t device)
{
	uint32_t i;

	if (pvgpu_handles_room(t, 1))
		return 0;
	/* Every entry below n is taken while none was freed: no search. */
	i = t->live < t->n ? 0 : t->n;
	for (; i < t->n; i++)
		if (t->v[i].kind == H_FREE)
			break;
	if (i == t->n) {
		if (t->n == ID_INDEX_MASK)
			return 0;
		if (t->n == t->cap) {
			uint32_t cap = t->cap ? t->cap * 2 : 64;
			struct pvgpu_handle *v = realloc(t->v, cap * sizeof(*v));

			if (!v)
				return 0;
			t->v = v;
			t->cap = cap;
		}
		memset(&t->v[t->n], 0, sizeof(t->v[0]));
		t->n++;
	}
	t->v[i].kind = kind;
	t->v[i].gen++;
	t->v[i].exec_handle = exec_handle;
	t->v[i].ctx = ctx;
	t->v[i].device = device;
	t->v[i].module = 0;
	t->v[i].charged = 0;
	t->v[i].data = NULL;
	t->v[i].ndata = 0;
	t->live++;
	return ((uint64_t)t->v[i].gen << ID_INDEX_BITS) | (i + 1);
}

struct pvgpu_handle *pvgpu_handle_get(struct pvgpu_handles *t, uint64_t id,
				      enum pvgpu_handle_kind kind)
{
	uint64_t index = (id & ID_INDEX_MASK);
	uint64_t gen = id >> ID_INDEX_BITS;

	if (index == 0 || index > t->n)
		return NULL;
	if (t->v[index - 1].kind != kind || t->v[index - 1].gen != gen)
		return NULL;
	return &t->v[index - 1];
}

uint64_t pvgpu_handle_id(const struct pvgpu_handles *t,
			 const struct pvgpu_handle *h)
{
	return ((uint64_t)h->gen << ID_INDEX_BITS) | ((uint64_t)(h - t->v) + 1);
}

void pvgpu_handle_release(struct pvgpu_handles *t, struct pvgpu_handle *h)
{
	if (h->kind != H_FREE)
		t->live--;
	free(h->data);
	h->data = NULL;
	h->ndata = 0;
	h->kind = H_FREE;
}

void pvgpu_handle_del(struct pvgpu_handles *t, uint64_t id)
{
	uint64_t index = id & ID_INDEX_MASK;

	if (index && index <= t->n)
		pvgpu_handle_release(t, &t->v[index - 1]);
}

void pvgpu_handles_free(struct pvgpu_handles *t)
{
	for (uint32_t i = 0; i < t->n; i++)
		pvgpu_handle_release(t, &t->v[i]);
	free(t->v);
	memset(t, 0, sizeof(*t));
}

/* Index of the first allocation whose base is > ptr. */
static size_t upper_bound(const struct pvgpu_allocs *t, uint64_t ptr)
{
	size_t lo = 0, hi = t->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (t->v[mid].base <= ptr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int pvgpu_alloc_add(struct pvgpu_allocs *t, const struct pvgpu_alloc *a)
{
	size_t at;

	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 64;
		struct pvgpu_alloc *v = realloc(t->v, cap * sizeof(*v));

		if (!v)
			return -1;
		t->v = v;
		t->cap = cap;
	}
	at = upper_bound(t, a->base);
	memmove(&t->v[at + 1], &t->v[at], (t->n - at) * sizeof(t->v[0]));
	t->v[at] = *a;
	t->n++;
	return 0;
}

struct pvgpu_alloc *pvgpu_alloc_find(struct pvgpu_allocs *t, uint64_t base)
{
	size_t at = upper_bound(t, base);

	if (at == 0 || t->v[at - 1].base != base)
		return NULL;
	return &t->v[at - 1];
}

struct pvgpu_alloc *pvgpu_alloc_range(struct pvgpu_allocs *t, uint64_t ptr,
				      uint64_t len)
{
	size_t at = upper_bound(t, ptr);
	struct pvgpu_alloc *a;

	if (at == 0 || len == 0)
		return NULL;
	a = &t->v[at - 1];
	/* ptr >= a->base here; written to avoid overflow on hostile values. */
	if (ptr - a->base >= a->size)
		return NULL;
	if (len <= a->size - (ptr - a->base))
		return a;
	/*
	 * Past a's end: only for virtual memory mapped piece by piece into
	 * one reserved range (XLA's allocator), on through the mappings that
	 * follow without a gap.  Two allocations side by side are two: the
	 * driver refuses a copy across them.
	 */
	if (a->module != PVGPU_ALLOC_VMM)
		return NULL;
	len -= a->size - (ptr - a->base);
	for (size_t i = at; i < t->n; i++) {
		const struct pvgpu_alloc *b = &t->v[i], *prev = &t->v[i - 1];

		if (b->base != prev->base + prev->size || b->module != PVGPU_ALLOC_VMM)
			return NULL;
		if (len <= b->size)
			return a;
		len -= b->size;
	}
	return NULL;
}

void pvgpu_alloc_del(struct pvgpu_allocs *t, struct pvgpu_alloc *a)
{
	size_t at = (size_t)(a - t->v);

	memmove(&t->v[at], &t->v[at + 1], (t->n - at - 1) * sizeof(t->v[0]));
	t->n--;
}

void pvgpu_allocs_free(struct pvgpu_allocs *t)
{
	free(t->v);
	memset(t, 0, sizeof(*t));
}
