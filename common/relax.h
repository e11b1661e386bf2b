/*
 * relax.h - the pause a spinning loop makes between two looks.
 *
 * On x86 PAUSE keeps a spin loop from flooding the memory pipeline and
 * hands the core to its hyper-thread sibling; arm64's YIELD is the same
 * hint.  Elsewhere there is no such instruction and a plain loop is fine.
 * This is the only place that names one, so pvgpu builds for every target.
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

#endif /* PVGPU_RELAX_H */
