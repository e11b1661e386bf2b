/*
 * nvml_init.c - pvgpu's libnvidia-ml.so.1: nvmlInit and nvmlShutdown, the
 * device list and handles, error strings and the system queries.
 *
 * The device list is built as libcuda.so.1 builds its own (every
 * PVGPU_DEVICES entry, "URI#N" for one GPU of a backend), so NVML's index
 * N and CUDA's device N are the same GPU.
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_env.h"
#include "debug.h"
#include "devices.h"
#include "nvml_internal.h"
#include "nvml_surface.h"
#include "pvgpu_guest.h"

struct nv_state nv = { .lock = PTHREAD_MUTEX_INITIALIZER };

int pvgpu_nvml_unsupported(const char *name)
{
	pvgpu_debug("%s: not supported by pvgpu", name);
	return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nv_status(int32_t st)
{
	switch (st) {
	case CUDA_SUCCESS:			return NVML_SUCCESS;
	case PVGPU_CLIENT_EIO:
	case PVGPU_CLIENT_EPROTO:		return NVML_ERROR_GPU_IS_LOST;
	case CUDA_ERROR_INVALID_DEVICE:
	case CUDA_ERROR_INVALID_VALUE:		return NVML_ERROR_INVALID_ARGUMENT;
	case CUDA_ERROR_NOT_SUPPORTED:		return NVML_ERROR_NOT_SUPPORTED;
	case CUDA_ERROR_NOT_PERMITTED:		return NVML_ERROR_NO_PERMISSION;
	case CUDA_ERROR_NO_DEVICE:		return NVML_ERROR_NOT_FOUND;
	default:				return NVML_ERROR_UNKNOWN;
	}
}

nvmlReturn_t nv_string(char *buf, unsigned int len, const char *s)
{
	size_t n = strlen(s);

	if (!buf)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (n >= len)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(buf, s, n + 1);
	return NVML_SUCCESS;
}

nvmlReturn_t nv_device(nvmlDevice_t h, struct nvmlDevice_st **d)
{
	uintptr_t p = (uintptr_t)h, base = (uintptr_t)nv.devices;

	if (!nv.refs)
		return NVML_ERROR_UNINITIALIZED;
	if (!h || p < base || p >= base + sizeof(nv.devices) ||
	    (p - base) % sizeof(nv.devices[0]) ||
	    h->index >= nv.ndevices)
		return NVML_ERROR_INVALID_ARGUMENT;
	*d = h;
	return NVML_SUCCESS;
}

/* The attributes behind enum nv_attr, in its order. */
static const int32_t nv_attr_ids[NV_NATTRS] = {
	[NV_CC_MAJOR]		= CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
	[NV_CC_MINOR]		= CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
	[NV_PCI_BUS]		= CU_DEVICE_ATTRIBUTE_PCI_BUS_ID,
	[NV_PCI_DEVICE]		= CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID,
	[NV_PCI_DOMAIN]		= CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID,
	[NV_PCI_IDS]		= CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID,
	[NV_PCI_SUBSYS]		= CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID,
	[NV_SM_COUNT]		= CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
	[NV_CLOCK_KHZ]		= CU_DEVICE_ATTRIBUTE_CLOCK_RATE,
	[NV_MEM_CLOCK_KHZ]	= CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE,
	[NV_MEM_BUS_WIDTH]	= CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH,
	[NV_COMPUTE_MODE]	= CU_DEVICE_ATTRIBUTE_COMPUTE_MODE,
	[NV_MULTI_GPU_BOARD]	= CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD,
	[NV_BOARD_ID]		= CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID,
};

/* What cannot change about a device, in a few calls. */
static void fetch_device(struct nvmlDevice_st *d)
{
	struct pvgpu_device_get_attributes_req areq = { .device = d->remote };
	struct pvgpu_device_get_attributes_rep arep;
	struct pvgpu_device_get_name_req nreq = { .device = d->remote };
	struct pvgpu_device_get_name_rep nrep;
	struct pvgpu_device_get_uuid_req ureq = { .device = d->remote };
	struct pvgpu_device_get_uuid_rep urep;

	memset(&arep, 0, sizeof(arep));
	areq.attrs_count = NV_NATTRS;
	memcpy(areq.attrs, nv_attr_ids, sizeof(nv_attr_ids));
	if (!pvgpu_call_device_get_attributes(d->client, &areq, &arep) &&
	    arep.values_count == NV_NATTRS) {
		memcpy(d->attr, arep.values, sizeof(d->attr));
	} else {
		/* An attribute the backend's GPU does not know: one at a time. */
		for (int a = 0; a < NV_NATTRS; a++) {
			areq.attrs_count = 1;
			areq.attrs[0] = nv_attr_ids[a];
			memset(&arep, 0, sizeof(arep));
			d->attr[a] = 0;
			if (!pvgpu_call_device_get_attributes(d->client, &areq, &arep) &&
			    arep.values_count == 1)
				d->attr[a] = arep.values[0];
		}
	}
	memset(&nrep, 0, sizeof(nrep));
	if (!pvgpu_call_device_get_name(d->client, &nreq, &nrep))
		snprintf(d->name, sizeof(d->name), "%.*s", (int)nrep.name_len,
			 nrep.name);
	else
		snprintf(d->name, sizeof(d->name), "pvgpu device");
	memset(&urep, 0, sizeof(urep));
	d->have_uuid = !pvgpu_call_device_get_uuid(d->client, &ureq, &urep) &&
		       urep.uuid_len == 16;
	if (d->have_uuid)
		memcpy(d->uuid, urep.uuid, 16);
}

/* The client for uri, opened once per nvmlInit; NULL where unreachable. */
static struct pvgpu_client *client_of(const char *uri, char **uris,
				      const struct pvgpu_client_config *cfg)
{
	char err[256] = "";

	for (int i = 0; i < nv.nclients; i++)
		if (!strcmp(uris[i], uri))
			return nv.clients[i];
	uris[nv.nclients] = strdup(uri);
	if (!uris[nv.nclients])
		return NULL;
	if (pvgpu_client_open(uri, cfg, &nv.clients[nv.nclients], err, sizeof(err))) {
		nv.clients[nv.nclients] = NULL;
		pvgpu_debug("cannot use %s: %s", uri, err);
	}
	return nv.clients[nv.nclients++];
}

static void add_device(struct pvgpu_client *c, int remote)
{
	struct nvmlDevice_st *d;

	for (int i = 0; i < nv.ndevices; i++)
		if (nv.devices[i].client == c && nv.devices[i].remote == remote)
			return;
	if (nv.ndevices >= NV_MAX_DEVICES)
		return;
	d = &nv.devices[nv.ndevices];
	memset(d, 0, sizeof(*d));
	pthread_mutex_init(&d->sample_lock, NULL);
	d->client = c;
	d->remote = remote;
	d->index = nv.ndevices++;
}

static void disconnect(void)
{
	for (int i = 0; i < nv.ndevices; i++)
		pthread_mutex_destroy(&nv.devices[i].sample_lock);
	for (int i = 0; i < nv.nclients; i++)
		if (nv.clients[i])
			pvgpu_client_close(nv.clients[i]);
	free(nv.clients);
	nv.clients = NULL;
	nv.nclients = 0;
	nv.ndevices = 0;
}

/* Connect and build the device list: NVML_SUCCESS or why not. */
static nvmlReturn_t connect_all(void)
{
	struct pvgpu_client_config cfg;
	struct pvgpu_device_entry *entries;
	char **uris;
	int n, reached = 0;

	pvgpu_config_from_env(&cfg);
	n = pvgpu_devices_parse(cfg.devices[0] ? cfg.devices : PVGPU_CLIENT_DEFAULT_DEVICES,
				&entries);
	nv.clients = n < 0 ? NULL : calloc((size_t)n + 1, sizeof(*nv.clients));
	uris = nv.clients ? calloc((size_t)n + 1, sizeof(*uris)) : NULL;
	if (!uris) {
		free(entries);
		free(nv.clients);
		nv.clients = NULL;
		return NVML_ERROR_MEMORY;
	}
	for (int i = 0; i < n; i++) {
		struct pvgpu_client *c = client_of(entries[i].uri, uris, &cfg);
		int first, end;

		if (!c)
			continue;
		reached = 1;
		pvgpu_device_entry_gpus(&entries[i], pvgpu_client_info(c)->device_count,
					&first, &end);
		for (int g = first; g < end; g++)
			add_device(c, g);
	}
	for (int i = 0; i < nv.nclients; i++)
		free(uris[i]);
	free(uris);
	free(entries);
	if (!reached) {
		disconnect();
		return NVML_ERROR_DRIVER_NOT_LOADED;
	}
	for (int i = 0; i < nv.ndevices; i++)
		fetch_device(&nv.devices[i]);
	/* The driver's versions, from the first backend reached. */
	for (int i = 0; i < nv.nclients; i++) {
		struct pvgpu_driver_get_version_req vreq;
		struct pvgpu_driver_get_version_rep vrep;
		struct pvgpu_host_driver_version_req hreq;
		struct pvgpu_host_driver_version_rep hrep;

		if (!nv.clients[i])
			continue;
		memset(&vreq, 0, sizeof(vreq));
		memset(&vrep, 0, sizeof(vrep));
		if (!pvgpu_call_driver_get_version(nv.clients[i], &vreq, &vrep))
			nv.cuda_version = vrep.version;
		memset(&hreq, 0, sizeof(hreq));
		memset(&hrep, 0, sizeof(hrep));
		if (!pvgpu_call_host_driver_version(nv.clients[i], &hreq, &hrep))
			snprintf(nv.driver, sizeof(nv.driver), "%.*s",
				 (int)hrep.version_len, hrep.version);
		break;
	}
	return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlInitWithFlags(unsigned int flags)
{
	nvmlReturn_t r = NVML_SUCCESS;

	pthread_mutex_lock(&nv.lock);
	if (!nv.refs) {
		r = connect_all();
		if (r == NVML_SUCCESS && !nv.ndevices && !(flags & NVML_INIT_FLAG_NO_GPUS)) {
			disconnect();
			r = NVML_ERROR_NOT_FOUND;
		}
	}
	if (r == NVML_SUCCESS)
		nv.refs++;
	pthread_mutex_unlock(&nv.lock);
	return r;
}

nvmlReturn_t DECLDIR nvmlInit_v2(void)
{
	return nvmlInitWithFlags(0);
}

nvmlReturn_t DECLDIR nvmlInit(void)
{
	return nvmlInitWithFlags(0);
}

nvmlReturn_t DECLDIR nvmlShutdown(void)
{
	nvmlReturn_t r = NVML_SUCCESS;

	pthread_mutex_lock(&nv.lock);
	if (!nv.refs)
		r = NVML_ERROR_UNINITIALIZED;
	else if (!--nv.refs)
		disconnect();
	pthread_mutex_unlock(&nv.lock);
	return r;
}

const DECLDIR char *nvmlErrorString(nvmlReturn_t result)
{
	for (size_t i = 0; i < pvgpu_nvml_error_count; i++)
		if (pvgpu_nvml_errors[i].code == (int)result)
			return pvgpu_nvml_errors[i].text;
	return "Unknown Error";
}

/* ---- the system ------------------------------------------------------- */

nvmlReturn_t DECLDIR nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
	if (!nv.refs)
		return NVML_ERROR_UNINITIALIZED;
	if (!nv.driver[0])	/* the sim, or a host without NVIDIA's module */
		return NVML_ERROR_NOT_SUPPORTED;
	return nv_string(version, length, nv.driver);
}

nvmlReturn_t DECLDIR nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
	char v[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE + 16];

	if (!nv.refs)
		return NVML_ERROR_UNINITIALIZED;
	if (!nv.driver[0] || !nv.cuda_version)
		return NVML_ERROR_NOT_SUPPORTED;
	/* NVIDIA's form: the CUDA major version, then the driver's. */
	snprintf(v, sizeof(v), "%d.%s", nv.cuda_version / 1000, nv.driver);
	return nv_string(version, length, v);
}

nvmlReturn_t DECLDIR nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
	if (!cudaDriverVersion)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!nv.refs)
		return NVML_ERROR_UNINITIALIZED;
	if (!nv.cuda_version)
		return NVML_ERROR_NOT_SUPPORTED;
	*cudaDriverVersion = nv.cuda_version;
	return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
	return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

/* ---- devices and handles ---------------------------------------------- */

nvmlReturn_t DECLDIR nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
	if (!deviceCount)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!nv.refs)
		return NVML_ERROR_UNINITIALIZED;
	*deviceCount = (unsigned int)nv.ndevices;
	return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetCount(unsigned int *deviceCount)
{
	return nvmlDeviceGetCount_v2(deviceCount);
}

nvmlReturn_t DECLDIR nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	if (!nv.refs)
		return NVML_ERROR_UNINITIALIZED;
	if (!device || index >= (unsigned int)nv.ndevices)
		return NVML_ERROR_INVALID_ARGUMENT;
	*device = &nv.devices[index];
	return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
	return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t DECLDIR nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
	char s[48];

	if (!nv.refs)
		return NVML_ERROR_UNINITIALIZED;
	if (!uuid || !device)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (int i = 0; i < nv.ndevices; i++) {
		if (!nv.devices[i].have_uuid)
			continue;
		nv_uuid_string(&nv.devices[i], s);
		if (!strcasecmp(s, uuid)) {
			*device = &nv.devices[i];
			return NVML_SUCCESS;
		}
	}
	return NVML_ERROR_NOT_FOUND;
}

/*
 * "domain:bus:device.function", "domain:bus:device" or "bus:device.function"
 * (hex), as NVIDIA's accepts them: 0 and the numbers, else -1.
 */
static int parse_bus_id(const char *s, unsigned int *dom, unsigned int *bus,
			unsigned int *dev, unsigned int *fn)
{
	char tail;

	*fn = 0;
	if (sscanf(s, "%x:%x:%x.%x%c", dom, bus, dev, fn, &tail) == 4)
		return 0;
	if (sscanf(s, "%x:%x:%x%c", dom, bus, dev, &tail) == 3)
		return 0;
	*dom = 0;
	if (sscanf(s, "%x:%x.%x%c", bus, dev, fn, &tail) == 3)
		return 0;
	return -1;
}

nvmlReturn_t DECLDIR nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
	unsigned int dom, bus, dev, fn;

	if (!nv.refs)
		return NVML_ERROR_UNINITIALIZED;
	if (!pciBusId || !device || parse_bus_id(pciBusId, &dom, &bus, &dev, &fn))
		return NVML_ERROR_INVALID_ARGUMENT;
	for (int i = 0; i < nv.ndevices; i++) {
		const struct nvmlDevice_st *d = &nv.devices[i];

		if ((unsigned int)d->attr[NV_PCI_DOMAIN] == dom &&
		    (unsigned int)d->attr[NV_PCI_BUS] == bus &&
		    (unsigned int)d->attr[NV_PCI_DEVICE] == dev && fn == 0) {
			*device = &nv.devices[i];
			return NVML_SUCCESS;
		}
	}
	return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t DECLDIR nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
	return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}
