/*
 * relax.h - the CPU hints of sharing memory: the pause a spinning loop
 * makes between looks, handing a just-written cache line towards the core
 * that will read it, and a copy whose stores go around the caches.
 *
 * On x86 PAUSE keeps a spin loop from flooding the memory pipeline and
 * hands the core to its hyper-thread sibling; arm64's YIELD is the same
 * hint.  Elsewhere there is no such instruction and a plain loop is fine.
 * This is the only place that names such instructions, so pvgpu builds
 * for every target.
 */
#ifndef PVGPU_RELAX_H
#define PVGPU_RELAX_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

static inline void pvgpu_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#endif
}

/*
 * The line holding p was just written for another core to read: move it
 * from this core's private caches to the shared one, so the reader's miss
 * is served from there rather than by a snoop into this core.  x86's
 * CLDEMOTE, written as its bytes (0F 1C /0, here with the address in
 * RDI) so no compiler flag is needed: a processor without it executes
 * them as a NOP, as the instruction was defined to be.  Nothing elsewhere.
 * On the H100 machine's Xeon: a ring round trip 544-590 ns against
 * 623-656 ns without it (docs/benchmarks-history.md, 2026-11-25).
 */
static inline void pvgpu_cache_demote(const void *p)
{
#if defined(__x86_64__)
	__asm__ __volatile__(".byte 0x0f, 0x1c, 0x07" : : "D"(p) : "memory");
#else
	(void)p;
#endif
}

/*
 * memcpy whose stores go around the caches, for bytes this CPU will not
 * read again and a device will (a staging slot the GPU DMAs from): no
 * read of each destination line before it is written, a third less
 * memory traffic, and the caches left to the program.  Ends with a store
 * fence, so a flag stored after it (a slot filled) is seen after the
 * bytes.  x86-64 only (SSE2, in every x86-64); elsewhere memcpy.
 */
static inline void pvgpu_copy_stream(void *dst, const void *src, size_t len)
{
#if defined(__x86_64__)
	uint8_t *d = dst;
	const uint8_t *s = src;
	size_t head = (16 - ((uintptr_t)d & 15)) & 15;

	if (len < head + 256) {
		memcpy(dst, src, len);
		return;
	}
	memcpy(d, s, head);
	d += head;
	s += head;
	len -= head;
	for (; len >= 64; d += 64, s += 64, len -= 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)s);
		__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(s + 48));

		_mm_stream_si128((__m128i *)d, a);
		_mm_stream_si128((__m128i *)(d + 16), b);
		_mm_stream_si128((__m128i *)(d + 32), c);
		_mm_stream_si128((__m128i *)(d + 48), e);
	}
	memcpy(d, s, len);
	_mm_sfence();
#else
	memcpy(dst, src, len);
#endif
}

#endif /* PVGPU_RELAX_H */
