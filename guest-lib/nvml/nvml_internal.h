/*
 * nvml_internal.h - pvgpu's libnvidia-ml.so.1: the state its hand-written
 * entries share.  nvmlInit connects to every backend PVGPU_DEVICES (or
 * guest.conf's default) names, as libcuda.so.1 does, and fetches what
 * cannot change about each device; memory, GPU time and processes are
 * asked of the backend on each call (op device_usage), as this VM sees
 * them.
 */
#ifndef PVGPU_NVML_INTERNAL_H
#define PVGPU_NVML_INTERNAL_H

#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>
#include <pthread.h>
#include <stdint.h>

#include "client.h"

#define NV_MAX_DEVICES	64

/* The device attributes NVML needs, fetched at nvmlInit. */
enum nv_attr {
	NV_CC_MAJOR, NV_CC_MINOR, NV_PCI_BUS, NV_PCI_DEVICE, NV_PCI_DOMAIN,
	NV_PCI_IDS, NV_PCI_SUBSYS, NV_SM_COUNT, NV_CLOCK_KHZ, NV_MEM_CLOCK_KHZ,
	NV_MEM_BUS_WIDTH, NV_COMPUTE_MODE, NV_MULTI_GPU_BOARD, NV_BOARD_ID,
	NV_NATTRS
};

struct nvmlDevice_st {
	struct pvgpu_client *client;	/* its backend's connection */
	int remote;			/* index on that backend */
	int index;			/* index in this process */
	char name[256];
	unsigned char uuid[16];
	int have_uuid;
	int attr[NV_NATTRS];
	/* The last GPU-time sample, for nvmlDeviceGetUtilizationRates. */
	pthread_mutex_t sample_lock;
	uint64_t sample_gpu_ns, sample_wall_ns;
};

struct nv_state {
	pthread_mutex_t lock;		/* init, shutdown */
	int refs;			/* nvmlInit minus nvmlShutdown */
	int nclients;
	struct pvgpu_client **clients;
	int ndevices;
	struct nvmlDevice_st devices[NV_MAX_DEVICES];
	int cuda_version;		/* the backends' driver API version */
	char driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];	/* host's */
};

extern struct nv_state nv;

/* NVML_SUCCESS and *d for a handle of this process, else why not. */
nvmlReturn_t nv_device(nvmlDevice_t h, struct nvmlDevice_st **d);
/* A client status (CUresult or PVGPU_CLIENT_E*) as NVML says it. */
nvmlReturn_t nv_status(int32_t st);
/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it. */
void nv_uuid_string(const struct nvmlDevice_st *d, char out[48]);
/* Copy s into buf of len bytes: NVML_ERROR_INSUFFICIENT_SIZE if it does not fit. */
nvmlReturn_t nv_string(char *buf, unsigned int len, const char *s);

#endif
