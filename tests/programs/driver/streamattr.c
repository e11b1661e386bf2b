/*
 * Stream attributes (cuStreamSetAttribute / cuStreamGetAttribute): the L2
 * access policy window, the synchronisation policy and the priority, read
 * back as they were set, per stream; an unknown attribute is refused.
 */
#include "drv.h"

int main(void)
{
	CUstreamAttrValue v, got;
	CUdeviceptr d;
	CUstream s, t;
	int least, greatest;

	drv_begin("driver/streamattr");
	drv_context();
	DRV(cuMemAlloc(&d, 1 << 20));
	DRV(cuCtxGetStreamPriorityRange(&least, &greatest));
	DRV(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, greatest));
	DRV(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));

	memset(&v, 0, sizeof(v));
	v.accessPolicyWindow.base_ptr = (void *)(uintptr_t)d;
	v.accessPolicyWindow.num_bytes = 1 << 20;
	v.accessPolicyWindow.hitRatio = 0.5f;
	v.accessPolicyWindow.hitProp = CU_ACCESS_PROPERTY_PERSISTING;
	v.accessPolicyWindow.missProp = CU_ACCESS_PROPERTY_STREAMING;
	DRV(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &v));
	memset(&got, 0, sizeof(got));
	DRV(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &got));
	printf("window: same base %d, bytes %zu, hit ratio %.2f, hit %d, miss %d\n",
	       got.accessPolicyWindow.base_ptr == (void *)(uintptr_t)d,
	       got.accessPolicyWindow.num_bytes, got.accessPolicyWindow.hitRatio,
	       (int)got.accessPolicyWindow.hitProp, (int)got.accessPolicyWindow.missProp);
	DRV_EXPECT(got.accessPolicyWindow.num_bytes == 1 << 20);
	/* The other stream kept its own (none). */
	memset(&got, 0, sizeof(got));
	DRV(cuStreamGetAttribute(t, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &got));
	printf("other stream's window: %zu bytes\n", got.accessPolicyWindow.num_bytes);

	v.syncPolicy = CU_SYNC_POLICY_BLOCKING_SYNC;
	DRV(cuStreamSetAttribute(t, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &v));
	DRV(cuStreamGetAttribute(t, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &got));
	printf("sync policy: %d\n", (int)got.syncPolicy);
	DRV_EXPECT(got.syncPolicy == CU_SYNC_POLICY_BLOCKING_SYNC);

	DRV(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_PRIORITY, &got));
	printf("priority is the greatest: %d\n", got.priority == greatest);

	/* The stream still works after all that. */
	DRV(cuMemsetD8Async(d, 7, 1 << 20, s));
	DRV(cuStreamSynchronize(s));
	DRV(cuStreamDestroy(s));
	DRV(cuStreamDestroy(t));
	DRV(cuMemFree(d));
	drv_pass();
}
