/*
 * stack_sample.c - `stack-sample PID [N]`: where a running process is, for
 * the stall report of tests/xen/test_xen_pvgpud.py (dom0 has no gdb).
 *
 * N times, 300 ms apart, each thread is stopped with ptrace (SEIZE +
 * INTERRUPT), its rip printed, and the words of the top 8 KiB of its stack
 * that point into executable mappings (return addresses, mostly: a poor
 * man's backtrace); then the executable mappings, so that the build
 * machine can symbolize them: `addr2line -f -e FILE OFFSET`, FILE and
 * OFFSET as printed ("FILE+0xOFFSET").
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_MAPS 512

struct map {
	unsigned long lo, hi, off;
	char path[256];
};

static int load_maps(int pid, struct map *maps)
{
	char p[64], line[512];
	int n = 0;
	FILE *f;

	snprintf(p, sizeof(p), "/proc/%d/maps", pid);
	f = fopen(p, "r");
	if (!f)
		return -1;
	while (n < MAX_MAPS && fgets(line, sizeof(line), f)) {
		struct map *m = &maps[n];
		char perms[8];

		m->path[0] = '\0';
		if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %255s", &m->lo, &m->hi,
			   perms, &m->off, m->path) >= 4 && perms[2] == 'x')
			n++;
	}
	fclose(f);
	return n;
}

static void show(const struct map *maps, int n, const char *what,
		 unsigned long a)
{
	for (int i = 0; i < n; i++)
		if (a >= maps[i].lo && a < maps[i].hi) {
			printf("stack-sample:   %s %s+0x%lx\n", what, maps[i].path,
			       a - maps[i].lo + maps[i].off);
			return;
		}
}

static void sample(int tid, const struct map *maps, int n, int round)
{
	struct user_regs_struct r;
	int st;

	if (ptrace(PTRACE_SEIZE, tid, 0, 0) || ptrace(PTRACE_INTERRUPT, tid, 0, 0)) {
		printf("stack-sample: thread %d: %s\n", tid, strerror(errno));
		return;
	}
	waitpid(tid, &st, __WALL);
	if (ptrace(PTRACE_GETREGS, tid, 0, &r) == 0) {
		printf("stack-sample: round %d thread %d rip %llx\n", round, tid, r.rip);
		show(maps, n, "at", r.rip);
		for (int i = 0; i < 1024; i++) {
			long w;

			errno = 0;
			w = ptrace(PTRACE_PEEKDATA, tid, r.rsp + 8 * (unsigned long)i, 0);
			if (errno)
				break;
			show(maps, n, "stack", (unsigned long)w);
		}
	}
	ptrace(PTRACE_DETACH, tid, 0, 0);
}

int main(int argc, char **argv)
{
	static struct map maps[MAX_MAPS];
	int pid, rounds, n;
	char tasks[64];

	if (argc < 2 || argc > 3 || (pid = atoi(argv[1])) <= 0) {
		fprintf(stderr, "usage: stack-sample PID [ROUNDS]\n");
		return 2;
	}
	rounds = argc == 3 ? atoi(argv[2]) : 3;
	n = load_maps(pid, maps);
	if (n < 0) {
		fprintf(stderr, "stack-sample: /proc/%d/maps: %s\n", pid, strerror(errno));
		return 1;
	}
	snprintf(tasks, sizeof(tasks), "/proc/%d/task", pid);
	for (int round = 0; round < rounds; round++) {
		DIR *d = opendir(tasks);
		struct dirent *e;

		if (!d)
			return 1;
		while ((e = readdir(d)))
			if (atoi(e->d_name) > 0)
				sample(atoi(e->d_name), maps, n, round);
		closedir(d);
		usleep(300000);
	}
	for (int i = 0; i < n; i++)
		printf("stack-sample: map %lx-%lx offset %lx %s\n", maps[i].lo,
		       maps[i].hi, maps[i].off, maps[i].path);
	return 0;
}
