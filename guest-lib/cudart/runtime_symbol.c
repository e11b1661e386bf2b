/*
 * runtime_symbol.c - __device__ and __constant__ variables by their host
 * shadow: cudaMemcpyToSymbol/FromSymbol (and Async), cudaGetSymbolAddress,
 * cudaGetSymbolSize.
 *
 * A symbol resolves, in the current device's context, to its module's
 * variable (module_get_global, cached; runtime_module.c); a copy is then an
 * ordinary copy at its address plus offset, which the allocation map knows
 * (the variable is tracked there when it resolves).
 */
#include <cuda.h>

#include "runtime_module.h"

/* What --default-stream per-thread builds call (cuda_runtime_api.h). */
cudaError_t cudaMemcpyToSymbol_ptds(const void *symbol, const void *src,
				    size_t count, size_t offset,
				    enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyFromSymbol_ptds(void *dst, const void *symbol,
				      size_t count, size_t offset,
				      enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void *symbol, const void *src,
					 size_t count, size_t offset,
					 enum cudaMemcpyKind kind,
					 cudaStream_t stream);
cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void *dst, const void *symbol,
					   size_t count, size_t offset,
					   enum cudaMemcpyKind kind,
					   cudaStream_t stream);

/* The symbol's device range in the current device's context. */
static cudaError_t symbol_range(const void *symbol, uint64_t *dptr,
				uint64_t *size, int32_t *deferred)
{
	struct pvgpu_var_state *vs;
	struct pvgpu_var *v;
	struct pvgpu_op op;
	cudaError_t err;
	int32_t st;

	err = pvgpu_init();
	if (err)
		return err;
	v = pvgpu_var_find(symbol);
	if (!v)
		return cudaErrorInvalidSymbol;
	err = pvgpu_op_begin(&op, pvgpu_current_device(), 1);
	if (err)
		return err;
	st = pvgpu_var_resolve(&op, v, &vs, deferred);
	if (!st) {
		*dptr = vs->dptr;
		*size = vs->size;
	}
	pvgpu_op_end(&op);
	if (st == CUDA_ERROR_NOT_FOUND)
		return cudaErrorInvalidSymbol;	/* registered, not in the image */
	return pvgpu_error_from_status(st);
}

/* Where in the symbol [offset, offset + count) lies; checked like NVIDIA's. */
static cudaError_t symbol_at(const void *symbol, size_t count, size_t offset,
			     void **addr, int32_t *deferred)
{
	uint64_t dptr = 0, size = 0;
	cudaError_t err;

	err = symbol_range(symbol, &dptr, &size, deferred);
	if (err)
		return err;
	if (offset > size || count > size - offset)
		return cudaErrorInvalidValue;
	*addr = (void *)(uintptr_t)(dptr + offset);
	return cudaSuccess;
}

/* err, else an earlier async error that came back while resolving. */
static cudaError_t finish(cudaError_t err, int32_t deferred)
{
	if (!err && deferred)
		err = pvgpu_error_from_status(deferred);
	return pvgpu_record(err);
}

static cudaError_t to_symbol(const void *symbol, const void *src, size_t count,
			     size_t offset, enum cudaMemcpyKind kind,
			     cudaStream_t stream, int async)
{
	int32_t deferred = 0;
	cudaError_t err;
	void *dst;

	if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToDevice &&
	    kind != cudaMemcpyDefault)
		return pvgpu_record(cudaErrorInvalidMemcpyDirection);
	err = symbol_at(symbol, count, offset, &dst, &deferred);
	if (!err)
		err = async ? cudaMemcpyAsync(dst, src, count, kind, stream) :
			      cudaMemcpy(dst, src, count, kind);
	return finish(err, deferred);
}

static cudaError_t from_symbol(void *dst, const void *symbol, size_t count,
			       size_t offset, enum cudaMemcpyKind kind,
			       cudaStream_t stream, int async)
{
	int32_t deferred = 0;
	cudaError_t err;
	void *src;

	if (kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice &&
	    kind != cudaMemcpyDefault)
		return pvgpu_record(cudaErrorInvalidMemcpyDirection);
	err = symbol_at(symbol, count, offset, &src, &deferred);
	if (!err)
		err = async ? cudaMemcpyAsync(dst, src, count, kind, stream) :
			      cudaMemcpy(dst, src, count, kind);
	return finish(err, deferred);
}

cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src,
			       size_t count, size_t offset,
			       enum cudaMemcpyKind kind)
{
	return to_symbol(symbol, src, count, offset, kind, 0, 0);
}

cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t count,
				 size_t offset, enum cudaMemcpyKind kind)
{
	return from_symbol(dst, symbol, count, offset, kind, 0, 0);
}

cudaError_t cudaMemcpyToSymbolAsync(const void *symbol, const void *src,
				    size_t count, size_t offset,
				    enum cudaMemcpyKind kind, cudaStream_t stream)
{
	return to_symbol(symbol, src, count, offset, kind, stream, 1);
}

cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const void *symbol,
				      size_t count, size_t offset,
				      enum cudaMemcpyKind kind,
				      cudaStream_t stream)
{
	return from_symbol(dst, symbol, count, offset, kind, stream, 1);
}

cudaError_t cudaMemcpyToSymbol_ptds(const void *symbol, const void *src,
				    size_t count, size_t offset,
				    enum cudaMemcpyKind kind)
{
	return to_symbol(symbol, src, count, offset, kind, 0, 0);
}

cudaError_t cudaMemcpyFromSymbol_ptds(void *dst, const void *symbol,
				      size_t count, size_t offset,
				      enum cudaMemcpyKind kind)
{
	return from_symbol(dst, symbol, count, offset, kind, 0, 0);
}

cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void *symbol, const void *src,
					 size_t count, size_t offset,
					 enum cudaMemcpyKind kind,
					 cudaStream_t stream)
{
	return to_symbol(symbol, src, count, offset, kind, stream, 1);
}

cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void *dst, const void *symbol,
					   size_t count, size_t offset,
					   enum cudaMemcpyKind kind,
					   cudaStream_t stream)
{
	return from_symbol(dst, symbol, count, offset, kind, stream, 1);
}

cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol)
{
	uint64_t dptr = 0, size = 0;
	int32_t deferred = 0;
	cudaError_t err;

	if (!devPtr)
		return pvgpu_record(cudaErrorInvalidValue);
	err = symbol_range(symbol, &dptr, &size, &deferred);
	if (!err)
		*devPtr = (void *)(uintptr_t)dptr;
	return finish(err, deferred);
}

cudaError_t cudaGetSymbolSize(size_t *size, const void *symbol)
{
	uint64_t dptr = 0, sz = 0;
	int32_t deferred = 0;
	cudaError_t err;

	if (!size)
		return pvgpu_record(cudaErrorInvalidValue);
	err = symbol_range(symbol, &dptr, &sz, &deferred);
	if (!err)
		*size = (size_t)sz;
	return finish(err, deferred);
}
