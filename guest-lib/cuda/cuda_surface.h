/*
 * cuda_surface.h - what the generated surface (build/gen/cuda_surface.c,
 * from protocol/api/gen_api.py) and the hand-written front-end share.
 * Deliberately free of cuda.h: the generated file declares every entry
 * point as int(void) to take its address, whatever its real prototype.
 */
#ifndef PVGPU_CUDA_SURFACE_H
#define PVGPU_CUDA_SURFACE_H

#include <stddef.h>

/* One cuGetProcAddress entry: name as asked, first version, 1: per-thread. */
struct pvgpu_proc {
	const char *name;
	int version;
	int per_thread;
	void *fn;
};

extern const struct pvgpu_proc pvgpu_proc_table[];	/* sorted by name */
extern const size_t pvgpu_proc_count;
extern const char *const pvgpu_exported_names[];
extern const size_t pvgpu_exported_count;

struct pvgpu_cu_errname {
	int code;
	const char *name;
	const char *text;
};
extern const struct pvgpu_cu_errname pvgpu_cu_errors[];
extern const size_t pvgpu_cu_error_count;

/* CUDA_ERROR_NOT_SUPPORTED, with a PVGPU_DEBUG line naming the function. */
int pvgpu_cuda_unsupported(const char *name);

#endif
