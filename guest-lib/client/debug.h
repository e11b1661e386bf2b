/* debug.h - diagnostics on stderr when asked for (PVGPU_DEBUG=1); silent otherwise. */
#ifndef PVGPU_DEBUG_H
#define PVGPU_DEBUG_H

/*
 * Whether pvgpu_debug prints.  Process-wide on purpose: a diagnostic line
 * may come from code that holds no client (device list parsing, module
 * registration), and the one switch is set from the client's config.
 */
void pvgpu_debug_enable(int on);

/* One line, prefixed "pvgpu: ", only when enabled. */
void pvgpu_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* PVGPU_DEBUG_H */
