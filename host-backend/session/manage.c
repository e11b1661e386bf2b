/*
 * manage.c - what the guest's libnvidia-ml.so.1 asks (ops.spec, section
 * "management"): a device's memory, GPU time and processes as the caller's
 * VM sees them, and the host's driver version.  Nothing here needs a
 * context, and nothing of another VM is ever reported.
 */
#include <cuda.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "pvgpu_dispatch.h"
#include "worker.h"

/* Is slot s one of the caller's VM?  Without a VM, only the caller itself. */
static int same_vm(struct pvgpu_worker *w, int vm, const struct pvgpu_slot *s)
{
	if (!s->pid)
		return 0;
	if (vm < 0)
		return s == w->slot;
	return atomic_load(&s->vm) == vm;
}

int32_t pvgpu_handle_device_usage(struct pvgpu_worker *w,
				  const struct pvgpu_device_usage_req *req,
				  struct pvgpu_device_usage_rep *rep)
{
	int vm = atomic_load(&w->slot->vm);
	uint64_t quota = vm < 0 ? 0 : atomic_load(&w->acct->vms[vm].quota);
	int32_t count = 0, st;
	int dev = req->device;

	if (!w->ex)
		return CUDA_ERROR_NO_DEVICE;
	st = w->ex_ops->driver_info(w->ex, NULL, &count);
	if (st)
		return st;
	if (dev < 0 || dev >= count || dev >= PVGPU_MAX_DEVICES ||
	    !pvgpu_vm_may_use(w, dev))
		return CUDA_ERROR_INVALID_DEVICE;
	if (quota) {
		uint64_t used = pvgpu_accounting_vm_mem_used(w->acct, vm);

		rep->total = quota;
		rep->used = used < quota ? used : quota;
	} else {
		struct pvgpu_exec_device info;

		st = w->ex_ops->device_info(w->ex, dev, &info);
		if (st)
			return st;
		rep->total = info.total_mem;
	}
	for (uint32_t i = 0; i < w->acct->nslots; i++) {
		struct pvgpu_slot *s = &w->acct->slots[i];
		uint64_t mem;

		if (!same_vm(w, vm, s))
			continue;
		mem = atomic_load(&s->mem_used[dev]);
		if (!quota)
			rep->used += mem;
		rep->gpu_ns += atomic_load(&s->gpu_ns);
		if ((!mem && !(atomic_load(&s->gpus_held) >> dev & 1)) ||
		    rep->pids_count >= sizeof(rep->pids) / sizeof(rep->pids[0]))
			continue;
		rep->pids[rep->pids_count++] = atomic_load(&s->guest_pid);
		rep->pid_mem[rep->pid_mem_count++] = mem;
	}
	if (!quota && rep->used > rep->total)
		rep->used = rep->total;
	return CUDA_SUCCESS;
}

int32_t pvgpu_handle_host_driver_version(struct pvgpu_worker *w,
					 const struct pvgpu_host_driver_version_req *req,
					 struct pvgpu_host_driver_version_rep *rep)
{
	/* The NVIDIA kernel module's version, as its sysfs entry says it. */
	FILE *f = fopen("/sys/module/nvidia/version", "re");
	size_t n = 0;

	(void)w;
	(void)req;
	rep->version[0] = '\0';
	if (f) {
		if (fgets(rep->version, sizeof(rep->version), f))
			n = strcspn(rep->version, "\r\n");
		fclose(f);
	}
	rep->version[n] = '\0';
	rep->version_len = (uint32_t)n;
	return CUDA_SUCCESS;
}
