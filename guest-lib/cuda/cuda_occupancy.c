/*
 * cuda_occupancy.c - cuOccupancyMaxPotentialBlockSize(WithFlags), answered
 * in the guest.
 *
 * The caller may pass blockSizeToDynamicSMemSize, a function of its own
 * process: it can never cross the wire.  So the search is done here, as
 * the runtime's cudaOccupancyMaxPotentialBlockSize does it: every block
 * size from the largest the kernel and device allow down by a warp, each
 * asked of the backend's driver (cuOccupancyMaxActiveBlocksPerMultiprocessor
 * WithFlags, forwarded), keeping the one with the most resident threads.
 * Without a callback the dynamic shared memory is the constant given, and
 * the same search gives what the driver gives.
 */
#include "cuda_internal.h"	/* cuda.h, as the driver is built */

static CUresult potential_block_size(int *min_grid, int *block_size, CUfunction func,
				     CUoccupancyB2DSize smem_of, size_t smem,
				     int limit, unsigned int flags)
{
	int per_sm, warp, dev_max, sms, fn_max, best = 0, best_blocks = 0;
	long best_threads = 0;
	CUdevice dev;
	CUresult r;

	if (!min_grid || !block_size || !func || limit < 0)
		return CUDA_ERROR_INVALID_VALUE;
	r = cuCtxGetDevice(&dev);
	if (!r)
		r = cuDeviceGetAttribute(&per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev);
	if (!r)
		r = cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev);
	if (!r)
		r = cuDeviceGetAttribute(&dev_max, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, dev);
	if (!r)
		r = cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
	if (!r)
		r = cuFuncGetAttribute(&fn_max, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, func);
	if (r)
		return r;
	if (warp <= 0 || dev_max <= 0 || fn_max <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (!limit || limit > dev_max)
		limit = dev_max;
	if (limit > fn_max)
		limit = fn_max;
	for (int aligned = (limit + warp - 1) / warp * warp; aligned > 0; aligned -= warp) {
		int size = aligned < limit ? aligned : limit, blocks = 0;
		size_t dyn = smem_of ? smem_of(size) : smem;

		r = cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, func, size,
									 dyn, flags);
		if (r)
			return r;
		if ((long)blocks * size > best_threads) {
			best_threads = (long)blocks * size;
			best = size;
			best_blocks = blocks;
		}
		if (best_threads == per_sm)
			break;
	}
	*min_grid = best_blocks * sms;
	*block_size = best;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize,
						  CUfunction func,
						  CUoccupancyB2DSize blockSizeToDynamicSMemSize,
						  size_t dynamicSMemSize, int blockSizeLimit)
{
	return potential_block_size(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
				    dynamicSMemSize, blockSizeLimit, CU_OCCUPANCY_DEFAULT);
}

CUresult CUDAAPI cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGridSize, int *blockSize,
							   CUfunction func,
							   CUoccupancyB2DSize blockSizeToDynamicSMemSize,
							   size_t dynamicSMemSize, int blockSizeLimit,
							   unsigned int flags)
{
	return potential_block_size(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
				    dynamicSMemSize, blockSizeLimit, flags);
}
