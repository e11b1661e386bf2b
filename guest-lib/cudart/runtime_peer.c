/*
 * runtime_peer.c - several GPUs in one program: peer queries and peer
 * access (cudaDeviceCanAccessPeer, cudaDeviceGetP2PAttribute,
 * cudaDeviceEnablePeerAccess, cudaDeviceDisablePeerAccess).
 *
 * Devices of one backend are peers as the host's driver says; devices of
 * two backends share no memory and never are (copies between them are
 * staged by runtime_copy.c).
 */
#include "pvgpu_guest.h"
#include "pvgpu_proto.h"
#include "runtime.h"

static int valid_device(int device)
{
	return device >= 0 && device < pvgpu_rt.ndevices;
}

static int same_backend(int a, int b)
{
	return pvgpu_rt.devices[a].be == pvgpu_rt.devices[b].be;
}

cudaError_t cudaDeviceCanAccessPeer(int *canAccessPeer, int device,
				    int peerDevice)
{
	struct pvgpu_device_can_access_peer_req req;
	struct pvgpu_device_can_access_peer_rep rep = { 0 };
	struct pvgpu_op op;
	cudaError_t err;

	if (!canAccessPeer)
		return pvgpu_record(cudaErrorInvalidValue);
	err = pvgpu_init();
	if (err)
		return pvgpu_record(err);
	if (!valid_device(device) || !valid_device(peerDevice))
		return pvgpu_record(cudaErrorInvalidDevice);
	if (device == peerDevice || !same_backend(device, peerDevice)) {
		*canAccessPeer = 0;
		return cudaSuccess;
	}
	req.device = pvgpu_rt.devices[device].remote;
	req.peer = pvgpu_rt.devices[peerDevice].remote;
	err = pvgpu_op_begin(&op, device, 0);
	if (err)
		return pvgpu_record(err);
	err = pvgpu_error_from_status(
		pvgpu_call_device_can_access_peer(op.client, &req, &rep));
	pvgpu_op_end(&op);
	if (!err)
		*canAccessPeer = rep.can_access != 0;
	return pvgpu_record(err);
}

cudaError_t cudaDeviceGetP2PAttribute(int *value, enum cudaDeviceP2PAttr attr,
				      int srcDevice, int dstDevice)
{
	struct pvgpu_device_p2p_attribute_req req;
	struct pvgpu_device_p2p_attribute_rep rep = { 0 };
	struct pvgpu_op op;
	cudaError_t err;

	if (!value)
		return pvgpu_record(cudaErrorInvalidValue);
	err = pvgpu_init();
	if (err)
		return pvgpu_record(err);
	if (!valid_device(srcDevice) || !valid_device(dstDevice) ||
	    srcDevice == dstDevice)
		return pvgpu_record(cudaErrorInvalidDevice);
	if (attr < cudaDevP2PAttrPerformanceRank ||
	    attr > cudaDevP2PAttrCudaArrayAccessSupported)
		return pvgpu_record(cudaErrorInvalidValue);
	if (!same_backend(srcDevice, dstDevice)) {
		*value = 0;	/* no access, no atomics, rank 0 */
		return cudaSuccess;
	}
	req.attrib = (int32_t)attr;
	req.src_device = pvgpu_rt.devices[srcDevice].remote;
	req.dst_device = pvgpu_rt.devices[dstDevice].remote;
	err = pvgpu_op_begin(&op, srcDevice, 0);
	if (err)
		return pvgpu_record(err);
	err = pvgpu_error_from_status(
		pvgpu_call_device_p2p_attribute(op.client, &req, &rep));
	pvgpu_op_end(&op);
	if (!err)
		*value = rep.value;
	return pvgpu_record(err);
}

/* The current device's context gains (enable) or loses access to peer's. */
static cudaError_t peer_access(int peerDevice, unsigned int flags, int enable)
{
	int device = pvgpu_current_device();
	struct pvgpu_op op;
	uint64_t peer_ctx = 0;
	cudaError_t err;
	int32_t st;

	err = pvgpu_init();
	if (err)
		return err;
	if (!valid_device(peerDevice))
		return cudaErrorInvalidDevice;
	if (enable && flags)
		return cudaErrorInvalidValue;
	if (!valid_device(device))
		return cudaErrorInvalidDevice;
	/* A device is not its own peer, as NVIDIA's runtime answers. */
	if (peerDevice == device || !same_backend(device, peerDevice))
		return enable ? cudaErrorPeerAccessUnsupported :
				cudaErrorPeerAccessNotEnabled;
	err = pvgpu_op_begin(&op, device, 1);
	if (err)
		return err;
	err = pvgpu_op_peer_ctx(&op, peerDevice, &peer_ctx);
	if (err)
		goto err_end;
	if (enable) {
		struct pvgpu_ctx_enable_peer_access_req req = { peer_ctx, 0 };
		struct pvgpu_ctx_enable_peer_access_rep rep;

		st = pvgpu_call_ctx_enable_peer_access(op.client, &req, &rep);
	} else {
		struct pvgpu_ctx_disable_peer_access_req req = { peer_ctx };
		struct pvgpu_ctx_disable_peer_access_rep rep;

		st = pvgpu_call_ctx_disable_peer_access(op.client, &req, &rep);
	}
	err = pvgpu_error_from_status(st);
err_end:
	pvgpu_op_end(&op);
	return err;
}

cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)
{
	return pvgpu_record(peer_access(peerDevice, flags, 1));
}

cudaError_t cudaDeviceDisablePeerAccess(int peerDevice)
{
	return pvgpu_record(peer_access(peerDevice, 0, 0));
}
