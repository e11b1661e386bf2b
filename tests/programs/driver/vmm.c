/*
 * Virtual memory management, as NVIDIA's vectorAddMMAP sample and
 * PyTorch's expandable segments use it: the allocation granularity,
 * physical memory made with cuMemCreate, an address range reserved and
 * two pieces mapped into it back to back, access given, a kernel and
 * copies on the mapped addresses, the handle found again from an address,
 * then everything unmapped, released and freed in order.
 * argv[1]: vecadd.fatbin.
 */
#include "drv.h"

#define N 4096

int main(int argc, char **argv)
{
	CUmemGenericAllocationHandle h1, h2, again;
	CUmemAllocationProp prop, got;
	CUmemAccessDesc access;
	CUmemLocation where;
	CUdeviceptr va, a, b, c;
	unsigned long long flags = 0;
	size_t gran = 0, size;
	float host[N];
	CUmodule mod;
	CUfunction f;
	CUdevice dev;
	void *image;
	int n = N;
	void *args[] = { &a, &b, &c, &n };

	drv_begin("driver/vmm");
	if (argc < 2) {
		printf("FAIL: usage: vmm vecadd.fatbin\n");
		return 2;
	}
	/* No context is current yet: NVIDIA's driver answers this without
	 * one (XLA asks so). */
	size_t early = 0;

	DRV(cuInit(0));
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	DRV(cuMemGetAllocationGranularity(&early, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	drv_context();
	DRV(cuCtxGetDevice(&dev));
	image = drv_read(argv[1], &size);
	DRV(cuModuleLoadData(&mod, image));
	DRV(cuModuleGetFunction(&f, mod, "vec_add"));

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = dev;
	DRV(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	printf("granularity a power of two of at least 64 KiB: %d\n",
	       gran >= 65536 && !(gran & (gran - 1)));
	printf("the same without a context: %d\n", early == gran);
	DRV(cuMemCreate(&h1, gran, &prop, 0));
	DRV(cuMemCreate(&h2, gran, &prop, 0));
	DRV(cuMemAddressReserve(&va, 4 * gran, 0, 0, 0));
	DRV(cuMemMap(va, gran, 0, h1, 0));
	DRV(cuMemMap(va + gran, gran, 0, h2, 0));
	access.location = prop.location;
	access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	DRV(cuMemSetAccess(va, 2 * gran, &access, 1));
	where = prop.location;
	DRV(cuMemGetAccess(&flags, &where, va + gran));
	printf("access: %llu\n", flags);
	printf("map twice: %d\n", (int)cuMemMap(va, gran, 0, h2, 0));

	/* a, b in the first piece, c in the second. */
	a = va;
	b = va + N * sizeof(float);
	c = va + gran;
	for (int i = 0; i < N; i++)
		host[i] = (float)i;
	DRV(cuMemcpyHtoD(a, host, sizeof(host)));
	DRV(cuMemsetD32(b, 0x40000000, N));		/* 2.0f */
	DRV(cuLaunchKernel(f, N / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
	DRV(cuMemcpyDtoH(host, c, sizeof(host)));
	printf("computed in mapped memory: %.1f %.1f\n", host[1], host[N - 1]);
	DRV_EXPECT(host[1] == 3.0f && host[N - 1] == (float)(N + 1));

	/* One copy across the seam of the two pieces (XLA's allocator maps
	 * its pool piece by piece and copies across them). */
	DRV(cuMemcpyDtoD(va + gran - 2 * sizeof(float), a, 4 * sizeof(float)));
	DRV(cuMemcpyDtoH(host, va + gran - 2 * sizeof(float), 4 * sizeof(float)));
	printf("across the seam: %.1f %.1f %.1f %.1f\n", host[0], host[1], host[2], host[3]);
	DRV_EXPECT(host[0] == 0.0f && host[3] == 3.0f);
	printf("past the mapped range: %d\n",
	       (int)cuMemcpyDtoH(host, va + 2 * gran - sizeof(float), 2 * sizeof(float)));

	DRV(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)(c + 64)));
	memset(&got, 0, sizeof(got));
	DRV(cuMemGetAllocationPropertiesFromHandle(&got, again));
	printf("properties: type %d, device ours %d\n", (int)got.type,
	       got.location.type == CU_MEM_LOCATION_TYPE_DEVICE && got.location.id == dev);
	DRV(cuMemRelease(again));

	DRV(cuMemUnmap(va, 2 * gran));
	DRV(cuMemRelease(h1));
	DRV(cuMemRelease(h2));
	DRV(cuMemAddressFree(va, 4 * gran));
	DRV(cuModuleUnload(mod));
	free(image);
	drv_pass();
}
