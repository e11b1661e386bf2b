/* supervisor.c - see supervisor.h. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "admit.h"
#include "log.h"
#include "modcache.h"
#include "supervisor.h"

static void human_bytes(uint64_t n, char *out, size_t len)
{
	if (n >= (1ull << 30))
		snprintf(out, len, "%.2f GiB", (double)n / (1ull << 30));
	else if (n >= (1ull << 20))
		snprintf(out, len, "%.1f MiB", (double)n / (1ull << 20));
	else
		snprintf(out, len, "%llu B", (unsigned long long)n);
}

static double seconds_since(const struct timespec *t0)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - t0->tv_sec) +
	       (double)(now.tv_nsec - t0->tv_nsec) / 1e9;
}

/*
 * Say once, at start-up, what the executor sees.  It runs in a child so the
 * supervisor itself never initialises CUDA (a CUDA context does not survive
 * fork, and the supervisor forks every worker).
 */
static void probe_executor(const struct pvgpu_executor_ops *exec)
{
	pid_t pid = fork();

	if (pid == 0) {
		char err[256] = "", name[256];
		struct pvgpu_exec *ex = exec->open(NULL, err, sizeof(err));
		int32_t count = 0;

		if (!ex) {
			log_warn("executor %s: no GPU available: %s; sessions will get cudaErrorNoDevice",
				 exec->name, err);
			_exit(0);
		}
		exec->device_count(ex, &count);
		log_info("executor %s: %d device(s)", exec->name, count);
		for (int32_t d = 0; d < count; d++) {
			uint64_t mem = 0;
			char human[32];

			if (exec->device_name(ex, d, name, sizeof(name)))
				snprintf(name, sizeof(name), "?");
			exec->device_total_mem(ex, d, &mem);
			human_bytes(mem, human, sizeof(human));
			log_info("  device %d: %s, %s", d, name, human);
		}
		exec->close(ex);
		_exit(0);
	}
	if (pid > 0)
		waitpid(pid, NULL, 0);
}

/* Read the policy file and put it in force; the old one stays on failure. */
static int load_policy(struct pvgpu_supervisor *sv)
{
	struct pvgpu_policy *p = malloc(sizeof(*p));
	char err[512];

	if (!p) {
		log_error("out of memory reading %s", sv->config);
		return -1;
	}
	if (pvgpu_policy_load(sv->config, p, err, sizeof(err)) ||
	    pvgpu_policy_apply(p, sv->acct, err, sizeof(err))) {
		log_error("policy: %s", err);
		free(p);
		return -1;
	}
	/* Weights reach live sessions too: the scheduler reads them per turn. */
	pvgpu_sched_set_weight(sv->sched, p->unknown.entry, p->unknown.weight);
	for (unsigned int i = 0; i < p->nvms; i++)
		pvgpu_sched_set_weight(sv->sched, p->vms[i].entry,
				       p->vms[i].weight);
	free(sv->policy);
	sv->policy = p;
	sv->wcfg.policy = p;	/* workers forked from now on get this one */
	log_info("policy %s: %u VM(s), unknown callers %s", sv->config, p->nvms,
		 p->allow_unknown ? "allowed" : "refused");
	return 0;
}

int pvgpu_supervisor_init(struct pvgpu_supervisor *sv,
			  const struct pvgpu_supervisor_config *cfg)
{
	char err[512];
	sigset_t mask;

	memset(sv, 0, sizeof(*sv));
	sv->sigfd = -1;
	sv->next_session = 1;
	sv->wcfg.exec = cfg->exec;
	sv->wcfg.block = cfg->block;
	sv->wcfg.required_token = cfg->tcp_token;
	sv->wcfg.module_cache = cfg->module_cache;
	sv->wcfg.poll_ns = (uint64_t)cfg->poll_us * 1000;
	sv->config = cfg->config;

	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	sigaddset(&mask, SIGCHLD);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);
	sv->sigfd = signalfd(-1, &mask, SFD_CLOEXEC);
	if (sv->sigfd < 0) {
		log_error("signalfd: %s", strerror(errno));
		goto err;
	}
	if (cfg->module_cache &&
	    pvgpu_modcache_init(cfg->module_cache, err, sizeof(err))) {
		log_error("%s", err);
		goto err;
	}
	sv->acct = pvgpu_accounting_create(cfg->max_sessions);
	if (!sv->acct) {
		log_error("cannot map the session table: %s", strerror(errno));
		goto err;
	}
	sv->sched = pvgpu_sched_create(sv->acct, cfg->sched_quantum_us);
	if (!sv->sched) {
		log_error("cannot map the scheduler's table: %s", strerror(errno));
		goto err;
	}
	sv->wcfg.sched = sv->sched;
	if (sv->config && load_policy(sv))
		goto err;
	for (int i = 0; i < cfg->nlisten; i++) {
		if (pvgpu_listen(cfg->listen[i], &sv->listeners[i], err,
				 sizeof(err))) {
			log_error("cannot listen on %s", err);
			goto err;
		}
		sv->nlisteners++;
		log_info("listening on %s", cfg->listen[i]);
	}
	probe_executor(cfg->exec);
	return 0;

err:
	pvgpu_supervisor_fini(sv);
	return -1;
}

void pvgpu_supervisor_fini(struct pvgpu_supervisor *sv)
{
	for (int i = 0; i < sv->nlisteners; i++)
		pvgpu_listener_close(&sv->listeners[i]);
	sv->nlisteners = 0;
	if (sv->sigfd >= 0)
		close(sv->sigfd);
	sv->sigfd = -1;
	pvgpu_sched_destroy(sv->sched);
	sv->sched = NULL;
	sv->wcfg.sched = NULL;
	pvgpu_accounting_destroy(sv->acct);
	sv->acct = NULL;
	free(sv->policy);
	sv->policy = NULL;
	sv->wcfg.policy = NULL;
}

static const char *vm_name(struct pvgpu_supervisor *sv, struct pvgpu_slot *slot)
{
	int vm = atomic_load(&slot->vm);

	return vm < 0 ? "-" : sv->acct->vms[vm].name;
}

static void start_session(struct pvgpu_supervisor *sv, struct pvgpu_listener *l)
{
	struct pvgpu_peer peer;
	struct pvgpu_slot *slot;
	sigset_t mask;
	pid_t pid;
	int fd;

	fd = pvgpu_accept(l, &peer);
	if (fd < 0) {
		log_warn("accept on %s failed: %s", l->uri, strerror(errno));
		return;
	}
	slot = pvgpu_accounting_claim(sv->acct);
	if (!slot) {
		log_warn("refused %s: all %u session slots are in use",
			 peer.identity, sv->acct->nslots);
		close(fd);
		return;
	}
	/*
	 * Unix and vsock callers are known from the channel now; a TCP
	 * caller only at hello, by its token, so its worker admits it.
	 */
	if (sv->policy && peer.kind != EP_TCP) {
		char why[256];

		if (pvgpu_admit(sv->policy, sv->acct, slot, &peer, NULL, why,
				sizeof(why))) {
			log_warn("refused %s via %s: %s", peer.identity, l->uri,
				 why);
			pvgpu_accounting_release(slot);
			close(fd);
			return;
		}
	}
	slot->session_id = sv->next_session++;
	snprintf(slot->identity, sizeof(slot->identity), "%s", peer.identity);
	clock_gettime(CLOCK_MONOTONIC, &slot->started);

	pid = fork();
	if (pid < 0) {
		log_error("fork for %s failed: %s", peer.identity, strerror(errno));
		pvgpu_accounting_release(slot);
		close(fd);
		return;
	}
	if (pid == 0) {
		char prefix[64];
		int rc;

		/* The worker: drop what belongs to the supervisor. */
		for (int i = 0; i < sv->nlisteners; i++)
			close(sv->listeners[i].fd);
		close(sv->sigfd);
		sigemptyset(&mask);
		sigprocmask(SIG_SETMASK, &mask, NULL);
		signal(SIGTERM, SIG_DFL);
		snprintf(prefix, sizeof(prefix), "session %llu",
			 (unsigned long long)slot->session_id);
		pvgpu_log_set_prefix(prefix);
		rc = pvgpu_worker_run(fd, &peer, &sv->wcfg, sv->acct, slot);
		_exit(rc);
	}
	slot->pid = pid;
	close(fd);
	log_info("session %llu start: %s via %s, vm %s (worker pid %d)",
		 (unsigned long long)slot->session_id, peer.identity, l->uri,
		 vm_name(sv, slot), (int)pid);
}

static void end_session(struct pvgpu_supervisor *sv, pid_t pid, int status)
{
	struct pvgpu_slot *slot = pvgpu_accounting_by_pid(sv->acct, pid);
	char how[64], h2d[32], d2h[32];

	if (!slot)
		return;	/* the start-up probe, or not ours */
	if (WIFSIGNALED(status))
		snprintf(how, sizeof(how), "worker killed by signal %d (%s)",
			 WTERMSIG(status), strsignal(WTERMSIG(status)));
	else if (WEXITSTATUS(status))
		snprintf(how, sizeof(how), "worker exit code %d",
			 WEXITSTATUS(status));
	else
		snprintf(how, sizeof(how), "ok");
	human_bytes(atomic_load(&slot->bytes_h2d), h2d, sizeof(h2d));
	human_bytes(atomic_load(&slot->bytes_d2h), d2h, sizeof(d2h));
	log_info("session %llu end: %s, vm %s, %.2f s, %llu calls, %s to device, %s from device, %s",
		 (unsigned long long)slot->session_id, slot->identity,
		 vm_name(sv, slot),
		 seconds_since(&slot->started),
		 (unsigned long long)atomic_load(&slot->calls), h2d, d2h, how);
	/* Whatever the worker held died with its process. */
	pvgpu_sched_slot_gone(sv->sched, slot);
	pvgpu_accounting_release(slot);
}

static void reap_workers(struct pvgpu_supervisor *sv)
{
	int status;
	pid_t pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
		end_session(sv, pid, status);
}

static int live_sessions(struct pvgpu_supervisor *sv)
{
	int n = 0;

	for (uint32_t i = 0; i < sv->acct->nslots; i++)
		n += sv->acct->slots[i].pid > 0;
	return n;
}

/* SIGTERM the workers, give them a few seconds, then SIGKILL the rest. */
static void stop_workers(struct pvgpu_supervisor *sv)
{
	struct timespec t0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (uint32_t i = 0; i < sv->acct->nslots; i++)
		if (sv->acct->slots[i].pid > 0)
			kill(sv->acct->slots[i].pid, SIGTERM);
	while (live_sessions(sv) && seconds_since(&t0) < 5.0) {
		struct timespec tick = { 0, 20 * 1000 * 1000 };

		nanosleep(&tick, NULL);
		reap_workers(sv);
	}
	for (uint32_t i = 0; i < sv->acct->nslots; i++)
		if (sv->acct->slots[i].pid > 0)
			kill(sv->acct->slots[i].pid, SIGKILL);
	while (live_sessions(sv)) {
		int status;
		pid_t pid = waitpid(-1, &status, 0);

		if (pid < 0)
			break;
		end_session(sv, pid, status);
	}
}

static void handle_signal(struct pvgpu_supervisor *sv)
{
	struct signalfd_siginfo si;

	if (read(sv->sigfd, &si, sizeof(si)) != sizeof(si))
		return;
	switch (si.ssi_signo) {
	case SIGCHLD:
		reap_workers(sv);
		break;
	case SIGHUP:
		/* Live sessions keep their VM; new limits reach them through the table. */
		if (!sv->config)
			log_info("SIGHUP: no policy file is loaded, nothing to reload");
		else if (load_policy(sv))
			log_warn("SIGHUP: %s not reloaded; the policy in force stays",
				 sv->config);
		break;
	case SIGTERM:
	case SIGINT:
		log_info("%s: shutting down (%d live session(s))",
			 strsignal((int)si.ssi_signo), live_sessions(sv));
		sv->stopping = 1;
		break;
	}
}

int pvgpu_supervisor_run(struct pvgpu_supervisor *sv)
{
	struct pollfd pfd[PVGPU_MAX_LISTENERS + 1];

	while (!sv->stopping) {
		int n;

		pfd[0].fd = sv->sigfd;
		pfd[0].events = POLLIN;
		for (int i = 0; i < sv->nlisteners; i++) {
			pfd[i + 1].fd = sv->listeners[i].fd;
			pfd[i + 1].events = POLLIN;
		}
		n = poll(pfd, (nfds_t)sv->nlisteners + 1, -1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			log_error("poll: %s", strerror(errno));
			return 1;
		}
		if (pfd[0].revents)
			handle_signal(sv);
		for (int i = 0; i < sv->nlisteners && !sv->stopping; i++)
			if (pfd[i + 1].revents & POLLIN)
				start_session(sv, &sv->listeners[i]);
	}
	stop_workers(sv);
	log_info("stopped");
	return 0;
}
