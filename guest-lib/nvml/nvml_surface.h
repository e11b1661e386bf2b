/*
 * nvml_surface.h - what the generated surface (build/gen/nvml_surface.c,
 * from protocol/api/gen_nvml.py) and the hand-written entries share.
 * Free of nvml.h: the generated file declares each stub int(void).
 */
#ifndef PVGPU_NVML_SURFACE_H
#define PVGPU_NVML_SURFACE_H

#include <stddef.h>

extern const char *const pvgpu_nvml_exported_names[];
extern const size_t pvgpu_nvml_exported_count;

/* nvmlReturn_t's constants, as nvml.h names and describes them. */
struct pvgpu_nvml_errname {
	int code;
	const char *name;
	const char *text;
};
extern const struct pvgpu_nvml_errname pvgpu_nvml_errors[];
extern const size_t pvgpu_nvml_error_count;

/* NVML_ERROR_NOT_SUPPORTED, with a PVGPU_DEBUG line naming the function. */
int pvgpu_nvml_unsupported(const char *name);

#endif
