/*
 * probe.c - vchan-probe: the smallest libxenvchan pair, to show bytes moving
 * both ways between a domU and dom0 under Xen (tests/xen/).
 *
 *   vchan-probe server DOMID XSPATH BYTES    in dom0: offer a vchan to DOMID
 *   vchan-probe client BACKEND XSPATH BYTES  in the domU: connect to it
 *
 * The client sends BYTES of a pattern, the server checks them and answers
 * with BYTES of another pattern, which the client checks.  Every wait is
 * bounded (vchan_io.h); each side prints one "vchan-probe: ... ok" line.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libxenvchan.h>

#include "vchan_io.h"

/*
 * Long: under TCG on a busy machine the other end may start minutes late
 * (dom0 offers the channel once it has created every domU of a scenario).
 */
#define STALL_MS 10000
#define CONNECT_MS 600000

static unsigned char pattern(size_t i, int dir)
{
	return (unsigned char)(dir ? (i * 13 + 5) ^ 0x5a : i * 7 + 1);
}

static int check(const unsigned char *buf, size_t len, int dir)
{
	for (size_t i = 0; i < len; i++)
		if (buf[i] != pattern(i, dir)) {
			fprintf(stderr, "vchan-probe: byte %zu is %u, want %u\n",
				i, buf[i], pattern(i, dir));
			return -1;
		}
	return 0;
}

int main(int argc, char **argv)
{
	struct libxenvchan *ctrl = NULL;
	unsigned char *buf = NULL;
	int rc = 1, e, server;
	size_t len;
	int64_t t0;

	if (argc != 5 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
		fprintf(stderr, "usage: vchan-probe server|client DOMID XSPATH BYTES\n");
		return 2;
	}
	server = !strcmp(argv[1], "server");
	len = strtoul(argv[4], NULL, 0);
	buf = malloc(len ? len : 1);
	if (!buf)
		goto err_out;

	t0 = pvgpu_vchan_now_ms();
	if (server) {
		ctrl = libxenvchan_server_init(NULL, atoi(argv[2]), argv[3],
					       65536, 65536);
		if (!ctrl) {
			fprintf(stderr, "vchan-probe: server_init %s: %s\n",
				argv[3], strerror(errno));
			goto err_buf;
		}
		printf("vchan-probe: server listening for domain %s at %s\n",
		       argv[2], argv[3]);
		fflush(stdout);
	} else {
		/*
		 * The server may not be there yet (xenstore then says EACCES:
		 * the node's parent is dom0's): retry, at first often, then
		 * once a second, each try costing the guest little CPU.
		 */
		for (int tries = 0;
		     !(ctrl = libxenvchan_client_init(NULL, atoi(argv[2]), argv[3]));
		     tries++) {
			if (pvgpu_vchan_now_ms() - t0 > CONNECT_MS) {
				fprintf(stderr, "vchan-probe: client_init %s: %s\n",
					argv[3], strerror(errno));
				goto err_buf;
			}
			usleep(tries < 20 ? 100000 : 1000000);
		}
	}

	if (server) {
		e = pvgpu_vchan_read_all(ctrl, buf, len, CONNECT_MS, STALL_MS);
		if (e < 0 || check(buf, len, 0) < 0) {
			fprintf(stderr, "vchan-probe: server read: %s\n", strerror(-e));
			goto err_ctrl;
		}
		for (size_t i = 0; i < len; i++)
			buf[i] = pattern(i, 1);
		e = pvgpu_vchan_write_all(ctrl, buf, len, STALL_MS);
		if (e < 0) {
			fprintf(stderr, "vchan-probe: server write: %s\n", strerror(-e));
			goto err_ctrl;
		}
		/* Wait for the client to close: it has read everything then. */
		e = pvgpu_vchan_read_all(ctrl, buf, 1, STALL_MS, STALL_MS);
		printf("vchan-probe: server ok: received %zu and sent %zu bytes (%s at the end)\n",
		       len, len, e == -ECONNRESET ? "peer closed" : strerror(-e));
	} else {
		for (size_t i = 0; i < len; i++)
			buf[i] = pattern(i, 0);
		e = pvgpu_vchan_write_all(ctrl, buf, len, STALL_MS);
		if (e < 0) {
			fprintf(stderr, "vchan-probe: client write: %s\n", strerror(-e));
			goto err_ctrl;
		}
		memset(buf, 0, len);
		e = pvgpu_vchan_read_all(ctrl, buf, len, STALL_MS, STALL_MS);
		if (e < 0 || check(buf, len, 1) < 0) {
			fprintf(stderr, "vchan-probe: client read: %s\n", strerror(-e));
			goto err_ctrl;
		}
		printf("vchan-probe: client ok: sent %zu and received %zu bytes in %lld ms\n",
		       len, len, (long long)(pvgpu_vchan_now_ms() - t0));
	}
	fflush(stdout);
	rc = 0;
err_ctrl:
	libxenvchan_close(ctrl);
err_buf:
	free(buf);
err_out:
	return rc;
}
