/*
 * pvgpuctl - the operator's tool.
 *
 *   pvgpuctl devices [URI]   connect like a guest and list the backend's GPUs
 *   pvgpuctl attach DOMAIN [--memory 8G] [--gpu 0] [pvgpu-vm options]
 *   pvgpuctl detach DOMAIN [-c URI]
 *                            give a defined libvirt domain a vGPU, or take
 *                            it away (qemu-device's pvgpu-vm does the work)
 *
 * Exit codes: 0 success, 1 runtime failure, 2 bad usage.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "pvgpu_proto.h"

struct conn {
	int fd;
	uint64_t next_id;
};

static int read_all(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);

		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* One sync call: the backend's status, or -1 if the connection failed. */
static int32_t call(struct conn *c, uint16_t op, const uint8_t *req, long qn,
		    uint8_t *rep, size_t cap, size_t *rn)
{
	uint8_t raw[PVGPU_HDR_SIZE + 1024], prefix[PVGPU_REPLY_PREFIX];
	struct pvgpu_hdr h = { PVGPU_MAGIC, PVGPU_PROTO_VERSION, op, 0,
			       (uint32_t)qn, ++c->next_id };

	if (qn < 0 || (size_t)qn > sizeof(raw) - PVGPU_HDR_SIZE)
		return -1;
	pvgpu_hdr_encode(raw, &h);
	memcpy(raw + PVGPU_HDR_SIZE, req, (size_t)qn);
	if (write(c->fd, raw, PVGPU_HDR_SIZE + (size_t)qn) != PVGPU_HDR_SIZE + qn)
		return -1;
	if (read_all(c->fd, raw, PVGPU_HDR_SIZE) || pvgpu_hdr_decode(raw, &h) ||
	    h.id != c->next_id || h.length < PVGPU_REPLY_PREFIX ||
	    h.length - PVGPU_REPLY_PREFIX > cap)
		return -1;
	if (read_all(c->fd, prefix, sizeof(prefix)) ||
	    read_all(c->fd, rep, h.length - PVGPU_REPLY_PREFIX))
		return -1;
	*rn = h.length - PVGPU_REPLY_PREFIX;
	return (int32_t)pvgpu_get_u32(prefix);
}

static int cmd_devices(const char *uri)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct pvgpu_hello_req hreq = { .version_min = 1,
					.version_max = PVGPU_PROTO_VERSION };
	struct pvgpu_hello_rep hrep;
	struct conn c = { -1, 0 };
	uint8_t q[1024], r[1024];
	size_t rn;
	long qn;

	if (strncmp(uri, "unix://", 7) || strlen(uri + 7) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "pvgpuctl: only unix:// URIs are supported here\n");
		return 2;
	}
	strcpy(sa.sun_path, uri + 7);
	c.fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (c.fd < 0 || connect(c.fd, (struct sockaddr *)&sa, sizeof(sa))) {
		fprintf(stderr, "pvgpuctl: cannot connect to %s: %s\n", uri,
			strerror(errno));
		return 1;
	}
	hreq.pid = (uint32_t)getpid();
	strcpy(hreq.client, "pvgpuctl");
	hreq.client_len = 8;
	qn = pvgpu_hello_req_encode(q, &hreq);
	if (call(&c, PVGPU_OP_HELLO, q, qn, r, sizeof(r), &rn) ||
	    pvgpu_hello_rep_decode(r, rn, &hrep) || hrep.version == 0) {
		fprintf(stderr, "pvgpuctl: %s refused the session (no device?)\n", uri);
		close(c.fd);
		return 1;
	}
	printf("%s: protocol %u, %d device(s), block %u bytes\n", uri,
	       hrep.version, hrep.device_count, hrep.data_block);
	for (int32_t d = 0; d < hrep.device_count; d++) {
		struct pvgpu_device_get_name_req nreq = { .device = d };
		struct pvgpu_device_get_name_rep nrep;
		struct pvgpu_device_total_mem_req mreq = { .device = d };
		struct pvgpu_device_total_mem_rep mrep;

		qn = pvgpu_device_get_name_req_encode(q, &nreq);
		if (call(&c, PVGPU_OP_DEVICE_GET_NAME, q, qn, r, sizeof(r), &rn) ||
		    pvgpu_device_get_name_rep_decode(r, rn, &nrep))
			break;
		qn = pvgpu_device_total_mem_req_encode(q, &mreq);
		if (call(&c, PVGPU_OP_DEVICE_TOTAL_MEM, q, qn, r, sizeof(r), &rn) ||
		    pvgpu_device_total_mem_rep_decode(r, rn, &mrep))
			break;
		printf("  device %d: %s, %llu MiB\n", d, nrep.name,
		       (unsigned long long)(mrep.bytes >> 20));
	}
	close(c.fd);
	return 0;
}

/*
 * attach and detach edit a libvirt domain through python3-libvirt, which
 * qemu-device/pvgpu-vm already does (and keeps its command line stable
 * for): run it, so that there is one implementation.  It is found through
 * $PVGPU_VM, next to a build tree's bin/ (BUILD/bin -> qemu-device/), in
 * /usr/lib/pvgpu, then on $PATH.
 */
static int cmd_vm(int argc, char **argv)
{
	char self[4096], path[4200];
	const char *env = getenv("PVGPU_VM");
	ssize_t n;

	argv[0] = "pvgpu-vm";
	(void)argc;
	if (env && *env) {
		execv(env, argv);
		fprintf(stderr, "pvgpuctl: cannot run %s: %s\n", env,
			strerror(errno));
		return 1;
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		char *slash;

		self[n] = '\0';
		slash = strrchr(self, '/');
		if (slash) {
			*slash = '\0';
			snprintf(path, sizeof(path), "%s/../../qemu-device/pvgpu-vm",
				 self);
			if (!access(path, X_OK))
				execv(path, argv);
		}
	}
	if (!access("/usr/lib/pvgpu/pvgpu-vm", X_OK))
		execv("/usr/lib/pvgpu/pvgpu-vm", argv);
	execvp("pvgpu-vm", argv);
	fprintf(stderr, "pvgpuctl: cannot run pvgpu-vm (qemu-device): %s; set PVGPU_VM\n",
		strerror(errno));
	return 1;
}

static const char usage[] =
	"usage: pvgpuctl devices [URI]\n"
	"       pvgpuctl attach DOMAIN [--memory 8G] [--gpu 0] [--window-size 256M]\n"
	"                       [--vsock auto|kernel|vhost-user] [--cid N] [-c URI]\n"
	"       pvgpuctl detach DOMAIN [-c URI]\n";

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "devices"))
		return cmd_devices(argc >= 3 ? argv[2] : "unix:///run/pvgpu/pvgpu.sock");
	if (argc >= 3 && (!strcmp(argv[1], "attach") || !strcmp(argv[1], "detach")))
		return cmd_vm(argc, argv);
	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		fputs(usage, stdout);
		return 0;
	}
	fputs(usage, stderr);
	return 2;
}
