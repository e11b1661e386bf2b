/*
 * cuda_tensormap.c - TMA descriptors (cuTensorMapEncodeTiled/Im2col).
 *
 * The 128-byte CUtensorMap is NVIDIA's own encoding, made by the driver
 * on the backend (ops.spec tensor_map_encode); the guest sends the fields
 * and copies back the bytes.  The descriptor then travels to kernels as a
 * parameter, like any other value.
 */
#include <string.h>

#include "cuda_internal.h"	/* cuda.h, as the driver is built */
#include "pvgpu_guest.h"

static CUresult encode(struct pvgpu_tensor_map_encode_req *req, CUtensorMap *map,
		       const cuuint64_t *dims, const cuuint64_t *strides,
		       const cuuint32_t *elem_strides)
{
	struct pvgpu_tensor_map_encode_rep rep = { 0 };
	uint32_t r = req->rank;
	struct cu_op op;
	CUresult res;

	if (!map || !dims || !elem_strides || (r > 1 && !strides) || r < 1 || r > 5)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(req->dims, dims, r * sizeof(req->dims[0]));
	req->dims_count = r;
	if (r > 1)
		memcpy(req->strides, strides, (r - 1) * sizeof(req->strides[0]));
	req->strides_count = r - 1;
	memcpy(req->elem_strides, elem_strides, r * sizeof(req->elem_strides[0]));
	req->elem_strides_count = r;
	res = cu_op_current(&op);
	if (res)
		return res;
	res = cu_status(pvgpu_call_tensor_map_encode(op.client, req, &rep));
	cu_op_end(&op);
	if (!res && rep.desc_count != 16)
		res = CUDA_ERROR_UNKNOWN;
	if (!res)
		memcpy(map, rep.desc, sizeof(*map));
	return res;
}

CUresult CUDAAPI cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType dtype,
					cuuint32_t rank, void *address,
					const cuuint64_t *dims, const cuuint64_t *strides,
					const cuuint32_t *box, const cuuint32_t *elem_strides,
					CUtensorMapInterleave interleave,
					CUtensorMapSwizzle swizzle,
					CUtensorMapL2promotion l2,
					CUtensorMapFloatOOBfill oob)
{
	struct pvgpu_tensor_map_encode_req req = {
		.dtype = dtype, .rank = rank, .address = (uintptr_t)address,
		.interleave = interleave, .swizzle = swizzle, .l2 = l2, .oob = oob };

	if (!box || rank < 1 || rank > 5)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(req.box, box, rank * sizeof(req.box[0]));
	req.box_count = rank;
	return encode(&req, map, dims, strides, elem_strides);
}

CUresult CUDAAPI cuTensorMapEncodeIm2col(CUtensorMap *map, CUtensorMapDataType dtype,
					 cuuint32_t rank, void *address,
					 const cuuint64_t *dims, const cuuint64_t *strides,
					 const int *lower, const int *upper,
					 cuuint32_t channels, cuuint32_t pixels,
					 const cuuint32_t *elem_strides,
					 CUtensorMapInterleave interleave,
					 CUtensorMapSwizzle swizzle,
					 CUtensorMapL2promotion l2,
					 CUtensorMapFloatOOBfill oob)
{
	struct pvgpu_tensor_map_encode_req req = {
		.im2col = 1, .dtype = dtype, .rank = rank, .address = (uintptr_t)address,
		.channels = channels, .pixels = pixels,
		.interleave = interleave, .swizzle = swizzle, .l2 = l2, .oob = oob };

	if (!lower || !upper || rank < 3 || rank > 5)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(req.lower, lower, (rank - 2) * sizeof(req.lower[0]));
	memcpy(req.upper, upper, (rank - 2) * sizeof(req.upper[0]));
	req.lower_count = req.upper_count = rank - 2;
	return encode(&req, map, dims, strides, elem_strides);
}
