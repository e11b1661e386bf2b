/*
 * relax.h - the CPU hints of spinning on shared memory: the pause a
 * spinning loop makes between looks, and handing a just-written cache line
 * towards the core that will read it.
 *
 * On x86 PAUSE keeps a spin loop from flooding the memory pipeline and
 * hands the core to its hyper-thread sibling; arm64's YIELD is the same
 * hint.  Elsewhere there is no such instruction and a plain loop is fine.
 * This is the only place that names such instructions, so pvgpu builds
 * for every target.
 */
#ifndef PVGPU_RELAX_H
#define PVGPU_RELAX_H

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
 * 623-656 ns without it (BENCHMARKS.md).
 */
static inline void pvgpu_cache_demote(const void *p)
{
#if defined(__x86_64__)
	__asm__ __volatile__(".byte 0x0f, 0x1c, 0x07" : : "D"(p) : "memory");
#else
	(void)p;
#endif
}

#endif /* PVGPU_RELAX_H */
