/*
 * failure_twins.c - TEST ONLY: kernels that hang or crash the worker, for
 * tests/integration/test_failure.py (the call watchdog, a worker that
 * dies).  They have no CUDA source: the test uploads a PTX image that
 * declares kernels by these names, and the sim runs these twins for them.
 *
 * Nothing here is reachable in production: twins exist only in the sim
 * executor (a CI fixture), and only in plugins the operator names in
 * PVGPU_SIM_TWINS when starting pvgpud; a guest can name a kernel, never
 * load a twin.
 */
#include <stdlib.h>
#include <unistd.h>

#include "sim_twins.h"

/* A kernel that never ends: the worker sleeps in it until it is killed. */
static void hang_twin(const struct pvgpu_sim_launch *l)
{
	(void)l;
	for (;;)
		pause();
}

/*
 * A worker that crashes mid-kernel.  abort(), not a wild pointer: the
 * sanitizer build reports SIGSEGV as an error of its own, and this crash
 * is the test's intent, not a bug.
 */
static void crash_twin(const struct pvgpu_sim_launch *l)
{
	(void)l;
	abort();
}

const uint32_t pvgpu_sim_twin_abi = PVGPU_SIM_TWIN_ABI;

const struct pvgpu_sim_twin pvgpu_sim_twins[] = {
	{ "pvgpu_test_hang", hang_twin },
	{ "pvgpu_test_crash", crash_twin },
	{ NULL, NULL },
};
