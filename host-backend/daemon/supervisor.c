/* supervisor.c - see supervisor.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#include "admit.h"
#include "log.h"
#include "modcache.h"
#include "supervisor.h"
#include "watchdog.h"

void pvgpu_human_bytes(uint64_t n, char *out, size_t len)
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
 * Say once, at start-up, what the executor sees, and return it (the devices
 * status and metrics report; -1 when the probe failed).  It runs in a child
 * so the supervisor itself never initialises CUDA (a CUDA context does not
 * survive fork, and the supervisor forks every worker); the child writes
 * what it found into a pipe.
 */
static int probe_executor(const struct pvgpu_executor_ops *exec,
			  const struct pvgpu_worker_config *wcfg,
			  struct pvgpu_gpu_info *gpus)
{
	const struct pvgpu_exec_config ecfg = {
		.remotes = wcfg->remotes,
		.nremotes = wcfg->nremotes,
		.remote_token = wcfg->remote_token,
		.probe = true,
	};
	int32_t count = 0;
	int p[2], n = -1;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC))
		return -1;
	pid = fork();
	if (pid == 0) {
		char err[256] = "";
		struct pvgpu_exec *ex = exec->open(&ecfg, err, sizeof(err));

		close(p[0]);
		if (!ex) {
			log_warn("executor %s: no GPU available: %s; sessions will get cudaErrorNoDevice",
				 exec->name, log_esc(err));
			_exit(0);
		}
		exec->driver_info(ex, NULL, &count);
		if (count < 0 || count > PVGPU_MAX_DEVICES)
			count = count < 0 ? 0 : PVGPU_MAX_DEVICES;
		log_info("executor %s: %d device(s)", exec->name, count);
		for (int32_t d = 0; d < count; d++) {
			char human[32];

			struct pvgpu_exec_device info = { .name = "?" };

			memset(&gpus[d], 0, sizeof(gpus[d]));
			(void)exec->device_info(ex, d, &info);
			snprintf(gpus[d].name, sizeof(gpus[d].name), "%s", info.name);
			gpus[d].mem_total = info.total_mem;
			pvgpu_human_bytes(gpus[d].mem_total, human, sizeof(human));
			if (info.objects_known) {
				char cb[32], sb[32];

				gpus[d].ctx_bytes = info.ctx_bytes;
				gpus[d].stream_bytes = info.stream_bytes;
				pvgpu_human_bytes(gpus[d].ctx_bytes, cb, sizeof(cb));
				pvgpu_human_bytes(gpus[d].stream_bytes, sb, sizeof(sb));
				log_info("  device %d: %s, %s; a context takes %s, a stream %s (charged to the VM's memory)",
					 d, log_esc(gpus[d].name), human, cb, sb);
			} else {
				gpus[d].ctx_bytes = gpus[d].stream_bytes = 0;
				log_info("  device %d: %s, %s; what a context and a stream take not measured (not charged)",
					 d, log_esc(gpus[d].name), human);
			}
		}
		exec->close(ex);
		/*
		 * Each write is under PIPE_BUF, so it arrives whole; one that
		 * fails reads as no devices, and the log above said them.
		 */
		if (write(p[1], &count, sizeof(count)) < 0 ||
		    write(p[1], gpus, (size_t)count * sizeof(*gpus)) < 0)
			_exit(1);
		_exit(0);
	}
	close(p[1]);
	if (pid > 0) {
		if (read(p[0], &count, sizeof(count)) == sizeof(count) &&
		    count >= 0 && count <= PVGPU_MAX_DEVICES &&
		    read(p[0], gpus, (size_t)count * sizeof(*gpus)) ==
		    (ssize_t)((size_t)count * sizeof(*gpus)))
			n = count;
		waitpid(pid, NULL, 0);
	}
	close(p[0]);
	return n;
}

void pvgpu_supervisor_publish(struct pvgpu_supervisor *sv)
{
	if (!sv->metrics)
		return;
	pvgpu_stats_update(&sv->stats);
	pvgpu_metrics_publish(sv->metrics, &sv->stats.snap);
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
	/* Weights and classes reach live sessions too: read per turn. */
	pvgpu_sched_set_weight(sv->sched, p->unknown.entry, p->unknown.weight);
	pvgpu_sched_set_priority(sv->sched, p->unknown.entry, p->unknown.latency);
	for (unsigned int i = 0; i < p->nvms; i++) {
		pvgpu_sched_set_weight(sv->sched, p->vms[i].entry,
				       p->vms[i].weight);
		pvgpu_sched_set_priority(sv->sched, p->vms[i].entry,
					 p->vms[i].latency);
	}
	free(sv->policy);
	sv->policy = p;
	sv->wcfg.policy = p;	/* workers forked from now on get this one */
	if (!sv->flag_remotes) {
		sv->wcfg.remotes = p->remotes;
		sv->wcfg.nremotes = p->nremotes;
	}
	if (!sv->flag_remote_token)
		sv->wcfg.remote_token = p->remote_token[0] ? p->remote_token : NULL;
	/* Before any worker forked under this policy: its MPS daemons. */
	pvgpu_mps_want(&sv->mps, p->mps_gpus);
	pvgpu_sched_set_spatial(sv->sched, p->mps_gpus);
	if (sv->registry)	/* VMs the policy stopped naming get theirs back */
		pvgpu_registry_apply(sv->registry, p, sv->acct);
	pvgpu_watchdog_arm(sv);	/* a VM's call_timeout may need the tick */
	pvgpu_stats_set_policy(&sv->stats, p);
	log_info("policy %s: %u VM(s), unknown callers %s", sv->config, p->nvms,
		 p->allow_unknown ? "allowed" : "refused");
	pvgpu_supervisor_publish(sv);	/* new VMs and quotas */
	return 0;
}

/*
 * Whom a transport that offers channels (vchan: to each domain as it
 * appears) should offer one to: a caller the policy or the registry
 * names, by its identity or the name the channel vouches for; everyone
 * when there is neither (as for local callers without a policy) or the
 * policy admits unknown callers.
 */
static int want_caller(const struct pvgpu_identity *id, const char *name,
		       void *arg)
{
	struct pvgpu_supervisor *sv = arg;

	if (!sv->policy && !sv->registry)
		return 1;
	if (sv->policy && (sv->policy->allow_unknown ||
			   (name[0] && pvgpu_policy_by_name(sv->policy, name)) ||
			   pvgpu_policy_lookup(sv->policy, id)))
		return 1;
	return sv->registry && name[0] &&
	       pvgpu_registry_by_name(sv->registry, name) != NULL;
}

/*
 * Listen for each vhost-user VM of r on the socket its vhost-device-vsock
 * forwards to, and stop listening for VMs that left r or moved.  Sessions
 * already running are not touched: they hold their own connections.
 */
static void sync_vm_listeners(struct pvgpu_supervisor *sv,
			      const struct pvgpu_registry *r)
{
	char err[512];

	for (int i = 0; i < sv->nvm_listeners;) {
		struct pvgpu_listener *l = &sv->vm_listeners[i];
		const struct pvgpu_vm_record *rec = pvgpu_registry_by_name(r, l->vm);

		if (rec && rec->vhost_user && !strcmp(rec->listen, l->path)) {
			i++;
			continue;
		}
		pvgpu_listener_close(l);
		*l = sv->vm_listeners[--sv->nvm_listeners];
	}
	for (unsigned int i = 0; i < r->nvms; i++) {
		const struct pvgpu_vm_record *rec = &r->vms[i];
		int have = 0;

		if (!rec->vhost_user)
			continue;
		for (int j = 0; j < sv->nvm_listeners; j++)
			have |= !strcmp(sv->vm_listeners[j].vm, rec->name);
		if (have)
			continue;
		if (pvgpu_listen_vm(rec->listen, rec->name,
				    &sv->vm_listeners[sv->nvm_listeners], err,
				    sizeof(err))) {
			log_warn("registry: vm %s: cannot listen on %s", rec->name,
				 err);
			continue;
		}
		sv->nvm_listeners++;
	}
}

static int same_record(const struct pvgpu_vm_record *a,
		       const struct pvgpu_vm_record *b)
{
	return a->vhost_user == b->vhost_user && a->cid == b->cid &&
	       a->gpu == b->gpu && a->memory == b->memory &&
	       !strcmp(a->listen, b->listen) &&
	       !memcmp(&a->window, &b->window, sizeof(a->window));
}

/* One line per VM that came, changed or left. */
static void log_registry_changes(const struct pvgpu_registry *old,
				 const struct pvgpu_registry *r)
{
	for (unsigned int i = 0; i < r->nvms; i++) {
		const struct pvgpu_vm_record *rec = &r->vms[i];
		const struct pvgpu_vm_record *was =
			old ? pvgpu_registry_by_name(old, rec->name) : NULL;
		char quota[32] = "none", window[PVGPU_PATH_LEN + 32] = "none";

		if (was && same_record(was, rec))
			continue;
		if (rec->memory)
			pvgpu_human_bytes(rec->memory, quota, sizeof(quota));
		if (rec->window.path[0])
			snprintf(window, sizeof(window), "%s (%llu MiB)",
				 rec->window.path,
				 (unsigned long long)(rec->window.size >> 20));
		log_info("registry: vm %s %s: cid %u, %s%s, window %s, gpu %u, quota %s",
			 rec->name, was ? "changed" : "attached", rec->cid,
			 rec->vhost_user ? "vhost-user via " : "kernel vsock",
			 rec->vhost_user ? rec->listen : "", window, rec->gpu,
			 quota);
	}
	for (unsigned int i = 0; old && i < old->nvms; i++)
		if (!pvgpu_registry_by_name(r, old->vms[i].name))
			log_info("registry: vm %s detached (its live sessions go on)",
				 old->vms[i].name);
}

/*
 * A kernel-vsock VM reaches us over AF_VSOCK: listen on its port (7100
 * unless the registry says otherwise) for any CID, once, if no --listen
 * did.  Who the caller is comes from its CID (identify_vm).
 */
static void listen_vsock_ports(struct pvgpu_supervisor *sv,
			       const struct pvgpu_registry *r)
{
	for (unsigned int i = 0; i < r->nvms; i++) {
		char uri[64], err[512];
		int have = 0;

		if (r->vms[i].vhost_user)
			continue;
		snprintf(uri, sizeof(uri), "vsock://any:%u", r->vms[i].port);
		for (int j = 0; j < sv->nlisteners; j++)
			have |= !strcmp(sv->listeners[j].uri, uri);
		if (have)
			continue;
		if (sv->nlisteners == PVGPU_MAX_LISTENERS) {
			log_warn("registry: vm %s: no room to listen on %s",
				 r->vms[i].name, uri);
			continue;
		}
		if (pvgpu_listen(uri, want_caller, sv, &sv->listeners[sv->nlisteners],
				 err, sizeof(err))) {
			log_warn("registry: vm %s: cannot listen on %s",
				 r->vms[i].name, err);
			continue;
		}
		sv->nlisteners++;
		log_info("listening on %s for kernel-vsock VMs", uri);
	}
}

/* Read the VM registry and put it in force; the old one stays on failure. */
static int load_registry(struct pvgpu_supervisor *sv)
{
	struct pvgpu_registry *r = malloc(sizeof(*r));
	char err[512];

	if (!r) {
		log_error("out of memory reading the registry %s", sv->registry_dir);
		return -1;
	}
	if (pvgpu_registry_load(sv->registry_dir, r, err, sizeof(err))) {
		log_error("%s", err);
		free(r);
		return -1;
	}
	pvgpu_registry_apply(r, sv->policy, sv->acct);
	log_registry_changes(sv->registry, r);
	sync_vm_listeners(sv, r);
	listen_vsock_ports(sv, r);
	free(sv->registry);
	sv->registry = r;
	return 0;
}

/* The registry directory, made (with its parent) if need be, and watched. */
static int watch_registry(struct pvgpu_supervisor *sv)
{
	char parent[PVGPU_PATH_LEN];
	char *slash;

	snprintf(parent, sizeof(parent), "%s", sv->registry_dir);
	slash = strrchr(parent, '/');
	if (slash && slash != parent) {
		*slash = '\0';
		mkdir(parent, 0755);
	}
	if (mkdir(sv->registry_dir, 0755) && errno != EEXIST) {
		log_error("registry %s: %s", sv->registry_dir, strerror(errno));
		return -1;
	}
	/*
	 * pvgpu-vm writes an entry under a temporary name and renames it
	 * into place, and removes it with unlink: a move or a delete is a
	 * change.  Direct writes (an operator's editor) end in a close.
	 */
	sv->inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (sv->inotify_fd < 0 ||
	    inotify_add_watch(sv->inotify_fd, sv->registry_dir,
			      IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE |
			      IN_CLOSE_WRITE) < 0) {
		log_error("cannot watch the registry %s: %s", sv->registry_dir,
			  strerror(errno));
		return -1;
	}
	return 0;
}

/* Drain the inotify events; any of them means: read the registry again. */
static void registry_changed(struct pvgpu_supervisor *sv)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));

	while (read(sv->inotify_fd, buf, sizeof(buf)) > 0)
		;
	if (load_registry(sv))
		log_warn("registry %s not reread; the VMs in force stay",
			 sv->registry_dir);
}

/* The event loop's fixed entries (pvgpu_supervisor_run says which). */
#define ADMIN_FDS	(1 + PVGPU_ADMIN_CLIENTS)
#define FIRST_FD	(5 + ADMIN_FDS)

/*
 * In a child the supervisor forked (a session's worker, a checkpointer):
 * it outlives nothing — if the supervisor dies, so does it, rather than
 * hold a GPU that a restarted pvgpud cannot see in its table (the check
 * after prctl covers a supervisor that died before it) — and takes the
 * signals the supervisor blocked for its signalfd back.
 */
void pvgpu_supervisor_child(pid_t parent, const char *log_prefix)
{
	sigset_t none;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGTERM, SIG_DFL);
	pvgpu_log_set_prefix(log_prefix);
}

/*
 * The operator's socket: --admin PATH, which must work, else the default
 * path, which need not (a second pvgpud on the host, one run by a user
 * without the run directory) and then is only said.
 */
static int open_admin(struct pvgpu_supervisor *sv, const char *path)
{
	char def[PVGPU_ADMIN_PATH_MAX], err[512];

	if (!path) {
		const char *rt = getenv("RUNTIME_DIRECTORY");
		size_t n = rt ? strcspn(rt, ":") : 0;	/* systemd: the first */

		if (n && rt[0] == '/')
			snprintf(def, sizeof(def), "%.*s/pvgpud-admin.sock", (int)n, rt);
		else
			pvgpu_admin_default_path(def, sizeof(def));
	}
	if (!pvgpu_admin_open(&sv->admin, path ? path : def,
			      pvgpu_suspend_admin, sv, err, sizeof(err))) {
		log_info("admin socket %s", sv->admin.path);
		return 0;
	}
	if (path) {
		log_error("%s", err);
		return -1;
	}
	log_info("no admin socket (pvgpuctl session): %s", err);
	return 0;
}

int pvgpu_supervisor_init(struct pvgpu_supervisor *sv,
			  const struct pvgpu_supervisor_config *cfg)
{
	struct pvgpu_gpu_info gpus[PVGPU_MAX_DEVICES];
	char err[512];
	sigset_t mask;
	int ngpus;

	memset(sv, 0, sizeof(*sv));
	sv->sigfd = -1;
	sv->inotify_fd = -1;
	sv->timerfd = -1;
	sv->call_timeout_ms = cfg->call_timeout_ms;
	sv->next_session = 1;
	sv->wcfg.exec = cfg->exec;
	sv->wcfg.block = cfg->block;
	sv->tcp_token = cfg->tcp_token;
	sv->wcfg.module_cache = cfg->module_cache;
	sv->wcfg.module_cache_max = cfg->module_cache_max;
	sv->wcfg.poll_ns = (uint64_t)cfg->poll_us * 1000;
	sv->wcfg.wait_spin_ns = (uint64_t)cfg->wait_spin_us * 1000;
	sv->wcfg.capture_output = 1;
	sv->wcfg.reattach_fd = -1;
	sv->wcfg.remotes = cfg->remotes;
	sv->wcfg.nremotes = cfg->nremotes;
	sv->flag_remotes = cfg->nremotes;
	sv->wcfg.remote_token = cfg->remote_token;
	sv->flag_remote_token = cfg->remote_token != NULL;
	sv->config = cfg->config;
	sv->registry_dir = cfg->registry;
	/* MPS is for this host's GPUs: the cuda executor's, and the sim's that stands in for it. */
	sv->mps.enabled = !strcmp(cfg->exec->name, "cuda") ||
			  !strcmp(cfg->exec->name, "sim");
	for (int n = 0; n < PVGPU_MAX_DEVICES; n++)
		sv->wcfg.mps_pipe[n] = sv->mps.gpu[n].pipe;
	sv->admin.fd = -1;
	sv->suspend.wake_fd = -1;

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
	if (pvgpu_stats_init(&sv->stats, sv->acct)) {
		log_error("out of memory for the session figures");
		goto err;
	}
	sv->sched = pvgpu_sched_create(sv->acct, cfg->sched_quantum_us);
	if (!sv->sched) {
		log_error("cannot map the scheduler's table: %s", strerror(errno));
		goto err;
	}
	sv->wcfg.sched = sv->sched;
	sv->stats.sched = sv->sched;
	if (sv->config && load_policy(sv))
		goto err;
	if (sv->registry_dir && (watch_registry(sv) || load_registry(sv)))
		goto err;
	if (pvgpu_watchdog_init(sv))
		goto err;
	sv->owed = malloc(sv->acct->nslots * sizeof(*sv->owed));
	sv->gone = calloc(sv->acct->nslots, 1);
	if (!sv->owed || !sv->gone) {
		log_error("out of memory for the session table");
		goto err;
	}
	for (uint32_t i = 0; i < sv->acct->nslots; i++)
		sv->owed[i].listener = -1;
	if (pvgpu_reattach_init(sv)) {
		log_error("out of memory for the session table");
		goto err;
	}
	if (pvgpu_suspend_init(sv, cfg->suspend_timeout_ms) ||
	    open_admin(sv, cfg->admin))
		goto err;
	sv->pfd = calloc(FIRST_FD + PVGPU_MAX_LISTENERS + PVGPU_REGISTRY_MAX +
			 (size_t)cfg->max_unidentified, sizeof(*sv->pfd));
	if (!sv->pfd ||
	    pvgpu_unid_init(&sv->unid, cfg->max_unidentified, cfg->hello_timeout_ms)) {
		log_error("out of memory for the connections waiting for their hello");
		goto err;
	}
	for (int i = 0; i < cfg->nlisten; i++) {
		if (pvgpu_listen(cfg->listen[i], want_caller, sv, &sv->listeners[i],
				 err, sizeof(err))) {
			log_error("cannot listen on %s", err);
			goto err;
		}
		sv->nlisteners++;
		log_info("listening on %s", sv->listeners[i].uri);
	}
	ngpus = probe_executor(cfg->exec, &sv->wcfg, gpus);
	for (int d = 0; d < ngpus; d++) {
		sv->acct->ctx_bytes[d] = gpus[d].ctx_bytes;
		sv->acct->stream_bytes[d] = gpus[d].stream_bytes;
		sv->suspend.mem_total[d] = gpus[d].mem_total;
	}
	pvgpu_stats_set_gpus(&sv->stats, ngpus, gpus);
	if (cfg->metrics) {
		sv->metrics = pvgpu_metrics_start(cfg->metrics, err, sizeof(err));
		if (!sv->metrics) {
			log_error("%s", err);
			goto err;
		}
		clock_gettime(CLOCK_MONOTONIC, &sv->next_tick);
		pvgpu_supervisor_publish(sv);
		log_info("metrics on http://%s/metrics", cfg->metrics);
	}
	return 0;

err:
	pvgpu_supervisor_fini(sv);
	return -1;
}

void pvgpu_supervisor_fini(struct pvgpu_supervisor *sv)
{
	pvgpu_mps_stop(&sv->mps);	/* nothing left after run()'s */
	pvgpu_admin_close(&sv->admin);
	pvgpu_suspend_fini(sv);
	pvgpu_metrics_stop(sv->metrics);
	sv->metrics = NULL;
	pvgpu_unid_fini(&sv->unid);	/* they name their listeners */
	if (sv->acct)
		pvgpu_reattach_fini(sv);
	free(sv->pfd);
	sv->pfd = NULL;
	for (int i = 0; i < sv->nlisteners; i++)
		pvgpu_listener_close(&sv->listeners[i]);
	sv->nlisteners = 0;
	for (int i = 0; i < sv->nvm_listeners; i++)
		pvgpu_listener_close(&sv->vm_listeners[i]);
	sv->nvm_listeners = 0;
	if (sv->inotify_fd >= 0)
		close(sv->inotify_fd);
	sv->inotify_fd = -1;
	free(sv->registry);
	sv->registry = NULL;
	free(sv->owed);
	sv->owed = NULL;
	free(sv->gone);
	sv->gone = NULL;
	sv->ngone = 0;
	if (sv->sigfd >= 0)
		close(sv->sigfd);
	sv->sigfd = -1;
	pvgpu_watchdog_fini(sv);
	pvgpu_stats_fini(&sv->stats);
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

/*
 * The registered VM a connection belongs to, from the channel alone: the
 * VM whose vhost-user socket accepted it, or the VM with its CID over
 * kernel vsock.  -1 only for a VM socket whose VM has just left.
 */
static int identify_vm(struct pvgpu_supervisor *sv,
		       const struct pvgpu_listener *l, struct pvgpu_peer *peer)
{
	const struct pvgpu_vm_record *rec = NULL;

	if (!sv->registry)
		return 0;
	if (l->vm[0]) {
		rec = pvgpu_registry_by_name(sv->registry, l->vm);
		if (!rec)
			return -1;
	} else if (peer->id.kind != PVGPU_ID_NONE) {
		/* A vhost-user VM's CID means nothing to the host kernel. */
		rec = pvgpu_registry_lookup(sv->registry, &peer->id);
		if (rec && rec->vhost_user)
			rec = NULL;
	}
	if (rec)
		peer->vm = *rec;
	return 0;
}

/*
 * A refused caller's line, under its source's limit: its network address,
 * else its VM, else who the channel says it is, less the pid (a uid's
 * callers are one source however many processes they run).
 */
static void say_refused(struct pvgpu_supervisor *sv,
			const struct pvgpu_listener *l,
			const struct pvgpu_peer *peer,
			const struct pvgpu_pending *hello, const char *why)
{
	char source[64];

	if (peer->addr[0])
		snprintf(source, sizeof(source), "%s", peer->addr);
	else if (peer->vm.name[0])
		snprintf(source, sizeof(source), "vm %.60s", peer->vm.name);
	else
		snprintf(source, sizeof(source), "%.*s",
			 (int)strcspn(peer->identity, ","), peer->identity);
	if (hello)
		pvgpu_say_from(&sv->refused, source, "%s via %s: refused at hello: %s",
			       peer->identity, l->uri, why);
	else
		pvgpu_say_from(&sv->refused, source, "refused %s via %s: %s",
			       peer->identity, l->uri, why);
}

/*
 * Admit a caller whose channel or hello said who it is, and fork its
 * worker.  hello: the hello the supervisor read from it (unidentified.h),
 * which the worker serves first; NULL where the channel named the caller
 * at accept.  conn is the worker's or closed when this returns.
 */
static void start_session(struct pvgpu_supervisor *sv, struct pvgpu_listener *l,
			  struct pvgpu_peer *peer, struct pvgpu_conn *conn,
			  const struct pvgpu_pending *hello)
{
	struct pvgpu_slot *slot;
	char why[256];
	pid_t pid, parent;
	int rc, reattach_fd;

	/*
	 * A caller's token (the hello's, or the one a channel carries itself:
	 * verbs' connect request) is checked against --tcp-token before any
	 * session exists; with a policy, admission below looks it up.
	 */
	if (peer->id.kind == PVGPU_ID_TOKEN && !sv->policy && sv->tcp_token) {
		struct pvgpu_identity want;

		if (pvgpu_identity_set(&want, PVGPU_ID_TOKEN, sv->tcp_token) ||
		    !pvgpu_identity_equal(&want, &peer->id)) {
			say_refused(sv, l, peer, hello, "wrong or missing token");
			goto err_conn;
		}
	}
	slot = pvgpu_accounting_claim(sv->acct);
	if (!slot) {
		snprintf(why, sizeof(why), "all %u session slots are in use",
			 sv->acct->nslots);
		say_refused(sv, l, peer, hello, why);
		goto err_conn;
	}
	if ((sv->policy || sv->registry) &&
	    pvgpu_admit(sv->policy, sv->acct, slot, peer, why, sizeof(why))) {
		say_refused(sv, l, peer, hello, why);
		goto err_slot;
	}
	slot->session_id = sv->next_session++;
	snprintf(slot->identity, sizeof(slot->identity), "%s", peer->identity);
	clock_gettime(CLOCK_MONOTONIC, &slot->started);
	if (hello && (peer->features & PVGPU_TR_ID_AT_HELLO) &&
	    atomic_load(&slot->vm) >= 0)
		log_info("session %llu: %s is vm %s",
			 (unsigned long long)slot->session_id, peer->identity,
			 vm_name(sv, slot));

	pvgpu_reattach_prepare(sv, (uint32_t)(slot - sv->acct->slots), peer,
			       l, &reattach_fd);
	parent = getpid();
	pid = fork();
	if (pid < 0) {
		log_error("fork for %s failed: %s", peer->identity, strerror(errno));
		if (reattach_fd >= 0)
			close(reattach_fd);
		pvgpu_reattach_end(sv, (uint32_t)(slot - sv->acct->slots));
		goto err_slot;
	}
	if (pid == 0) {
		char prefix[64];

		/* The worker: drop what belongs to the supervisor. */
		for (int i = 0; i < sv->nlisteners; i++)
			pvgpu_listener_forget(&sv->listeners[i]);
		for (int i = 0; i < sv->nvm_listeners; i++)
			pvgpu_listener_forget(&sv->vm_listeners[i]);
		pvgpu_unid_forget(&sv->unid);
		if (sv->inotify_fd >= 0)
			close(sv->inotify_fd);
		close(sv->sigfd);
		close(sv->timerfd);
		pvgpu_admin_forget(&sv->admin);
		pvgpu_suspend_forget(sv);
		pvgpu_reattach_child(sv, (uint32_t)(slot - sv->acct->slots),
				     reattach_fd);
		pvgpu_metrics_forget(sv->metrics, conn->fd);
		snprintf(prefix, sizeof(prefix), "session %llu",
			 (unsigned long long)slot->session_id);
		pvgpu_supervisor_child(parent, prefix);
		rc = pvgpu_worker_run(conn, peer, &sv->wcfg, sv->acct, slot,
				      hello ? hello->msg : NULL,
				      hello ? hello->got : 0);
		_exit(rc);
	}
	slot->pid = pid;
	if (reattach_fd >= 0)
		close(reattach_fd);
	conn->ops->release(conn);
	if (l->ops->done && l >= sv->listeners && l < sv->listeners + sv->nlisteners)
		sv->owed[slot - sv->acct->slots] = (struct pvgpu_owed){
			(int)(l - sv->listeners), peer->cookie };
	log_info("session %llu start: %s via %s, vm %s (worker pid %d)",
		 (unsigned long long)slot->session_id, peer->identity, l->uri,
		 vm_name(sv, slot), (int)pid);
	pvgpu_supervisor_publish(sv);
	return;

err_slot:
	pvgpu_accounting_release(slot);
err_conn:
	if (hello)	/* it waits for an answer: say no rather than hang up */
		pvgpu_pending_answer(hello, CUDA_ERROR_NOT_PERMITTED);
	conn->ops->release(conn);
	if (l->ops->done)
		l->ops->done(l, peer->cookie);
}

/*
 * A hello that asks to resume a session (reattach.h): its connection goes
 * to that session's worker, or is answered and closed here.
 */
static void resume_session(struct pvgpu_supervisor *sv,
			   const struct pvgpu_pending *p,
			   const struct pvgpu_hello_req *req)
{
	char why[160];
	int rc = pvgpu_reattach_try(sv, p, req, why, sizeof(why));

	if (rc < 0) {
		say_refused(sv, p->l, &p->peer, p, why);
		pvgpu_pending_answer(p, CUDA_ERROR_NOT_PERMITTED);
	} else if (rc > 0) {
		pvgpu_pending_answer(p, CUDA_ERROR_NOT_READY);
	}
	p->conn->ops->release(p->conn);
	if (p->l->ops->done)
		p->l->ops->done(p->l, p->peer.cookie);
}

/*
 * The i-th connection waiting for its hello has something to read: once
 * its hello is whole, the token in it is who calls, and its session can
 * start.
 */
static void hello_progress(struct pvgpu_supervisor *sv, unsigned int i)
{
	struct pvgpu_hello_req req;
	struct pvgpu_pending *p = pvgpu_unid_read(&sv->unid, i, &req);

	if (!p)
		return;
	/* The decoder took at most 256 bytes: it fits. */
	if ((p->peer.features & PVGPU_TR_ID_AT_HELLO) &&
	    pvgpu_identity_set(&p->peer.id, PVGPU_ID_TOKEN, req.token))
		p->peer.id.kind = PVGPU_ID_NONE;
	if (req.resume_lo | req.resume_hi)
		resume_session(sv, p, &req);
	else
		start_session(sv, p->l, &p->peer, p->conn, p);
	free(p);
}

/* Would a session of peer be admitted now (a slot, its VM's limits)? */
static int would_admit(struct pvgpu_supervisor *sv,
		       const struct pvgpu_peer *peer)
{
	struct pvgpu_slot *slot = pvgpu_accounting_claim(sv->acct);
	char why[256];
	int ok;

	if (!slot)
		return 0;
	ok = !(sv->policy || sv->registry) ||
	     !pvgpu_admit(sv->policy, sv->acct, slot, peer, why, sizeof(why));
	pvgpu_accounting_release(slot);
	return ok;
}

/*
 * One caller on l.  Where the channel says who it is (a uid, a CID, a
 * domid, verbs' token), its session starts now; where only its hello will
 * (tcp), it waits for that in the set of unidentified callers, holding
 * no slot and no worker.
 */
static void accept_caller(struct pvgpu_supervisor *sv, struct pvgpu_listener *l)
{
	struct pvgpu_peer peer;
	struct pvgpu_conn *conn;
	int rc;

	rc = pvgpu_accept(l, &peer, &conn);
	if (rc == -EAGAIN)
		return;		/* nobody after all */
	if (rc) {
		log_warn("accept on %s failed: %s", l->uri, strerror(-rc));
		return;
	}
	if (identify_vm(sv, l, &peer)) {
		char why[96];

		snprintf(why, sizeof(why), "vm %s is no longer registered", l->vm);
		say_refused(sv, l, &peer, NULL, why);
		conn->ops->release(conn);
		if (l->ops->done)
			l->ops->done(l, peer.cookie);
		return;
	}
	/*
	 * A caller with a session that may be resumed: its hello is read
	 * here, in case it asks to (reattach.h); unless it would be refused
	 * a session now anyway and none of its sessions waits for it.
	 */
	if (!(peer.features & PVGPU_TR_ID_AT_HELLO)) {
		int expected = pvgpu_reattach_expected(sv, &peer, l);

		if (!expected || (expected == 1 && !would_admit(sv, &peer))) {
			start_session(sv, l, &peer, conn, NULL);
			return;
		}
	}
	/* A hello sent with the connection is often here already. */
	if (!pvgpu_unid_add(&sv->unid, l, &peer, conn))
		hello_progress(sv, sv->unid.n - 1);
}

/*
 * A worker is gone: free its slot once the scheduler's table holds nothing
 * of it.  The device locks are tried, never waited on (a worker may be
 * stopped holding one): while one is busy, what the session held is freed
 * but the slot stays taken (pid -1, no session), so that no new session
 * inherits what the table still says of it, and the tick tries again.
 */
static void free_slot(struct pvgpu_supervisor *sv, struct pvgpu_slot *slot)
{
	uint32_t i = (uint32_t)(slot - sv->acct->slots);

	if (!pvgpu_sched_slot_gone(sv->sched, slot, sv->gone_watch)) {
		pvgpu_accounting_release(slot);
		if (sv->gone[i]) {
			sv->gone[i] = 0;
			if (!--sv->ngone)
				pvgpu_watchdog_arm(sv);	/* no tick needed for it */
		}
		return;
	}
	if (sv->gone[i])
		return;
	log_debug("session %llu: its slot is kept until a scheduler lock is free",
		  (unsigned long long)slot->session_id);
	pvgpu_accounting_release(slot);
	slot->pid = -1;
	sv->gone[i] = 1;
	if (!sv->ngone++)
		pvgpu_watchdog_arm(sv);
}

static void end_session(struct pvgpu_supervisor *sv, pid_t pid, int status)
{
	struct pvgpu_slot *slot = pvgpu_accounting_by_pid(sv->acct, pid);
	char how[64], h2d[32], d2h[32];
	const char *wd;

	if (pvgpu_mps_reaped(&sv->mps, pid, status))
		return;
	if (!slot)
		return;	/* the start-up probe, or not ours */
	wd = WIFSIGNALED(status) ? pvgpu_watchdog_killed(sv, slot) : NULL;
	if (wd)
		snprintf(how, sizeof(how), "%s", wd);
	/* A mapping whose file lost pages under it: most likely a window. */
	else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS)
		snprintf(how, sizeof(how), "worker killed by SIGBUS (a shared window shrank under it?)");
	else if (WIFSIGNALED(status))
		snprintf(how, sizeof(how), "worker killed by signal %d (%s)",
			 WTERMSIG(status), strsignal(WTERMSIG(status)));
	else if (WEXITSTATUS(status))
		snprintf(how, sizeof(how), "worker exit code %d",
			 WEXITSTATUS(status));
	else
		snprintf(how, sizeof(how), "ok");
	pvgpu_human_bytes(atomic_load(&slot->bytes_h2d), h2d, sizeof(h2d));
	pvgpu_human_bytes(atomic_load(&slot->bytes_d2h), d2h, sizeof(d2h));
	log_info("session %llu end: %s, vm %s, %.2f s, %llu calls, %s to device, %s from device, %s",
		 (unsigned long long)slot->session_id, slot->identity,
		 vm_name(sv, slot),
		 seconds_since(&slot->started),
		 (unsigned long long)atomic_load(&slot->calls), h2d, d2h, how);
	/* Its figures count for its VM after its slot is gone. */
	pvgpu_stats_fold(&sv->stats, slot);
	/* Whatever the worker held died with its process. */
	pvgpu_watchdog_forget(sv, slot);
	{
		struct pvgpu_owed *o = &sv->owed[slot - sv->acct->slots];

		/* A channel offered per caller (vchan) is offered again. */
		if (o->listener >= 0 && o->listener < sv->nlisteners &&
		    sv->listeners[o->listener].ops->done)
			sv->listeners[o->listener].ops->done(&sv->listeners[o->listener],
							     o->cookie);
		o->listener = -1;
	}
	pvgpu_reattach_end(sv, (uint32_t)(slot - sv->acct->slots));
	free_slot(sv, slot);
	pvgpu_supervisor_publish(sv);
}

/* The watchdog's tick: slots whose scheduler locks were busy, again. */
static void retry_gone(struct pvgpu_supervisor *sv)
{
	for (uint32_t i = 0; sv->ngone && i < sv->acct->nslots; i++)
		if (sv->gone[i])
			free_slot(sv, &sv->acct->slots[i]);
}

static void reap_workers(struct pvgpu_supervisor *sv)
{
	int status;
	pid_t pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
		if (!pvgpu_suspend_reaped(sv, pid, status))
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
	/* A stopped worker acts on SIGTERM only once it is continued. */
	for (uint32_t i = 0; i < sv->acct->nslots; i++) {
		if (sv->acct->slots[i].pid > 0) {
			kill(sv->acct->slots[i].pid, SIGTERM);
			kill(sv->acct->slots[i].pid, SIGCONT);
		}
	}
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
		if (!pvgpu_suspend_reaped(sv, pid, status))
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
		if (!sv->config && !sv->registry_dir)
			log_info("SIGHUP: no policy file or registry, nothing to reload");
		if (sv->config && load_policy(sv))
			log_warn("SIGHUP: %s not reloaded; the policy in force stays",
				 sv->config);
		if (sv->registry_dir && load_registry(sv))
			log_warn("SIGHUP: registry %s not reread; the VMs in force stay",
				 sv->registry_dir);
		break;
	case SIGTERM:
	case SIGINT:
		log_info("%s: shutting down (%d live session(s))",
			 strsignal((int)si.ssi_signo), live_sessions(sv));
		sv->stopping = 1;
		break;
	}
}

/* Milliseconds until the rates are due; -1 (no timeout) without --metrics. */
static int ms_to_tick(struct pvgpu_supervisor *sv)
{
	struct timespec now;
	long long ms;

	if (!sv->metrics)
		return -1;
	clock_gettime(CLOCK_MONOTONIC, &now);
	ms = (long long)(sv->next_tick.tv_sec - now.tv_sec) * 1000 +
	     (sv->next_tick.tv_nsec - now.tv_nsec) / 1000000;
	return ms < 0 ? 0 : ms > PVGPU_STATS_TICK_MS ? PVGPU_STATS_TICK_MS : (int)ms;
}

/* The sooner of two poll timeouts (-1: none). */
static int sooner(int a, int b)
{
	if (a < 0)
		return b;
	return b >= 0 && b < a ? b : a;
}

/*
 * How long poll may sleep: until the next tick, the server's timeout or
 * the first deadline of a hello.
 */
static int poll_timeout(struct pvgpu_supervisor *sv)
{
	return sooner(sooner(sooner(ms_to_tick(sv),
				    pvgpu_metrics_timeout_ms(sv->metrics)),
			     sooner(pvgpu_admin_timeout_ms(&sv->admin),
				    pvgpu_suspend_expire(sv))),
		      sooner(pvgpu_unid_timeout_ms(&sv->unid),
			     pvgpu_mps_timeout_ms(&sv->mps)));
}

/* Once a tick: the rates over the time since the last one. */
static void maybe_tick(struct pvgpu_supervisor *sv)
{
	struct timespec now;

	if (!sv->metrics || ms_to_tick(sv) > 0)
		return;
	clock_gettime(CLOCK_MONOTONIC, &now);
	pvgpu_stats_tick(&sv->stats, &now);
	pvgpu_metrics_publish(sv->metrics, &sv->stats.snap);
	sv->next_tick = now;
	sv->next_tick.tv_sec += PVGPU_STATS_TICK_MS / 1000;
	sv->next_tick.tv_nsec += (PVGPU_STATS_TICK_MS % 1000) * 1000000L;
	if (sv->next_tick.tv_nsec >= 1000000000L) {
		sv->next_tick.tv_sec++;
		sv->next_tick.tv_nsec -= 1000000000L;
	}
}

int pvgpu_supervisor_run(struct pvgpu_supervisor *sv)
{
	/* signals, the watchdog's timer, the registry, the metrics server's
	 * fd (-1: none), the workers' wake eventfd, the admin socket and its
	 * callers (ADMIN_FDS, unused ones -1), then the listeners and the
	 * VMs' sockets, then the connections waiting for their hello */
	struct pollfd *pfd = sv->pfd;
	struct pvgpu_listener *owner[PVGPU_MAX_LISTENERS + PVGPU_REGISTRY_MAX];
	const int first = FIRST_FD;

	while (!sv->stopping) {
		unsigned int nu = sv->unid.n, na;
		int n, nl = 0;

		pfd[0] = (struct pollfd){ .fd = sv->sigfd, .events = POLLIN };
		pfd[1] = (struct pollfd){ .fd = sv->timerfd, .events = POLLIN };
		pfd[2] = (struct pollfd){ .fd = sv->inotify_fd, .events = POLLIN };
		pfd[3] = (struct pollfd){ .fd = pvgpu_metrics_fd(sv->metrics),
					  .events = POLLIN };	/* poll skips -1 */
		pfd[4] = (struct pollfd){ .fd = sv->suspend.wake_fd,
					  .events = POLLIN };
		for (int i = 0; i < ADMIN_FDS; i++)
			pfd[5 + i] = (struct pollfd){ .fd = -1 };
		na = pvgpu_admin_fds(&sv->admin, &pfd[5]);
		for (int i = 0; i < sv->nlisteners; i++)
			owner[nl++] = &sv->listeners[i];
		for (int i = 0; i < sv->nvm_listeners; i++)
			owner[nl++] = &sv->vm_listeners[i];
		for (int i = 0; i < nl; i++)
			pfd[first + i] = (struct pollfd){
				.fd = pvgpu_listener_fd(owner[i]), .events = POLLIN };
		for (unsigned int i = 0; i < nu; i++)
			pfd[first + nl + i] = (struct pollfd){
				.fd = pvgpu_unid_fd(&sv->unid, i), .events = POLLIN };
		n = poll(pfd, (nfds_t)first + (nfds_t)nl + nu, poll_timeout(sv));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			log_error("poll: %s", strerror(errno));
			return 1;
		}
		/*
		 * Hellos first, so that callers who hung up leave room in the
		 * budget for those accepted next; from the last, as one that
		 * leaves the set is replaced by the last, already looked at.
		 */
		for (unsigned int i = nu; i-- > 0 && !sv->stopping;)
			if (pfd[first + nl + (int)i].revents)
				hello_progress(sv, i);
		pvgpu_unid_expire(&sv->unid);
		/* Sessions next: a reload may close a listener in owner[]. */
		for (int i = 0; i < nl && !sv->stopping; i++)
			if (pfd[first + i].revents & POLLIN)
				accept_caller(sv, owner[i]);
		if (pfd[0].revents)
			handle_signal(sv);
		if (pfd[1].revents) {
			pvgpu_watchdog_tick(sv);
			retry_gone(sv);
		}
		if (pfd[2].revents && !sv->stopping)
			registry_changed(sv);
		if (pfd[4].revents)
			pvgpu_suspend_wake(sv);
		pvgpu_admin_run(&sv->admin, &pfd[5], na);
		pvgpu_suspend_expire(sv);
		/* Callers a listener has without a new event (a domain whose
		 * session ended, offered again). */
		for (int i = 0; i < sv->nlisteners && !sv->stopping; i++) {
			struct pvgpu_listener *l = &sv->listeners[i];

			while (l->ops->pending && l->ops->pending(l) &&
			       !sv->stopping) {
				uint64_t before = sv->next_session;

				accept_caller(sv, l);
				if (sv->next_session == before)
					break;	/* refused, failed or waiting: next round */
			}
		}
		maybe_tick(sv);
		pvgpu_mps_tick(&sv->mps);
		/* Whatever is ready, and its timeouts; cheap when idle, never blocks. */
		if (sv->metrics)
			pvgpu_metrics_run(sv->metrics);
	}
	/* The workers are MPS's clients: they go first, and no restart meanwhile. */
	sv->mps.stopping = 1;
	stop_workers(sv);
	pvgpu_mps_stop(&sv->mps);
	log_info("stopped");
	return 0;
}
