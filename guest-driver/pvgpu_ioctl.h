/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * The user interface of pvgpu.ko, the guest driver for the
 * pvgpu shared window (an ivshmem PCI device whose BAR2 starts with a pvgpu
 * window header).  Usable from userspace C and from the kernel.
 *
 * /dev/pvgpuN, one per window:
 *   mmap      the window, offset 0 to the window size, shared and
 *             cacheable; a mapping past the end is refused (EINVAL)
 *   ioctl     PVGPU_IOC_INFO, PVGPU_IOC_RING (below)
 *   read      8 bytes: the device's interrupt count (__u64) once it differs
 *             from the count this open file last read; blocks unless
 *             O_NONBLOCK (then EAGAIN).  EOPNOTSUPP without interrupts.
 *   poll      EPOLLIN when read would return; never signals without
 *             interrupts; EPOLLHUP | EPOLLERR once the device is unbound
 *
 * Interrupts and doorbells exist only on ivshmem-doorbell with MSI-X;
 * ivshmem-plain has neither (PVGPU_INFO_DOORBELL clear, RING fails with
 * EOPNOTSUPP).  After the device is unbound, files already open keep their
 * mappings and PVGPU_IOC_INFO (with PVGPU_INFO_UNBOUND); a new mmap, RING and
 * read fail with ENODEV.
 */
#ifndef _UAPI_PVGPU_IOCTL_H
#define _UAPI_PVGPU_IOCTL_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define PVGPU_IOC_MAGIC		0xE4

/* pvgpu_info.flags */
#define PVGPU_INFO_DOORBELL	0x00000001u	/* RING and interrupts work */
#define PVGPU_INFO_UNBOUND	0x00000002u	/* device gone; mapping kept */

struct pvgpu_info {
	__u64 window_id;	/* from the window header */
	__u64 size;		/* the whole window, header included */
	__u32 layout;		/* header layout version */
	__u32 flags;		/* PVGPU_INFO_* */
	__s32 peer_id;		/* this guest's ivshmem peer id, -1 if none */
	__u32 vectors;		/* interrupt vectors in use (0 or 1) */
};

/* Ring the doorbell of ivshmem peer `peer`, interrupt vector `vector`. */
struct pvgpu_doorbell {
	__u32 peer;		/* 0..65535 */
	__u32 vector;		/* 0..65535 */
};

#define PVGPU_IOC_INFO		_IOR(PVGPU_IOC_MAGIC, 0, struct pvgpu_info)
#define PVGPU_IOC_RING		_IOW(PVGPU_IOC_MAGIC, 1, struct pvgpu_doorbell)

#endif /* _UAPI_PVGPU_IOCTL_H */
