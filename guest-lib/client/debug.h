/* debug.h - diagnostics on stderr when PVGPU_DEBUG=1; silent otherwise. */
#ifndef PVGPU_DEBUG_H
#define PVGPU_DEBUG_H

/* One line, prefixed "pvgpu: ", only when PVGPU_DEBUG is set and not "0". */
void pvgpu_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* PVGPU_DEBUG_H */
