/*
 * size.h - the one way pvgpu reads a size: "4096", "256K", "1M", "2G",
 * "1T" (powers of 1024; "Ki"/"KiB"/"KB" spellings are taken too).  pvgpud's
 * flags, the policy and registry files and the guest's environment all
 * say sizes this way, so a user learns it once.
 */
#ifndef PVGPU_SIZE_H
#define PVGPU_SIZE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {	/* the benchmarks are CUDA C++ */
#endif

/* 0 and *out, or -1 for anything else (no sign, no overflow, no junk). */
int pvgpu_parse_size(const char *s, uint64_t *out);

#ifdef __cplusplus
}
#endif

#endif /* PVGPU_SIZE_H */
