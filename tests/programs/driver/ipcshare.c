/*
 * CUDA IPC between two processes, as NVIDIA's simpleIPC, memMapIPCDrv and
 * streamOrderedAllocationIPC samples do it: the process forks before
 * either touches CUDA; the parent exports an interprocess event, device
 * memory (cuIpcGetMemHandle), physical memory whose POSIX descriptor goes
 * over a socket with SCM_RIGHTS (made with no context current, as
 * memMapIPCDrv does), and a pool allocation (the pool's descriptor and the
 * pointer's export data); the child opens each, reads what the parent
 * wrote and writes back, and the parent sees it.  The child prints first,
 * then the parent.
 */
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "drv.h"

#define MEM_BYTES 4096

struct wire {
	CUipcEventHandle event;
	CUipcMemHandle mem;
	CUmemPoolPtrExportData pool_ptr;
	size_t vmm_size;
};

static void send_all(int sock, const struct wire *w, int vmm_fd, int pool_fd)
{
	int fds[2] = { vmm_fd, pool_fd };
	char ctl[CMSG_SPACE(sizeof(fds))];
	struct iovec iov = { (void *)w, sizeof(*w) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
			    .msg_controllen = sizeof(ctl) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);

	memset(ctl, 0, sizeof(ctl));
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(c), fds, sizeof(fds));
	DRV_EXPECT(sendmsg(sock, &m, 0) == (ssize_t)sizeof(*w));
}

static void recv_all(int sock, struct wire *w, int *vmm_fd, int *pool_fd)
{
	int fds[2];
	char ctl[CMSG_SPACE(sizeof(fds))];
	struct iovec iov = { w, sizeof(*w) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
			    .msg_controllen = sizeof(ctl) };
	struct cmsghdr *c;

	DRV_EXPECT(recvmsg(sock, &m, MSG_WAITALL) == (ssize_t)sizeof(*w));
	c = CMSG_FIRSTHDR(&m);
	DRV_EXPECT(c && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(fds)));
	memcpy(fds, CMSG_DATA(c), sizeof(fds));
	*vmm_fd = fds[0];
	*pool_fd = fds[1];
}

static CUmemAllocationProp vmm_prop(void)
{
	CUmemAllocationProp p;

	memset(&p, 0, sizeof(p));
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.location.id = 0;
	return p;
}

/* A reserved range with h mapped and readable and writable on device 0. */
static CUdeviceptr map(CUmemGenericAllocationHandle h, size_t size)
{
	CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
				CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUdeviceptr va;

	DRV(cuMemAddressReserve(&va, size, 0, 0, 0));
	DRV(cuMemMap(va, size, 0, h, 0));
	DRV(cuMemSetAccess(va, size, &acc, 1));
	return va;
}

static unsigned int word(CUdeviceptr p)
{
	unsigned int v = 0;

	DRV(cuMemcpyDtoH(&v, p, sizeof(v)));
	return v;
}

static int child(int sock)
{
	CUmemGenericAllocationHandle h;
	CUmemoryPool pool;
	CUdeviceptr mem, va, ptr;
	CUevent ev;
	struct wire w;
	int vmm_fd, pool_fd;
	char ack = 1;

	drv_context();
	recv_all(sock, &w, &vmm_fd, &pool_fd);
	DRV(cuIpcOpenEventHandle(&ev, w.event));
	DRV(cuStreamWaitEvent(NULL, ev, 0));
	DRV(cuEventSynchronize(ev));
	DRV(cuIpcOpenMemHandle(&mem, w.mem, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	printf("child: event opened, memory %#x\n", word(mem));
	DRV(cuMemsetD32(mem + 64, 0xabcd, 1));

	DRV(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)vmm_fd,
					   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	va = map(h, w.vmm_size);
	DRV(cuMemRelease(h));		/* the mapping holds it */
	printf("child: vmm memory %#x\n", word(va));
	DRV(cuMemsetD32(va + 64, 0xbcde, 1));

	DRV(cuMemPoolImportFromShareableHandle(&pool, (void *)(intptr_t)pool_fd,
					       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	DRV(cuMemPoolImportPointer(&ptr, pool, &w.pool_ptr));
	printf("child: pool memory %#x\n", word(ptr));
	DRV(cuMemsetD32(ptr + 128, 0xcdef, 1));
	DRV(cuCtxSynchronize());

	DRV(cuMemFreeAsync(ptr, NULL));
	DRV(cuStreamSynchronize(NULL));
	DRV(cuMemUnmap(va, w.vmm_size));
	DRV(cuMemAddressFree(va, w.vmm_size));
	DRV(cuIpcCloseMemHandle(mem));
	DRV(cuEventDestroy(ev));
	close(vmm_fd);
	close(pool_fd);
	DRV_EXPECT(write(sock, &ack, 1) == 1);
	printf("child: done\n");
	return 0;
}

int main(void)
{
	CUmemAllocationProp prop = vmm_prop();
	CUmemGenericAllocationHandle h;
	CUctxCreateParams params;
	CUmemPoolProps pp;
	CUmemoryPool pool;
	CUdeviceptr mem, va, ptr;
	CUcontext ctx;
	CUdevice dev;
	CUevent ev;
	struct wire w;
	int sv[2], vmm_fd = -1, pool_fd = -1, status;
	char ack = 0;
	pid_t pid;

	drv_begin("driver/ipcshare");
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
		printf("FAIL: socketpair\n");
		return 1;
	}
	fflush(stdout);
	pid = fork();		/* before CUDA, as the driver requires */
	if (pid == 0) {
		close(sv[0]);
		exit(child(sv[1]));
	}
	close(sv[1]);
	memset(&w, 0, sizeof(w));
	memset(&params, 0, sizeof(params));

	/* memMapIPCDrv: the physical memory made with no context current. */
	DRV(cuInit(0));
	DRV(cuDeviceGet(&dev, 0));
	DRV(cuCtxCreate(&ctx, &params, 0, dev));
	DRV(cuCtxDestroy(ctx));
	DRV(cuMemGetAllocationGranularity(&w.vmm_size, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	DRV(cuMemCreate(&h, w.vmm_size, &prop, 0));
	DRV(cuMemExportToShareableHandle(&vmm_fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));

	drv_context();
	va = map(h, w.vmm_size);
	DRV(cuMemsetD32(va, 0x5678, w.vmm_size / 4));

	DRV(cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
	DRV(cuMemAlloc(&mem, MEM_BYTES));
	DRV(cuMemsetD32(mem, 0x1234, MEM_BYTES / 4));
	DRV(cuEventRecord(ev, NULL));
	DRV(cuIpcGetEventHandle(&w.event, ev));
	DRV(cuIpcGetMemHandle(&w.mem, mem));

	memset(&pp, 0, sizeof(pp));
	pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	pp.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	pp.location.id = 0;
	DRV(cuMemPoolCreate(&pool, &pp));
	DRV(cuMemAllocFromPoolAsync(&ptr, MEM_BYTES, pool, NULL));
	DRV(cuMemsetD32Async(ptr, 0x9abc, MEM_BYTES / 4, NULL));
	DRV(cuStreamSynchronize(NULL));
	DRV(cuMemPoolExportToShareableHandle(&pool_fd, pool,
					     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	DRV(cuMemPoolExportPointer(&w.pool_ptr, ptr));
	DRV(cuCtxSynchronize());

	send_all(sv[0], &w, vmm_fd, pool_fd);
	DRV_EXPECT(read(sv[0], &ack, 1) == 1 && ack == 1);
	DRV_EXPECT(waitpid(pid, &status, 0) == pid);
	DRV_EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	printf("parent: memory %#x, vmm memory %#x, pool memory %#x\n",
	       word(mem + 64), word(va + 64), word(ptr + 128));
	DRV_EXPECT(word(mem + 64) == 0xabcd && word(va + 64) == 0xbcde &&
		   word(ptr + 128) == 0xcdef);
	DRV(cuMemFreeAsync(ptr, NULL));
	DRV(cuStreamSynchronize(NULL));
	DRV(cuMemPoolDestroy(pool));
	DRV(cuMemUnmap(va, w.vmm_size));
	DRV(cuMemAddressFree(va, w.vmm_size));
	DRV(cuMemRelease(h));
	DRV(cuMemFree(mem));
	DRV(cuEventDestroy(ev));
	close(vmm_fd);
	close(pool_fd);
	drv_pass();
}
