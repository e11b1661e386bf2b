/*
 * nvml_device.c - pvgpu's libnvidia-ml.so.1: what a device is (answered
 * from what nvmlInit fetched) and what it is doing for this VM (memory,
 * utilisation, processes: asked of the backend each time, op device_usage,
 * which reports this VM's sessions only and the VM's quota as total).
 */
#include <cuda.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "nvml_internal.h"
#include "pvgpu_guest.h"

void nv_uuid_string(const struct nvmlDevice_st *d, char out[48])
{
	const unsigned char *u = d->uuid;

	snprintf(out, 48, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
		 "%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2], u[3], u[4], u[5],
		 u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

#define DEVICE(h, d)						\
	struct nvmlDevice_st *d;				\
	do {							\
		nvmlReturn_t r_ = nv_device((h), &d);		\
		if (r_ != NVML_SUCCESS)				\
			return r_;				\
	} while (0)

nvmlReturn_t DECLDIR nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
	DEVICE(device, d);
	return nv_string(name, length, d->name);
}

nvmlReturn_t DECLDIR nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
	char s[48];

	DEVICE(device, d);
	if (!d->have_uuid)
		return NVML_ERROR_NOT_SUPPORTED;
	nv_uuid_string(d, s);
	return nv_string(uuid, length, s);
}

nvmlReturn_t DECLDIR nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
	DEVICE(device, d);
	if (!index)
		return NVML_ERROR_INVALID_ARGUMENT;
	*index = (unsigned int)d->index;
	return NVML_SUCCESS;
}

/* The guest has no /dev/nvidiaN: the minor number is the index. */
nvmlReturn_t DECLDIR nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
	return nvmlDeviceGetIndex(device, minorNumber);
}

nvmlReturn_t DECLDIR nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
	DEVICE(device, d);
	if (!major || !minor)
		return NVML_ERROR_INVALID_ARGUMENT;
	*major = d->attr[NV_CC_MAJOR];
	*minor = d->attr[NV_CC_MINOR];
	return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch)
{
	DEVICE(device, d);
	if (!arch)
		return NVML_ERROR_INVALID_ARGUMENT;
	switch (d->attr[NV_CC_MAJOR]) {
	case 6:		*arch = NVML_DEVICE_ARCH_PASCAL; break;
	case 7:		*arch = d->attr[NV_CC_MINOR] >= 5 ? NVML_DEVICE_ARCH_TURING :
				NVML_DEVICE_ARCH_VOLTA; break;
	case 8:		*arch = d->attr[NV_CC_MINOR] >= 9 ? NVML_DEVICE_ARCH_ADA :
				NVML_DEVICE_ARCH_AMPERE; break;
	case 9:		*arch = NVML_DEVICE_ARCH_HOPPER; break;
	case 10:
	case 12:	*arch = NVML_DEVICE_ARCH_BLACKWELL; break;
	default:	*arch = NVML_DEVICE_ARCH_UNKNOWN; break;
	}
	return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode)
{
	DEVICE(device, d);
	if (!mode)
		return NVML_ERROR_INVALID_ARGUMENT;
	/* CUcomputemode and nvmlComputeMode_t number the modes alike. */
	*mode = (nvmlComputeMode_t)d->attr[NV_COMPUTE_MODE];
	return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetMultiGpuBoard(nvmlDevice_t device, unsigned int *multiGpuBool)
{
	DEVICE(device, d);
	if (!multiGpuBool)
		return NVML_ERROR_INVALID_ARGUMENT;
	*multiGpuBool = d->attr[NV_MULTI_GPU_BOARD] != 0;
	return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetBoardId(nvmlDevice_t device, unsigned int *boardId)
{
	DEVICE(device, d);
	if (!boardId)
		return NVML_ERROR_INVALID_ARGUMENT;
	*boardId = (unsigned int)d->attr[NV_BOARD_ID];
	return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetMemoryBusWidth(nvmlDevice_t device, unsigned int *busWidth)
{
	DEVICE(device, d);
	if (!busWidth)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!d->attr[NV_MEM_BUS_WIDTH])
		return NVML_ERROR_NOT_SUPPORTED;
	*busWidth = (unsigned int)d->attr[NV_MEM_BUS_WIDTH];
	return NVML_SUCCESS;
}

/* The peak clocks CUDA reports; the current ones are not known here. */
nvmlReturn_t DECLDIR nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
	int khz;

	DEVICE(device, d);
	if (!clock)
		return NVML_ERROR_INVALID_ARGUMENT;
	switch (type) {
	case NVML_CLOCK_GRAPHICS:
	case NVML_CLOCK_SM:	khz = d->attr[NV_CLOCK_KHZ]; break;
	case NVML_CLOCK_MEM:	khz = d->attr[NV_MEM_CLOCK_KHZ]; break;
	default:		return NVML_ERROR_NOT_SUPPORTED;
	}
	if (khz <= 0)
		return NVML_ERROR_NOT_SUPPORTED;
	*clock = (unsigned int)khz / 1000;
	return NVML_SUCCESS;
}

/* ---- PCI: where the GPU sits on its host, as CUDA there reports it ----- */

static void pci_common(const struct nvmlDevice_st *d, nvmlPciInfo_t *pci)
{
	snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy),
		 NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT,
		 (unsigned int)d->attr[NV_PCI_DOMAIN] & 0xffff,
		 (unsigned int)d->attr[NV_PCI_BUS] & 0xff,
		 (unsigned int)d->attr[NV_PCI_DEVICE] & 0xff);
	pci->domain = (unsigned int)d->attr[NV_PCI_DOMAIN];
	pci->bus = (unsigned int)d->attr[NV_PCI_BUS];
	pci->device = (unsigned int)d->attr[NV_PCI_DEVICE];
	pci->pciDeviceId = (unsigned int)d->attr[NV_PCI_IDS];
	pci->pciSubSystemId = (unsigned int)d->attr[NV_PCI_SUBSYS];
}

nvmlReturn_t DECLDIR nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
	DEVICE(device, d);
	if (!pci)
		return NVML_ERROR_INVALID_ARGUMENT;
	pci_common(d, pci);
	snprintf(pci->busId, sizeof(pci->busId), NVML_DEVICE_PCI_BUS_ID_FMT,
		 pci->domain, pci->bus & 0xff, pci->device & 0xff);
	return NVML_SUCCESS;
}

/*
 * The older versions' structure ended after pciSubSystemId with 16
 * reserved bytes where busId now begins: write nothing past them.
 */
nvmlReturn_t DECLDIR nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
	DEVICE(device, d);
	if (!pci)
		return NVML_ERROR_INVALID_ARGUMENT;
	pci_common(d, pci);
	return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
	return nvmlDeviceGetPciInfo_v2(device, pci);
}

nvmlReturn_t DECLDIR nvmlDeviceGetPciInfoExt(nvmlDevice_t device, nvmlPciInfoExt_t *pci)
{
	DEVICE(device, d);
	if (!pci)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (pci->version != nvmlPciInfoExt_v1)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	pci->domain = (unsigned int)d->attr[NV_PCI_DOMAIN];
	pci->bus = (unsigned int)d->attr[NV_PCI_BUS];
	pci->device = (unsigned int)d->attr[NV_PCI_DEVICE];
	pci->pciDeviceId = (unsigned int)d->attr[NV_PCI_IDS];
	pci->pciSubSystemId = (unsigned int)d->attr[NV_PCI_SUBSYS];
	pci->baseClass = 0x03;	/* display controller */
	pci->subClass = 0x02;	/* 3D controller, as a compute GPU is */
	snprintf(pci->busId, sizeof(pci->busId), NVML_DEVICE_PCI_BUS_ID_FMT,
		 pci->domain, pci->bus & 0xff, pci->device & 0xff);
	return NVML_SUCCESS;
}

/* ---- what the device is doing for this VM ----------------------------- */

static nvmlReturn_t usage(struct nvmlDevice_st *d, struct pvgpu_device_usage_rep *rep)
{
	struct pvgpu_device_usage_req req = { .device = d->remote };

	memset(rep, 0, sizeof(*rep));
	return nv_status(pvgpu_call_device_usage(d->client, &req, rep));
}

nvmlReturn_t DECLDIR nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	struct pvgpu_device_usage_rep rep;
	nvmlReturn_t r;

	DEVICE(device, d);
	if (!memory)
		return NVML_ERROR_INVALID_ARGUMENT;
	r = usage(d, &rep);
	if (r != NVML_SUCCESS)
		return r;
	memory->total = rep.total;
	memory->used = rep.used;
	memory->free = rep.total > rep.used ? rep.total - rep.used : 0;
	return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
	struct pvgpu_device_usage_rep rep;
	nvmlReturn_t r;

	DEVICE(device, d);
	if (!memory)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (memory->version != nvmlMemory_v2)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	r = usage(d, &rep);
	if (r != NVML_SUCCESS)
		return r;
	memory->total = rep.total;
	memory->reserved = 0;
	memory->used = rep.used;
	memory->free = rep.total > rep.used ? rep.total - rep.used : 0;
	return NVML_SUCCESS;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * gpu: the share of the wall time since the previous call (or the first
 * call's own moment, which gives 0) that this VM's sessions had kernels on
 * the GPU, as the backend's scheduler counts it; the VM's time over all its
 * GPUs, so exact for a VM of one GPU.  memory: how busy the memory
 * controller was is not known here, and is reported as 0.
 */
nvmlReturn_t DECLDIR nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
	struct pvgpu_device_usage_rep rep;
	uint64_t wall, busy = 0, span;
	nvmlReturn_t r;

	DEVICE(device, d);
	if (!utilization)
		return NVML_ERROR_INVALID_ARGUMENT;
	r = usage(d, &rep);
	if (r != NVML_SUCCESS)
		return r;
	wall = now_ns();
	pthread_mutex_lock(&d->sample_lock);
	span = d->sample_wall_ns ? wall - d->sample_wall_ns : 0;
	if (span && rep.gpu_ns > d->sample_gpu_ns)	/* sessions ending lower it */
		busy = rep.gpu_ns - d->sample_gpu_ns;
	d->sample_gpu_ns = rep.gpu_ns;
	d->sample_wall_ns = wall;
	pthread_mutex_unlock(&d->sample_lock);
	utilization->gpu = span ? (unsigned int)(busy >= span ? 100 : busy * 100 / span) : 0;
	utilization->memory = 0;
	return NVML_SUCCESS;
}

/* The VM's processes on the device: pid and memory, in one of three layouts. */
static nvmlReturn_t processes(nvmlDevice_t device, unsigned int *count,
			      void *infos, int version)
{
	struct pvgpu_device_usage_rep rep;
	nvmlReturn_t r;
	unsigned int n;

	DEVICE(device, d);
	if (!count)
		return NVML_ERROR_INVALID_ARGUMENT;
	r = usage(d, &rep);
	if (r != NVML_SUCCESS)
		return r;
	n = rep.pids_count < rep.pid_mem_count ? rep.pids_count : rep.pid_mem_count;
	if (*count < n || (n && !infos)) {
		*count = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	for (unsigned int i = 0; i < n; i++) {
		if (version == 1) {
			nvmlProcessInfo_v1_t *p = (nvmlProcessInfo_v1_t *)infos + i;

			p->pid = rep.pids[i];
			p->usedGpuMemory = rep.pid_mem[i];
		} else {
			nvmlProcessInfo_t *p = (nvmlProcessInfo_t *)infos + i;

			p->pid = rep.pids[i];
			p->usedGpuMemory = rep.pid_mem[i];
			p->gpuInstanceId = 0xffffffffu;
			p->computeInstanceId = 0xffffffffu;
		}
	}
	*count = n;
	return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_v1_t *infos)
{
	return processes(device, infoCount, infos, 1);
}

nvmlReturn_t DECLDIR nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_v2_t *infos)
{
	return processes(device, infoCount, infos, 2);
}

nvmlReturn_t DECLDIR nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos)
{
	return processes(device, infoCount, infos, 3);
}

/* pvgpu runs no graphics: none, for any version. */
static nvmlReturn_t no_processes(nvmlDevice_t device, unsigned int *count)
{
	DEVICE(device, d);
	(void)d;
	if (!count)
		return NVML_ERROR_INVALID_ARGUMENT;
	*count = 0;
	return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_v1_t *infos)
{
	(void)infos;
	return no_processes(device, infoCount);
}

nvmlReturn_t DECLDIR nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_v2_t *infos)
{
	(void)infos;
	return no_processes(device, infoCount);
}

nvmlReturn_t DECLDIR nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos)
{
	(void)infos;
	return no_processes(device, infoCount);
}
