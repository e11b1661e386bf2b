/*
 * pvgpu_vmtest - runs inside the test guest (tests/vm/test_guest_driver.py),
 * built static on the host and carried in the initramfs.
 *
 *   pvgpu_vmtest basic|full DEVICE WINDOW_ID PATTERN_OFF REPLY_OFF LEN
 *
 * Opens DEVICE (/dev/pvgpuN), checks PVGPU_IOC_INFO against the header the
 * host wrote (WINDOW_ID), maps the window, checks the host's pattern at
 * PATTERN_OFF and writes the reply pattern at REPLY_OFF; prints the memory
 * type of the mappings.  That is all for "basic".  "full" also requires
 * them to be write-back, and then checks what
 * must be refused (mappings past the end, private mappings, doorbell and
 * interrupt waits on ivshmem-plain, unloading the module while open), unbinds
 * the device through sysfs with the file still open and mapped, and checks
 * that the mapping still reads and writes (a second reply at
 * REPLY_OFF + LEN) while the rest now fails with ENODEV.
 *
 *   pvgpu_vmtest doorbell DEVICE WINDOW_ID HOST_PEER ROUNDS
 *
 * On ivshmem-doorbell: ROUNDS times, rings HOST_PEER (the test's ivshmem
 * server, which answers each ring with an interrupt) and waits for the
 * interrupt with poll() and read(); then checks that a reader blocked in
 * read() is woken with ENODEV when the device is unbound.
 *
 * Prints "ok: ..." per check and "FAIL: ..." on the first failure; exits 0
 * when everything passed.  Patterns: byte i of the host's is (i * 7 + 3),
 * of the replies (i * 13 + 5) and (i * 11 + 1), all mod 256.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pvgpu_ioctl.h"
#include "window.h"

static int failed;

static void check(int cond, const char *what)
{
	if (cond) {
		printf("ok: %s\n", what);
	} else {
		printf("FAIL: %s (errno %d: %s)\n", what, errno, strerror(errno));
		failed = 1;
	}
	fflush(stdout);
}

/* A call that must fail with one particular errno. */
static void check_errno(int ret, int want, const char *what)
{
	char buf[256];

	snprintf(buf, sizeof(buf), "%s fails with %s", what, strerrorname_np(want));
	if (ret == -1 && errno == want) {
		printf("ok: %s\n", buf);
	} else {
		printf("FAIL: %s (got ret %d, errno %s)\n", buf, ret,
		       ret == -1 ? strerrorname_np(errno) : "none");
		failed = 1;
	}
	fflush(stdout);
}

static int mmap_errno(size_t len, int prot, int flags, int fd, off_t off)
{
	void *p = mmap(NULL, len, prot, flags, fd, off);

	if (p == MAP_FAILED)
		return -1;
	munmap(p, len);
	errno = 0;
	return 0;
}

static int pattern_ok(const volatile uint8_t *p, size_t len, unsigned mul,
		      unsigned add)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != (uint8_t)(i * mul + add))
			return 0;
	return 1;
}

static void pattern_write(volatile uint8_t *p, size_t len, unsigned mul,
			  unsigned add)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(i * mul + add);
}

/* The PCI address behind /dev/pvgpuN, from /sys/class/misc/pvgpuN/device. */
static int pci_address(const char *devpath, char *out, size_t outlen)
{
	char link[PATH_MAX], target[PATH_MAX], name[PATH_MAX];
	ssize_t n;

	snprintf(name, sizeof(name), "%s", devpath);
	snprintf(link, sizeof(link), "/sys/class/misc/%s/device", basename(name));
	n = readlink(link, target, sizeof(target) - 1);
	if (n < 0)
		return -1;
	target[n] = '\0';
	snprintf(out, outlen, "%s", basename(target));
	return 0;
}

/*
 * How many memory type reservations cover the start of the device's BAR2,
 * and whether all of them are write-back (/sys/kernel/debug/x86/
 * pat_memtype_list; debugfs must be mounted).  -1 if that cannot be read.
 */
static int pat_writeback(const char *bdf, int *all_wb)
{
	char path[PATH_MAX], line[256], want[64];
	unsigned long long start = 0, end, flags;
	FILE *f;
	int n = 0, i;

	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/resource", bdf);
	f = fopen(path, "r");
	if (!f)
		return -1;
	for (i = 0; i <= 2; i++)
		if (fscanf(f, "%llx %llx %llx", &start, &end, &flags) != 3)
			start = 0;
	fclose(f);
	if (!start)
		return -1;

	f = fopen("/sys/kernel/debug/x86/pat_memtype_list", "r");
	if (!f)
		return -1;
	snprintf(want, sizeof(want), "[mem 0x%016llx-", start);
	*all_wb = 1;
	while (fgets(line, sizeof(line), f)) {
		if (!strstr(line, want))
			continue;
		printf("info: %s", line);
		n++;
		if (!strstr(line, "write-back"))
			*all_wb = 0;
	}
	fclose(f);
	return n;
}

static int write_sysfs(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, text, strlen(text));
	close(fd);
	return n == (ssize_t)strlen(text) ? 0 : -1;
}

static int doorbell_main(char **argv)
{
	struct pvgpu_info info;
	struct pvgpu_doorbell ring = { .peer = 0, .vector = 0 };
	struct pollfd pfd;
	uint64_t events = 0, want_id = strtoull(argv[2], NULL, 0);
	unsigned long rounds = strtoul(argv[4], NULL, 0);
	char bdf[64], what[96];
	pid_t child;
	int fd, status, ok = 1;

	ring.peer = (uint32_t)strtoul(argv[3], NULL, 0);
	fd = open(argv[1], O_RDWR);
	check(fd >= 0, "open the device");
	if (fd < 0)
		return 1;
	memset(&info, 0, sizeof(info));
	check(ioctl(fd, PVGPU_IOC_INFO, &info) == 0, "PVGPU_IOC_INFO");
	printf("info: window_id=%" PRIu64 " size=%" PRIu64 " layout=%u flags=%#x peer_id=%d vectors=%u\n",
	       (uint64_t)info.window_id, (uint64_t)info.size, info.layout,
	       info.flags, info.peer_id, info.vectors);
	check(info.window_id == want_id, "window id is the host's");
	check((info.flags & PVGPU_INFO_DOORBELL) && info.vectors == 1,
	      "ivshmem-doorbell: doorbell and one vector");
	check(info.peer_id >= 0 && (uint32_t)info.peer_id != ring.peer,
	      "a peer id of our own");
	if (failed)
		return 1;

	pfd = (struct pollfd){ .fd = fd, .events = POLLIN };
	check(poll(&pfd, 1, 0) == 0, "no interrupt before the first ring");
	for (unsigned long i = 1; i <= rounds && ok; i++) {
		ok = ioctl(fd, PVGPU_IOC_RING, &ring) == 0;
		pfd = (struct pollfd){ .fd = fd, .events = POLLIN };
		ok = ok && poll(&pfd, 1, 10000) == 1 && (pfd.revents & POLLIN);
		ok = ok && read(fd, &events, sizeof(events)) == sizeof(events);
		ok = ok && events == i;
		if (!ok)
			printf("info: round %lu: events %" PRIu64 "\n", i, events);
	}
	snprintf(what, sizeof(what),
		 "%lu rounds of ring, poll and read of the interrupt count",
		 rounds);
	check(ok, what);
	{
		int fl = fcntl(fd, F_GETFL);

		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
		check_errno((int)read(fd, &events, sizeof(events)), EAGAIN,
			    "a non-blocking read with nothing pending");
		fcntl(fd, F_SETFL, fl);
	}
	pfd = (struct pollfd){ .fd = fd, .events = POLLIN };
	check(poll(&pfd, 1, 0) == 0, "poll is quiet once the count is read");
	ring.vector = 70000;
	check_errno(ioctl(fd, PVGPU_IOC_RING, &ring), EINVAL,
		    "PVGPU_IOC_RING with a vector past 65535");

	/* A reader blocked in read() must be woken by the unbind. */
	child = fork();
	if (child == 0) {
		ssize_t n = read(fd, &events, sizeof(events));

		_exit(n == -1 && errno == ENODEV ? 0 : 1);
	}
	usleep(300 * 1000);
	check(pci_address(argv[1], bdf, sizeof(bdf)) == 0, "find the PCI address");
	check(write_sysfs("/sys/bus/pci/drivers/pvgpu/unbind", bdf) == 0,
	      "unbind through sysfs with a reader blocked");
	alarm(10);
	check(waitpid(child, &status, 0) == child && WIFEXITED(status) &&
	      WEXITSTATUS(status) == 0,
	      "the blocked reader wakes with ENODEV");
	alarm(0);
	check(close(fd) == 0, "close");
	if (failed)
		return 1;
	printf("pvgpu_vmtest: doorbell passed (%s)\n", bdf);
	return 0;
}

int main(int argc, char **argv)
{
	struct pvgpu_info info;
	struct pvgpu_doorbell ring = { .peer = 0, .vector = 0 };
	struct pollfd pfd;
	char bdf[64];
	uint64_t events;
	uint64_t want_id;
	size_t poff, roff, len, page = (size_t)sysconf(_SC_PAGESIZE);
	volatile uint8_t *win;
	const struct pvgpu_window_header *hdr;
	int fd, nres, all_wb = 0, full;

	if (argc == 6 && strcmp(argv[1], "doorbell") == 0)
		return doorbell_main(argv + 1);
	if (argc != 7 || (strcmp(argv[1], "basic") && strcmp(argv[1], "full"))) {
		fprintf(stderr, "usage: %s basic|full DEVICE WINDOW_ID PATTERN_OFF REPLY_OFF LEN\n"
			"       %s doorbell DEVICE WINDOW_ID HOST_PEER ROUNDS\n",
			argv[0], argv[0]);
		return 2;
	}
	full = strcmp(argv[1], "full") == 0;
	argv++;
	want_id = strtoull(argv[2], NULL, 0);
	poff = strtoull(argv[3], NULL, 0);
	roff = strtoull(argv[4], NULL, 0);
	len = strtoull(argv[5], NULL, 0);

	fd = open(argv[1], O_RDWR);
	check(fd >= 0, "open the device");
	if (fd < 0)
		return 1;

	memset(&info, 0, sizeof(info));
	check(ioctl(fd, PVGPU_IOC_INFO, &info) == 0, "PVGPU_IOC_INFO");
	printf("info: window_id=%" PRIu64 " size=%" PRIu64 " layout=%u flags=%#x peer_id=%d vectors=%u\n",
	       (uint64_t)info.window_id, (uint64_t)info.size, info.layout,
	       info.flags, info.peer_id, info.vectors);
	check(info.window_id == want_id, "window id is the host's");
	check(info.layout == PVGPU_WINDOW_LAYOUT, "layout is window.h's");
	check(info.flags == 0 && info.vectors == 0, "ivshmem-plain: no doorbell");
	if (failed || poff + len > info.size || roff + 2 * len > info.size)
		return 1;

	win = mmap(NULL, info.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	check(win != MAP_FAILED, "mmap the whole window");
	if (win == MAP_FAILED)
		return 1;
	hdr = (const struct pvgpu_window_header *)win;
	check(hdr->magic == PVGPU_WINDOW_MAGIC && hdr->size == info.size &&
	      hdr->window_id == info.window_id,
	      "the mapping starts with the window header");
	check(pattern_ok(win + poff, len, 7, 3), "the host's pattern reads back");
	pattern_write(win + roff, len, 13, 5);
	check(pattern_ok(win + roff, len, 13, 5), "reply written");
	check(pci_address(argv[1], bdf, sizeof(bdf)) == 0, "find the PCI address");
	nres = pat_writeback(bdf, &all_wb);
	if (!full) {
		printf("info: %s mapped %s\n", argv[1],
		       nres >= 2 && all_wb ? "write-back" : "not write-back");
		check(munmap((void *)win, info.size) == 0, "munmap");
		check(close(fd) == 0, "close");
		return failed;
	}
	/* One for the driver's memremap(), one for this mapping. */
	check(nres >= 2 && all_wb, "the window is mapped write-back (PAT)");

	/* What must be refused. */
	check_errno(mmap_errno(info.size + page, PROT_READ, MAP_SHARED, fd, 0),
		    EINVAL, "mmap one page longer than the window");
	check_errno(mmap_errno(page, PROT_READ, MAP_SHARED, fd, (off_t)info.size),
		    EINVAL, "mmap at the window's end");
	check_errno(mmap_errno(2 * page, PROT_READ, MAP_SHARED, fd,
			       (off_t)(info.size - page)),
		    EINVAL, "mmap across the window's end");
	check_errno(mmap_errno(page, PROT_READ, MAP_PRIVATE, fd, 0),
		    EINVAL, "a private mapping");
	check(mmap_errno(page, PROT_READ, MAP_SHARED, fd,
			 (off_t)(info.size - page)) == 0,
	      "mmap of the last page");
	check_errno(ioctl(fd, PVGPU_IOC_RING, &ring), EOPNOTSUPP,
		    "PVGPU_IOC_RING on ivshmem-plain");
	check_errno((int)read(fd, &events, sizeof(events)), EOPNOTSUPP,
		    "read on ivshmem-plain");
	pfd = (struct pollfd){ .fd = fd, .events = POLLIN };
	check(poll(&pfd, 1, 100) == 0, "poll on ivshmem-plain does not signal");
	check_errno(ioctl(fd, _IO(PVGPU_IOC_MAGIC, 99)), ENOTTY,
		    "an unknown ioctl");
	check_errno((int)syscall(SYS_delete_module, "pvgpu", O_NONBLOCK),
		    EWOULDBLOCK, "unloading the module while a file is open");

	/* Unbind with the file open and the window mapped. */
	printf("info: unbinding %s\n", bdf);
	check(write_sysfs("/sys/bus/pci/drivers/pvgpu/unbind", bdf) == 0,
	      "unbind through sysfs");
	check(access(argv[1], F_OK) == -1 && errno == ENOENT,
	      "the device node is gone");
	check(pattern_ok(win + poff, len, 7, 3),
	      "the mapping still reads after unbind");
	pattern_write(win + roff + len, len, 11, 1);
	check(pattern_ok(win + roff + len, len, 11, 1),
	      "the mapping still writes after unbind");
	memset(&info, 0, sizeof(info));
	check(ioctl(fd, PVGPU_IOC_INFO, &info) == 0 &&
	      info.window_id == want_id && (info.flags & PVGPU_INFO_UNBOUND),
	      "PVGPU_IOC_INFO after unbind says unbound");
	check_errno(ioctl(fd, PVGPU_IOC_RING, &ring), ENODEV,
		    "PVGPU_IOC_RING after unbind");
	check_errno(mmap_errno(page, PROT_READ, MAP_SHARED, fd, 0), ENODEV,
		    "a new mmap after unbind");
	pfd = (struct pollfd){ .fd = fd, .events = POLLIN };
	check(poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLHUP),
	      "poll after unbind says hang-up");

	check(munmap((void *)win, info.size) == 0, "munmap");
	check(close(fd) == 0, "close");

	if (failed) {
		printf("FAIL: %s\n", "some checks failed");
		return 1;
	}
	printf("pvgpu_vmtest: all passed (%s)\n", bdf);
	return 0;
}
