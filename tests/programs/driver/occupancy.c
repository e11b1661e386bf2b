/*
 * cuOccupancyMaxPotentialBlockSize(WithFlags), as matrixMulDrv and the
 * runtime's cudaOccupancyMaxPotentialBlockSize use it: without a callback,
 * with a callback of this program's (dynamic shared memory per block
 * size), with a block size limit.  The answer is checked the way a user
 * would: the block size fits the kernel, and the grid is that many blocks
 * per SM.  argv[1]: vecadd.fatbin.
 */
#include "drv.h"

static size_t smem_of(int block_size)
{
	return (size_t)block_size * 64;
}

static void check(CUfunction f, const char *what, int grid, int block, size_t smem,
		  unsigned flags)
{
	CUdevice dev;
	int per_sm = 0, sms = 0, max = 0;

	DRV(cuCtxGetDevice(&dev));
	DRV(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
	DRV(cuFuncGetAttribute(&max, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
	DRV(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&per_sm, f, block, smem, flags));
	printf("%s: block %d, grid %d, %d blocks per SM\n", what, block, grid, per_sm);
	DRV_EXPECT(block > 0 && block <= max);
	DRV_EXPECT(grid == per_sm * sms);
}

int main(int argc, char **argv)
{
	CUmodule mod;
	CUfunction f;
	size_t size;
	void *image;
	int grid, block;

	drv_begin("driver/occupancy");
	if (argc < 2) {
		printf("FAIL: usage: occupancy vecadd.fatbin\n");
		return 2;
	}
	drv_context();
	image = drv_read(argv[1], &size);
	DRV(cuModuleLoadData(&mod, image));
	DRV(cuModuleGetFunction(&f, mod, "vec_add"));

	DRV(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, NULL, 0, 0));
	check(f, "no callback", grid, block, 0, 0);
	DRV(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, NULL, 4096, 0));
	check(f, "4 KiB shared", grid, block, 4096, 0);
	DRV(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, smem_of, 0, 0));
	check(f, "callback", grid, block, smem_of(block), 0);
	DRV(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, NULL, 0, 200));
	check(f, "limit 200", grid, block, 0, 0);
	DRV_EXPECT(block <= 200);
	DRV(cuOccupancyMaxPotentialBlockSizeWithFlags(&grid, &block, f, smem_of, 0, 0,
						       CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE));
	check(f, "with flags", grid, block, smem_of(block), CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE);
	printf("no result: %d\n",
	       (int)cuOccupancyMaxPotentialBlockSize(NULL, &block, f, NULL, 0, 0));
	DRV(cuModuleUnload(mod));
	free(image);
	drv_pass();
}
