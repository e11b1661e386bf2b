/*
 * main.c - pvgpud, the pvgpu host backend.
 *
 *   pvgpud --listen URI [--listen URI ...] --executor cuda|sim
 *          [--config FILE] [--log-level error|warn|info|debug]
 *          [--block-size BYTES] [--max-sessions N] [--tcp-token TOKEN]
 *          [--module-cache DIR] [--module-cache-max SIZE]
 *          [--poll-us N] [--wait-spin-us N]
 *          [--call-timeout SECONDS] [--registry DIR] [--metrics ADDR:PORT]
 *          [--sched-quantum-us N] [--executor-dir DIR] [--remote URI ...]
 *          [--remote-token TOKEN] [--hello-timeout SECONDS]
 *          [--max-unidentified N] [--admin PATH] [--suspend-timeout SECONDS]
 *   pvgpud --executor help | --help | --version
 *
 * The usage text below is the list of options (README's table is checked
 * against it): an option added here goes there too.
 * --executor remote presents the GPUs of other pvgpud nodes as this one's:
 * each --remote URI (verbs://, tcp://, unix://; else `node = URI` lines of
 * the config's [remote] section) is a node, their devices in that order;
 * --remote-token (or [remote] token = ...) is who this node is to them.
 * Runs in the foreground, logs to stderr, exits cleanly on SIGTERM; SIGHUP
 * rereads --config (the per-VM policy, see policy.h) and the registry.
 * --call-timeout is the watchdog's limit on one call of a session
 * (watchdog.h): decimal seconds, default 300, 0 for none, else at least
 * the watchdog's tick; a VM's call_timeout in the policy overrides it.
 * --registry names the directory where qemu-device records the VMs it
 * gave a vGPU (registry.h; /run/pvgpu/vms on a host): pvgpud
 * watches it, listens on each vhost-user VM's socket and maps each VM's
 * window.  --module-cache-max bounds the bytes of the module cache
 * (modcache.h), whose directory per VM each VM's module_cache bounds in
 * turn.  --metrics serves GET /metrics (Prometheus text) on a loopback
 * address (see metrics.h); `pvgpuctl status` reads it.  Under contention
 * each GPU is shared between VMs by their policy weights, in turns of
 * --sched-quantum-us per unit of weight (gpusched.h); 0 leaves it to the GPU.
 * A TCP caller is known by the token in its hello, which the supervisor
 * reads before it gives the caller a worker or a session slot: at most
 * --max-unidentified such callers wait for that at once (a quarter of
 * them from one address), each at most --hello-timeout (unidentified.h).
 * --admin is the operator's socket (admin.h: pvgpuctl session list,
 * suspend, resume); --suspend-timeout bounds each suspend and resume
 * (suspend.h).
 * Exit codes: 0 success, 1 runtime failure, 2 bad usage.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "addr.h"
#include "executor.h"
#include "log.h"
#include "metrics.h"
#include "modcache.h"
#include "ready.h"
#include "size.h"
#include "supervisor.h"
#include "wait.h"
#include "watchdog.h"
#include "pvgpu_proto.h"
#include "wire.h"

/* The release (debian/version.sh), from the Makefile's PVGPU_VERSION. */
#ifndef PVGPU_VERSION
#error "PVGPU_VERSION is not defined: build pvgpud with the top-level Makefile"
#endif

static const char usage[] =
	"usage: pvgpud --listen URI [--listen URI ...] --executor cuda|sim|remote\n"
	"              [--config FILE] [--log-level error|warn|info|debug]\n"
	"              [--block-size BYTES] [--max-sessions N] [--tcp-token TOKEN]\n"
	"              [--module-cache DIR] [--module-cache-max SIZE]\n"
	"              [--poll-us N] [--wait-spin-us N]\n"
	"              [--call-timeout SECONDS] [--registry DIR] [--metrics ADDR:PORT]\n"
	"              [--sched-quantum-us N] [--executor-dir DIR]\n"
	"              [--remote URI ...] [--remote-token TOKEN]\n"
	"              [--hello-timeout SECONDS] [--max-unidentified N]\n"
	"              [--admin PATH] [--suspend-timeout SECONDS] [--ready-fd N]\n"
	"       pvgpud --executor help | --help | --version\n"
	"--executor help lists the executors this build has (from --executor-dir)\n"
	"--listen URIs: unix:///PATH (shm:///PATH is the same socket), tcp://HOST:PORT,\n"
	"      vsock://any:PORT; loaded where built: vchan://[NAME] (Xen),\n"
	"      verbs://ADDR:PORT (RDMA)\n"
	"--remote URIs (--executor remote): verbs://HOST:PORT, tcp://HOST:PORT,\n"
	"      unix:///PATH\n"
	"--module-cache-max: the module cache's bytes in all (K/M/G/T), default 4G;\n"
	"           each VM's are bounded by its policy's module_cache (256M)\n"
	"--metrics: Prometheus text at http://ADDR:PORT/metrics; loopback only,\n"
	"           e.g. 127.0.0.1:9400 (what `pvgpuctl status` reads)\n"
	"--admin: the operator's socket (pvgpuctl session), default\n"
	"           $RUNTIME_DIRECTORY/pvgpud-admin.sock under systemd, else\n"
	"           /run/pvgpu/pvgpud-admin.sock as root, else /tmp/pvgpud-UID/admin.sock\n"
	"--suspend-timeout: how long a suspend or a resume may take, default 120\n"
	"--ready-fd: once every --listen address is bound, write a line\n"
	"           \"listening URI\" per address (tcp port 0: the port it got),\n"
	"           then \"ready\", to this open descriptor and close it; under\n"
	"           systemd (Type=notify) READY=1 goes to $NOTIFY_SOCKET as well\n"
	"--version: the release and protocol versions, the optional parts built in\n";

static int bad_usage(const char *what)
{
	fprintf(stderr, "pvgpud: %s (try --help)\n", what);
	return 2;
}

/*
 * What --listen URIs can be told wrong before anything listens: a Unix
 * socket's path must be absolute and, where something is there already,
 * a socket (a stale one is replaced; a config file named by a typo must
 * not be); a TCP port is 1..65535.  0, or -1 after saying what is wrong.
 */
static int check_listen(const char *uri)
{
	char scheme[16], host[256], port[8], why[512];
	const char *rest;
	struct stat st;

	if (pvgpu_uri_split(uri, scheme, sizeof(scheme), &rest))
		return 0;	/* said by the listener: it lists the schemes */
	if (!strcmp(scheme, "unix") || !strcmp(scheme, "shm")) {
		if (rest[0] != '/') {
			snprintf(why, sizeof(why), "--listen %s: the socket's path must be absolute (%s:///PATH)",
				 log_esc(uri), scheme);
		} else if (strlen(rest) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
			snprintf(why, sizeof(why), "--listen %s: the socket's path is longer than %zu bytes",
				 log_esc(uri),
				 sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
		} else if (!lstat(rest, &st) && !S_ISSOCK(st.st_mode)) {
			snprintf(why, sizeof(why), "--listen %s: %s exists and is not a socket; not replacing it",
				 log_esc(uri), log_esc(rest));
		} else {
			return 0;
		}
		bad_usage(why);
		return -1;
	}
	if (!strcmp(scheme, "tcp") &&
	    pvgpu_listen_host_port(rest, host, sizeof(host), port, sizeof(port))) {
		snprintf(why, sizeof(why), "--listen %s: want tcp://HOST:PORT, PORT 0..65535 (0: any free port)",
			 log_esc(uri));
		bad_usage(why);
		return -1;
	}
	return 0;
}

/* --hello-timeout SECONDS into *ms: 0, or -1 after saying what is wrong.
 * A hello is one round trip: a millisecond at least, an hour at most. */
static int parse_hello_timeout(const char *s, uint64_t *ms)
{
	char why[400];

	if (!pvgpu_parse_duration(s, 0, 1, 3600 * 1000, ms) && *ms)
		return 0;
	snprintf(why, sizeof(why), "--hello-timeout %s: want decimal seconds 0.001..3600",
		 log_esc(s));
	bad_usage(why);
	return -1;
}

/* --suspend-timeout SECONDS into *ms: 0, or -1 after saying what is wrong.
 * Checkpointing a GPU's memory takes seconds (DESIGN §7): at most a day. */
static int parse_suspend_timeout(const char *s, uint64_t *ms)
{
	char why[400];

	if (!pvgpu_parse_duration(s, 0, 100, 24 * 3600 * 1000, ms) && *ms)
		return 0;
	snprintf(why, sizeof(why), "--suspend-timeout %s: want decimal seconds 0.1..86400",
		 log_esc(s));
	bad_usage(why);
	return -1;
}

/* --call-timeout SECONDS into *ms: 0, or -1 after saying what is wrong. */
static int parse_call_timeout(const char *s, uint64_t *ms)
{
	char why[400];

	switch (pvgpu_parse_duration(s, 0, PVGPU_WATCHDOG_TICK_MS,
				     PVGPU_MAX_CALL_TIMEOUT_MS, ms)) {
	case 0:
		return 0;
	case PVGPU_DURATION_SHORT:
		snprintf(why, sizeof(why), "--call-timeout %s is under the watchdog's resolution of %.2f s (0: no limit)",
			 log_esc(s), PVGPU_WATCHDOG_TICK_MS / 1e3);
		break;
	default:
		snprintf(why, sizeof(why), "--call-timeout %s: want decimal seconds 0..%d (0: no limit)",
			 log_esc(s), PVGPU_MAX_CALL_TIMEOUT_MS / 1000);
		break;
	}
	bad_usage(why);
	return -1;
}

/* --metrics ADDR:PORT: 0, or -1 after saying what is wrong with it. */
static int check_metrics(const char *addr)
{
#ifdef PVGPU_NO_MHD
	(void)addr;
	bad_usage("--metrics is not available: this pvgpud was built without libmicrohttpd (libmicrohttpd-dev)");
	return -1;
#else
	struct sockaddr_storage sa;
	socklen_t salen;
	char err[256];

	if (pvgpu_metrics_parse_addr(addr, &sa, &salen, err, sizeof(err))) {
		bad_usage(err);
		return -1;
	}
	return 0;
#endif
}

/* "1048576", "1M", "256K": at least 4 KiB, at most the DATA frame limit. */
static int parse_block(const char *s, uint32_t *out)
{
	uint64_t v;

	if (pvgpu_parse_size(s, &v) || v < 4096 || v > PVGPU_MAX_DATA_FRAME)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

/* A whole number in [min, max], digits only: 0, or -1. */
static int parse_uint(const char *s, unsigned long min, unsigned long max,
		      uint32_t *out)
{
	char *end;
	unsigned long n;

	if (*s < '0' || *s > '9')
		return -1;
	n = strtoul(s, &end, 10);
	if (*end || n < min || n > max)
		return -1;
	*out = (uint32_t)n;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "executor", required_argument, NULL, 'e' },
		{ "config", required_argument, NULL, 'c' },
		{ "log-level", required_argument, NULL, 'v' },
		{ "block-size", required_argument, NULL, 'b' },
		{ "max-sessions", required_argument, NULL, 'm' },
		{ "tcp-token", required_argument, NULL, 't' },
		{ "module-cache", required_argument, NULL, 'M' },
		{ "module-cache-max", required_argument, NULL, 'C' },
		{ "poll-us", required_argument, NULL, 'P' },
		{ "wait-spin-us", required_argument, NULL, 'W' },
		{ "registry", required_argument, NULL, 'R' },
		{ "call-timeout", required_argument, NULL, 'T' },
		{ "metrics", required_argument, NULL, 'X' },
		{ "sched-quantum-us", required_argument, NULL, 'Q' },
		{ "executor-dir", required_argument, NULL, 'E' },
		{ "remote", required_argument, NULL, 'r' },
		{ "remote-token", required_argument, NULL, 'k' },
		{ "hello-timeout", required_argument, NULL, 'H' },
		{ "max-unidentified", required_argument, NULL, 'U' },
		{ "admin", required_argument, NULL, 'A' },
		{ "suspend-timeout", required_argument, NULL, 'S' },
		{ "ready-fd", required_argument, NULL, 'F' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *listen[PVGPU_MAX_LISTENERS];
	const char *remotes[PVGPU_MAX_REMOTES];
	struct pvgpu_supervisor_config cfg = {
		.listen = listen,
		.remotes = remotes,
		.block = PVGPU_DEFAULT_BLOCK,
		.max_sessions = 256,
		.max_unidentified = PVGPU_MAX_UNIDENTIFIED,
		.hello_timeout_ms = PVGPU_HELLO_TIMEOUT_MS,
		.poll_us = 50,
		.wait_spin_us = PVGPU_WAIT_SPIN_US,
		.call_timeout_ms = 300 * 1000,
		.sched_quantum_us = PVGPU_SCHED_QUANTUM_US,
		.module_cache_max = PVGPU_MODCACHE_MAX,
		.suspend_timeout_ms = PVGPU_SUSPEND_TIMEOUT_MS,
	};
	struct pvgpu_supervisor sv;
	char cache_dir[64], exec_dir[4096], err[512];
	const char *exec_name = NULL;
	int opt, rc, ready_fd = -1;
	uint32_t n;

	pvgpu_executor_default_dir(exec_dir, sizeof(exec_dir));

	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'l':
			if (cfg.nlisten == PVGPU_MAX_LISTENERS)
				return bad_usage("too many --listen addresses");
			if (check_listen(optarg))
				return 2;
			listen[cfg.nlisten++] = optarg;
			break;
		case 'e':
			exec_name = optarg;
			break;
		case 'r':
			if (cfg.nremotes == PVGPU_MAX_REMOTES)
				return bad_usage("too many --remote nodes");
			if (!strstr(optarg, "://") || strlen(optarg) >= 256)
				return bad_usage("--remote takes a URI: verbs://HOST:PORT, tcp://HOST:PORT or unix:///PATH");
			remotes[cfg.nremotes++] = optarg;
			break;
		case 'k':
			if (!*optarg || strlen(optarg) > 256)
				return bad_usage("--remote-token must be 1..256 bytes");
			cfg.remote_token = optarg;
			break;
		case 'E':
			snprintf(exec_dir, sizeof(exec_dir), "%s", optarg);
			break;
		case 'c':
			cfg.config = optarg;
			break;
		case 'v':
			if (pvgpu_log_set_level(optarg))
				return bad_usage("--log-level must be error, warn, info or debug");
			break;
		case 'b':
			if (parse_block(optarg, &cfg.block))
				return bad_usage("--block-size must be 4K..16M");
			break;
		case 'm':
			if (parse_uint(optarg, 1, 65536, &cfg.max_sessions))
				return bad_usage("--max-sessions must be 1..65536");
			break;
		case 't':
			/* Empty, it would let every TCP caller in: hello's token is "". */
			if (!*optarg || strlen(optarg) > 256)
				return bad_usage("--tcp-token must be 1..256 bytes");
			cfg.tcp_token = optarg;
			break;
		case 'M':
			cfg.module_cache = optarg;
			break;
		case 'C':
			if (pvgpu_parse_size(optarg, &cfg.module_cache_max))
				return bad_usage("--module-cache-max must be a size (e.g. 4G; 0 keeps no image)");
			break;
		case 'P':
			if (parse_uint(optarg, 0, 100000, &cfg.poll_us))
				return bad_usage("--poll-us must be 0..100000");
			break;
		case 'W':
			if (parse_uint(optarg, 0, 10000000, &cfg.wait_spin_us))
				return bad_usage("--wait-spin-us must be 0..10000000");
			break;
		case 'R':
			if (optarg[0] != '/')
				return bad_usage("--registry must be an absolute directory path");
			cfg.registry = optarg;
			break;
		case 'T':
			/* Fractions are for tests; a day is more than any call needs. */
			if (parse_call_timeout(optarg, &cfg.call_timeout_ms))
				return 2;
			break;
		case 'H':
			if (parse_hello_timeout(optarg, &cfg.hello_timeout_ms))
				return 2;
			break;
		case 'A':
			if (optarg[0] != '/' ||
			    strlen(optarg) >= sizeof(((struct sockaddr_un *)0)->sun_path))
				return bad_usage("--admin must be an absolute socket path under 108 bytes");
			cfg.admin = optarg;
			break;
		case 'S':
			if (parse_suspend_timeout(optarg, &cfg.suspend_timeout_ms))
				return 2;
			break;
		case 'U':
			if (parse_uint(optarg, 1, 65536, &cfg.max_unidentified))
				return bad_usage("--max-unidentified must be 1..65536");
			break;
		case 'X':
			if (check_metrics(optarg))
				return 2;
			cfg.metrics = optarg;
			break;
		case 'Q':
			if (parse_uint(optarg, 0, 1000000, &cfg.sched_quantum_us))
				return bad_usage("--sched-quantum-us must be 0..1000000");
			break;
		case 'F':
			if (parse_uint(optarg, 0, 65535, &n) || !pvgpu_ready_fd_ok((int)n))
				return bad_usage("--ready-fd must name a descriptor open for writing");
			ready_fd = (int)n;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		case 'V':
			/* What a bug report needs: the release, the wire
			 * it speaks, and the optional parts it has. */
			printf("pvgpud %s (protocol %u), built with:%s%s\n",
			       PVGPU_VERSION, PVGPU_PROTO_VERSION,
#ifdef PVGPU_NO_INIH
			       "",
#else
			       " inih",
#endif
#ifdef PVGPU_NO_MHD
			       "");
#else
			       " metrics");
#endif
			return 0;
		default:
			return bad_usage("unknown option");
		}
	}
	if (optind < argc)
		return bad_usage("unexpected argument");
	if (exec_name && !strcmp(exec_name, "help")) {
		pvgpu_executor_list(stdout, exec_dir);
		return 0;
	}
	if (exec_name) {
		cfg.exec = pvgpu_executor_find(exec_name, exec_dir, err, sizeof(err));
		if (!cfg.exec)
			return bad_usage(err);
	}
	if (!cfg.nlisten && !cfg.registry)
		return bad_usage("at least one --listen URI (or a --registry of VMs) is needed");
	if (!cfg.exec)
		return bad_usage("--executor NAME is needed (--executor help lists them)");
	/* The remote executor forwards to nodes: without any it has nothing to offer. */
	if (!strcmp(cfg.exec->name, "remote") && !cfg.nremotes && !cfg.config)
		return bad_usage("--executor remote needs --remote URI (or a [remote] section in --config)");
	/* With a policy, TCP callers are told apart by their [vm] tokens. */
	if (cfg.config && cfg.tcp_token)
		return bad_usage("--tcp-token and --config exclude each other; put tokens in the [vm] sections");

	/* Module images are kept across sessions unless told otherwise. */
	if (!cfg.module_cache) {
		snprintf(cache_dir, sizeof(cache_dir), "/tmp/pvgpud-modules-%u",
			 (unsigned int)geteuid());
		cfg.module_cache = cache_dir;
	}
	if (pvgpu_supervisor_init(&sv, &cfg))
		return 1;
	if (cfg.call_timeout_ms)
		log_info("pvgpud started: executor %s, block %u bytes, call timeout %.1f s",
			 cfg.exec->name, cfg.block, cfg.call_timeout_ms / 1e3);
	else
		log_info("pvgpud started: executor %s, block %u bytes, no call timeout",
			 cfg.exec->name, cfg.block);
	if (cfg.sched_quantum_us)
		log_info("GPU turns between VMs: %u us per unit of weight",
			 cfg.sched_quantum_us);
	else
		log_info("GPU turns between VMs: off (--sched-quantum-us 0)");
	pvgpu_ready_say(&sv, ready_fd);
	rc = pvgpu_supervisor_run(&sv);
	pvgpu_supervisor_fini(&sv);
	return rc;
}
