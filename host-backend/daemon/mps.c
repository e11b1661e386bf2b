/* mps.c - MPS control daemons of the GPUs that share by MPS (see mps.h). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "mps.h"

/* The run directory, made once, 0700 (mkdtemp's mode). 0, or -1 logged. */
static int make_dir(struct pvgpu_mps *m)
{
	const char *base = getenv("RUNTIME_DIRECTORY");

	if (m->dir[0])
		return 0;
	if (!base || !*base)
		base = getenv("TMPDIR");
	if (!base || !*base)
		base = "/tmp";
	if ((size_t)snprintf(m->dir, sizeof(m->dir), "%s/pvgpud-mps.XXXXXX",
			     base) >= sizeof(m->dir) || !mkdtemp(m->dir)) {
		log_error("mps: cannot make a directory under %s: %s; no MPS",
			  base, strerror(errno));
		m->dir[0] = '\0';
		return -1;
	}
	return 0;
}

static int make_gpu_dirs(struct pvgpu_mps *m, int n)
{
	struct pvgpu_mps_gpu *g = &m->gpu[n];
	char top[sizeof(m->dir) + 16];

	if (g->pipe[0])
		return 0;
	snprintf(top, sizeof(top), "%s/gpu%d", m->dir, n);
	snprintf(g->pipe, sizeof(g->pipe), "%s/pipe", top);
	snprintf(g->log, sizeof(g->log), "%s/log", top);
	if ((mkdir(top, 0700) && errno != EEXIST) ||
	    (mkdir(g->pipe, 0700) && errno != EEXIST) ||
	    (mkdir(g->log, 0700) && errno != EEXIST)) {
		log_error("mps: GPU %d: cannot make %s: %s", n, top, strerror(errno));
		g->pipe[0] = g->log[0] = '\0';
		return -1;
	}
	return 0;
}

/*
 * Fork argv with GPU n's MPS environment; stdin from fd in (-1:
 * /dev/null).  Its pid, or -1.
 */
static pid_t spawn(const struct pvgpu_mps_gpu *g, int n, char *const argv[],
		   int in)
{
	pid_t parent = getpid(), pid = fork();
	char dev[16];
	sigset_t none;

	if (pid)
		return pid;
	/* The supervisor's blocked signals and its fds are not the daemon's. */
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != parent)
		_exit(1);
	if (in < 0)
		in = open("/dev/null", O_RDONLY);
	if (in < 0 || dup2(in, 0) < 0)
		_exit(126);
	close_range(3, ~0u, 0);
	snprintf(dev, sizeof(dev), "%d", n);
	if (setenv("CUDA_VISIBLE_DEVICES", dev, 1) ||
	    setenv("CUDA_MPS_PIPE_DIRECTORY", g->pipe, 1) ||
	    setenv("CUDA_MPS_LOG_DIRECTORY", g->log, 1))
		_exit(126);
	execvp(argv[0], argv);
	dprintf(2, "pvgpud: mps: cannot run %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

static void start(struct pvgpu_mps *m, int n)
{
	struct pvgpu_mps_gpu *g = &m->gpu[n];
	char *argv[] = { PVGPU_MPS_CONTROL, "-f", NULL };

	g->due_ns = 0;
	if (make_dir(m) || make_gpu_dirs(m, n))
		return;
	g->pid = spawn(g, n, argv, -1);
	if (g->pid < 0) {
		log_error("mps: GPU %d: fork: %s", n, strerror(errno));
		g->pid = 0;
		g->due_ns = pvgpu_now_ns() + (uint64_t)PVGPU_MPS_BACKOFF_MAX_MS * 1000000;
		return;
	}
	g->started_ns = pvgpu_now_ns();
	log_info("mps: GPU %d: control daemon %s (pid %d, %s -f, pipes in %s)",
		 n, g->starts++ ? "restarted" : "started", (int)g->pid,
		 PVGPU_MPS_CONTROL, g->pipe);
}

void pvgpu_mps_want(struct pvgpu_mps *m, uint32_t gpus)
{
	if (!m->enabled) {
		if (gpus && !m->wanted)
			log_warn("mps: sharing = mps is for the GPUs of this host: not with this executor");
		m->wanted = gpus;
		return;
	}
	m->wanted = gpus;
	for (int n = 0; n < PVGPU_MAX_DEVICES; n++)
		if ((gpus >> n & 1) && !m->gpu[n].pid && !m->stopping)
			start(m, n);
}

int pvgpu_mps_reaped(struct pvgpu_mps *m, pid_t pid, int status)
{
	for (int n = 0; n < PVGPU_MAX_DEVICES; n++) {
		struct pvgpu_mps_gpu *g = &m->gpu[n];
		uint64_t now = pvgpu_now_ns();
		char how[64];

		if (pid <= 0 || g->pid != pid)
			continue;
		g->pid = 0;
		if (WIFSIGNALED(status))
			snprintf(how, sizeof(how), "killed by signal %d", WTERMSIG(status));
		else
			snprintf(how, sizeof(how), "exit code %d", WEXITSTATUS(status));
		if (m->stopping || !(m->wanted >> n & 1)) {
			log_info("mps: GPU %d: control daemon (pid %d) ended: %s",
				 n, (int)pid, how);
			return 1;
		}
		/* One that keeps dying soon after its start is started less often. */
		if (now - g->started_ns >= (uint64_t)PVGPU_MPS_BACKOFF_MAX_MS * 1000000 ||
		    !g->backoff_ms)
			g->backoff_ms = PVGPU_MPS_BACKOFF_MS;
		else if (g->backoff_ms < PVGPU_MPS_BACKOFF_MAX_MS / 2)
			g->backoff_ms *= 2;
		else
			g->backoff_ms = PVGPU_MPS_BACKOFF_MAX_MS;
		g->due_ns = now + (uint64_t)g->backoff_ms * 1000000;
		log_warn("mps: GPU %d: control daemon (pid %d) died: %s; restarting in %.1f s",
			 n, (int)pid, how, g->backoff_ms / 1000.0);
		return 1;
	}
	return 0;
}

void pvgpu_mps_tick(struct pvgpu_mps *m)
{
	uint64_t now = pvgpu_now_ns();

	for (int n = 0; n < PVGPU_MAX_DEVICES; n++) {
		struct pvgpu_mps_gpu *g = &m->gpu[n];

		if (g->due_ns && now >= g->due_ns && !m->stopping &&
		    (m->wanted >> n & 1))
			start(m, n);
		else if (g->due_ns && !(m->wanted >> n & 1))
			g->due_ns = 0;
	}
}

int pvgpu_mps_timeout_ms(const struct pvgpu_mps *m)
{
	uint64_t now = pvgpu_now_ns();
	int best = -1;

	for (int n = 0; n < PVGPU_MAX_DEVICES; n++) {
		uint64_t due = m->gpu[n].due_ns;
		int ms;

		if (!due)
			continue;
		ms = due <= now ? 0 : (int)((due - now + 999999) / 1000000);
		if (best < 0 || ms < best)
			best = ms;
	}
	return best;
}

/* Reap pid if it has ended: 1 when it is gone. */
static int gone(pid_t pid, int *status)
{
	return pid <= 0 || waitpid(pid, status, WNOHANG) == pid;
}

void pvgpu_mps_stop(struct pvgpu_mps *m)
{
	pid_t quit[PVGPU_MAX_DEVICES] = { 0 };
	uint64_t deadline;

	m->stopping = 1;
	for (int n = 0; n < PVGPU_MAX_DEVICES; n++) {
		struct pvgpu_mps_gpu *g = &m->gpu[n];
		char *argv[] = { PVGPU_MPS_CONTROL, NULL };
		int p[2];

		g->due_ns = 0;
		if (!g->pid)
			continue;
		if (pipe2(p, O_CLOEXEC)) {
			kill(g->pid, SIGKILL);
			continue;
		}
		quit[n] = spawn(g, n, argv, p[0]);
		close(p[0]);
		/* A pipe's buffer takes the line: never blocks. */
		if (write(p[1], "quit\n", 5) != 5)
			kill(g->pid, SIGKILL);
		close(p[1]);
	}
	deadline = pvgpu_now_ns() + (uint64_t)PVGPU_MPS_STOP_MS * 1000000;
	for (;;) {
		int left = 0;

		for (int n = 0; n < PVGPU_MAX_DEVICES; n++) {
			struct pvgpu_mps_gpu *g = &m->gpu[n];
			int status;

			if (quit[n] > 0 && gone(quit[n], &status))
				quit[n] = 0;
			if (g->pid && gone(g->pid, &status)) {
				log_info("mps: GPU %d: control daemon (pid %d) stopped (quit)",
					 n, (int)g->pid);
				g->pid = 0;
			}
			left += quit[n] > 0 || g->pid;
		}
		if (!left || pvgpu_now_ns() >= deadline)
			break;
		nanosleep(&(struct timespec){ 0, 20 * 1000 * 1000 }, NULL);
	}
	for (int n = 0; n < PVGPU_MAX_DEVICES; n++) {
		struct pvgpu_mps_gpu *g = &m->gpu[n];

		if (quit[n] > 0) {
			kill(quit[n], SIGKILL);
			waitpid(quit[n], NULL, 0);
		}
		if (g->pid) {
			log_warn("mps: GPU %d: control daemon (pid %d) still there %d ms after quit: killed",
				 n, (int)g->pid, PVGPU_MPS_STOP_MS);
			kill(g->pid, SIGKILL);
			waitpid(g->pid, NULL, 0);
			g->pid = 0;
		}
	}
}

void pvgpu_mps_client_env(const struct pvgpu_vm_policy *vm, uint32_t mps_gpus,
			  const char *const pipes[PVGPU_MAX_DEVICES])
{
	uint32_t both;
	uint64_t pinned;
	char v[32];
	int n;

	if (!vm || !pipes)
		return;
	both = mps_gpus & (vm->gpus ? vm->gpus : UINT32_MAX);
	if (!both)
		return;
	n = __builtin_ctz(both);
	if (n >= PVGPU_MAX_DEVICES || !pipes[n] || !pipes[n][0])
		return;
	setenv("CUDA_MPS_PIPE_DIRECTORY", pipes[n], 1);
	snprintf(v, sizeof(v), "%u", (unsigned int)vm->mps_threads);
	setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", v, 1);
	pinned = vm->mps_pinned_memory ? vm->mps_pinned_memory : vm->memory;
	if (pinned) {
		/* In MiB, rounded down: a limit, never more than it says. */
		snprintf(v, sizeof(v), "0=%lluM",
			 (unsigned long long)(pinned >> 20 ? pinned >> 20 : 1));
		setenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", v, 1);
	}
}
