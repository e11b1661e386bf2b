/*
 * devices.h - the device list every front-end reads (DESIGN §6): the
 * driver front-end (libcuda.so.1) and NVML split
 * PVGPU_DEVICES (or guest.conf's entries, joined the same way) with this
 * one parser, so an entry means the same GPU whichever library reads it.
 */
#ifndef PVGPU_DEVICES_H
#define PVGPU_DEVICES_H

#include "client.h"

/* One entry: a backend's URI and a GPU on it (-1: all of its GPUs). */
struct pvgpu_device_entry {
	char uri[PVGPU_CLIENT_PATH_MAX];
	int index;
};

/*
 * Split "URI[#N][,URI[#N]...]": blanks around an entry are dropped, empty
 * entries skipped, a trailing '#' and digits is the GPU index (a '#' not
 * followed by digits only is part of the URI).  An entry whose URI is too
 * long or whose index is absurd is ignored, with a debug line.  The number
 * of entries and *out (malloc'd; the caller frees it), or -1 when out of
 * memory.
 */
int pvgpu_devices_parse(const char *list, struct pvgpu_device_entry **out);

/*
 * The GPUs an entry names on a backend that has `count`: [*first, *end),
 * empty (with a debug line) when its index is past the backend's GPUs.
 */
void pvgpu_device_entry_gpus(const struct pvgpu_device_entry *e, int count,
			     int *first, int *end);

#endif /* PVGPU_DEVICES_H */
