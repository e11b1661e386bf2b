/*
 * Memory pools and stream-ordered allocation, as NVIDIA's
 * streamOrderedAllocation sample uses them: the device's default pool,
 * its release threshold, allocations from it on a stream, a pool of the
 * program's own with a size limit, made the device's current pool and
 * destroyed; what the pools say they hold along the way.
 */
#include "drv.h"

#define MiB (1ull << 20)

static cuuint64_t attr64(CUmemoryPool p, CUmemPool_attribute a)
{
	cuuint64_t v = 0;

	DRV(cuMemPoolGetAttribute(p, a, &v));
	return v;
}

int main(void)
{
	CUmemoryPool def, again, cur, mine;
	CUmemPoolProps props;
	CUmemAccess_flags access;
	CUmemLocation where;
	cuuint64_t threshold = ~0ull, zero = 0;
	CUdeviceptr a, b, c;
	unsigned int host[256];
	CUstream s;
	CUdevice dev;
	int reuse = -1;

	drv_begin("driver/mempool");
	drv_context();
	DRV(cuCtxGetDevice(&dev));
	DRV(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

	DRV(cuDeviceGetDefaultMemPool(&def, dev));
	DRV(cuDeviceGetDefaultMemPool(&again, dev));
	DRV(cuDeviceGetMemPool(&cur, dev));
	printf("default pool stable: %d, current: %d\n", def == again, cur == def);
	DRV(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse));
	printf("opportunistic reuse: %d\n", reuse);
	DRV(cuMemPoolSetAttribute(def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
	printf("release threshold is max: %d\n",
	       attr64(def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) == ~0ull);
	printf("set used current: %d\n",
	       (int)cuMemPoolSetAttribute(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &zero));

	DRV(cuMemAllocAsync(&a, 4 * MiB, s));
	DRV(cuMemAllocFromPoolAsync(&b, 2 * MiB, def, s));
	DRV(cuMemsetD32Async(a, 0x11, MiB, s));
	DRV(cuMemsetD32Async(b, 0x22, MiB / 2, s));
	DRV(cuMemcpyDtoDAsync(a + MiB, b + 1024, sizeof(host), s));
	DRV(cuMemcpyDtoHAsync(host, a + MiB, sizeof(host), s));
	DRV(cuStreamSynchronize(s));
	printf("copied through pool memory: %#x %#x\n", host[0], host[255]);
	DRV_EXPECT(host[0] == 0x22 && host[255] == 0x22);
	printf("used at least 6 MiB: %d\n",
	       attr64(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) >= 6 * MiB);
	DRV(cuMemFreeAsync(a, s));
	DRV(cuMemFreeAsync(b, s));
	DRV(cuStreamSynchronize(s));
	printf("used after free: %llu, high at least 6 MiB: %d\n",
	       (unsigned long long)attr64(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT),
	       attr64(def, CU_MEMPOOL_ATTR_USED_MEM_HIGH) >= 6 * MiB);
	DRV(cuMemPoolSetAttribute(def, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
	printf("high after reset: %llu\n",
	       (unsigned long long)attr64(def, CU_MEMPOOL_ATTR_USED_MEM_HIGH));
	DRV(cuMemPoolTrimTo(def, 0));

	memset(&props, 0, sizeof(props));
	props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	props.location.id = dev;
	props.maxSize = 64 * MiB;
	DRV(cuMemPoolCreate(&mine, &props));
	where.type = CU_MEM_LOCATION_TYPE_DEVICE;
	where.id = dev;
	DRV(cuMemPoolGetAccess(&access, mine, &where));
	printf("own device access: %d\n", (int)access);
	DRV(cuDeviceSetMemPool(dev, mine));
	DRV(cuDeviceGetMemPool(&cur, dev));
	printf("current is mine: %d\n", cur == mine);
	DRV(cuMemAllocAsync(&c, 8 * MiB, s));		/* from the current pool */
	printf("mine used at least 8 MiB: %d, default used: %llu\n",
	       attr64(mine, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) >= 8 * MiB,
	       (unsigned long long)attr64(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT));
	printf("past max size: %d\n", (int)cuMemAllocFromPoolAsync(&a, 128 * MiB, mine, s));
	DRV(cuMemFreeAsync(c, s));
	DRV(cuStreamSynchronize(s));
	DRV(cuDeviceSetMemPool(dev, def));
	DRV(cuMemPoolDestroy(mine));
	printf("destroy default: %d\n", (int)cuMemPoolDestroy(def));
	DRV(cuStreamDestroy(s));
	drv_pass();
}
