/*
 * runtime_module.c - the registration calls nvcc puts into every program.
 *
 * Each translation unit nvcc compiles registers its fat binary from a
 * constructor, kernels or not, so a program cannot even start without
 * these symbols.  Until kernels are forwarded (DESIGN §3, a later issue)
 * they only hand out and take back a handle; nothing is sent.
 */
#include <stdlib.h>

#include "runtime.h"

/* Not in the public headers (crt/host_runtime.h declares them for nvcc). */
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
void __cudaUnregisterFatBinary(void **fatCubinHandle);
char __cudaInitModule(void **fatCubinHandle);

void **__cudaRegisterFatBinary(void *fatCubin)
{
	void **handle = malloc(sizeof(*handle));

	/* The program keeps this and gives it back; NULL is tolerated too. */
	if (handle)
		*handle = fatCubin;
	return handle;
}

void __cudaRegisterFatBinaryEnd(void **fatCubinHandle)
{
	(void)fatCubinHandle;
}

void __cudaUnregisterFatBinary(void **fatCubinHandle)
{
	free(fatCubinHandle);
}

char __cudaInitModule(void **fatCubinHandle)
{
	(void)fatCubinHandle;
	return 1;
}
