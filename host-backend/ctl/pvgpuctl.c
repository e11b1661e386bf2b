/*
 * pvgpuctl - the operator's tool.
 *
 *   pvgpuctl devices [URI]   connect like a guest and list the backend's GPUs
 *   pvgpuctl attach DOMAIN [--memory 8G] [--gpu 0] [pvgpu-vm options]
 *   pvgpuctl detach DOMAIN [-c URI]
 *                            give a defined libvirt domain a vGPU, or take
 *                            it away (qemu-device's pvgpu-vm does the work)
 *   pvgpuctl status [[--metrics] ADDR:PORT | URL]
 *                            per GPU and per VM: sessions, memory, calls/s,
 *                            MB/s each way, share of GPU time
 *   pvgpuctl session list|suspend ID|resume ID [--admin PATH]
 *                            live sessions and their state; suspend one
 *                            (its device memory to host memory) or resume
 *                            it, through pvgpud's admin socket (admin.h)
 *
 * status reads what `pvgpud --metrics ADDR:PORT` serves (default
 * 127.0.0.1:9400), fetched with libcurl.  One source for both: the
 * Prometheus text is already there for monitoring, so status needs no
 * second server, protocol or socket in pvgpud, and it shows exactly the
 * figures Prometheus gets.  Built without libcurl, status says so.
 *
 * Exit codes: 0 success, 1 runtime failure, 2 bad usage.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef PVGPU_NO_CURL
#include <curl/curl.h>
#endif

#include "admin.h"
#include "client.h"
#include "clock.h"
#include "config_env.h"
#include "log.h"
#include "pvgpu_guest.h"

#define USAGE	"usage: pvgpuctl devices [URI]\n" \
		"       pvgpuctl status [[--metrics] ADDR:PORT | URL]\n" \
		"       pvgpuctl attach DOMAIN [--memory 8G] [--gpu 0] [--window-size 256M]\n" \
		"                       [--vsock auto|kernel|vhost-user] [--cid N] [-c URI]\n" \
		"       pvgpuctl detach DOMAIN [-c URI]\n" \
		"       pvgpuctl session list|suspend ID|resume ID [--admin PATH]\n"
#define DEFAULT_METRICS	"127.0.0.1:9400"

/*
 * A name from the backend on the operator's terminal: its controls and
 * stray bytes shown as \xNN (log.h), its backslashes as they are, as the
 * metrics labels carry them.
 */
#define SHOWN_MAX	(64 * 4 + 1)
static const char *shown(char *buf, const char *s)
{
	return pvgpu_escape(buf, SHOWN_MAX, s, PVGPU_ESC_STR,
			    PVGPU_ESC_KEEP_BACKSLASH);
}

/*
 * Connect as a guest would, through the guest's own client library, so
 * that every transport a guest can use works here too (tcp with
 * PVGPU_TOKEN, vsock inside a VM, shm), configured by the same PVGPU_*
 * variables.
 */
static int cmd_devices(const char *uri)
{
	struct pvgpu_client_config cfg;
	const struct pvgpu_client_info *info;
	struct pvgpu_client *c;
	char err[256];

	pvgpu_config_from_env(&cfg);
	/* A listing moves no bulk data: leave a VM's window to its programs. */
	cfg.window = 0;
	if (pvgpu_client_open(uri, &cfg, &c, err, sizeof(err))) {
		fprintf(stderr, "pvgpuctl: %s: %s\n", uri, err);
		return 1;
	}
	info = pvgpu_client_info(c);
	printf("%s: protocol %u, %d device(s), block %u bytes\n", uri,
	       info->version, info->device_count, info->data_block);
	for (int32_t d = 0; d < info->device_count; d++) {
		char name[SHOWN_MAX];
		struct pvgpu_device_get_name_req nreq = { .device = d };
		struct pvgpu_device_get_name_rep nrep;
		struct pvgpu_device_total_mem_req mreq = { .device = d };
		struct pvgpu_device_total_mem_rep mrep;

		if (pvgpu_call_device_get_name(c, &nreq, &nrep) ||
		    pvgpu_call_device_total_mem(c, &mreq, &mrep))
			break;
		printf("  device %d: %s, %llu MiB\n", d, shown(name, nrep.name),
		       (unsigned long long)(mrep.bytes >> 20));
	}
	pvgpu_client_close(c);
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

/* --- status ----------------------------------------------------------------- */

#define MAX_ROWS	128
#define MAX_TEXT	(4u << 20)	/* far more than pvgpud ever sends */

struct gpu_row {
	char id[16];
	char name[64];
	double sessions, mem_used, mem_total;
};

struct vm_row {
	char name[64];
	double sessions, mem_used, mem_quota;
	double calls_rate, h2d_rate, d2h_rate, share;
};

struct status {
	struct gpu_row gpus[MAX_ROWS];
	int ngpus;
	struct vm_row vms[MAX_ROWS];
	int nvms;
	double interval;
	int samples;		/* pvgpu_ samples understood */
};

/* One sample line: its name, up to 4 labels and its value. */
struct sample {
	char name[128];
	struct {
		char key[32], value[128];
	} labels[4];
	int nlabels;
	double value;
};

static const char *label_of(const struct sample *s, const char *key)
{
	for (int i = 0; i < s->nlabels; i++)
		if (!strcmp(s->labels[i].key, key))
			return s->labels[i].value;
	return NULL;
}

/* `name{k="v",...} value [timestamp]`: 0, or -1 for a line not of that form. */
static int parse_sample(const char *p, struct sample *s)
{
	size_t n = strcspn(p, "{ ");
	char *end;

	memset(s, 0, sizeof(*s));
	if (!n || n >= sizeof(s->name))
		return -1;
	memcpy(s->name, p, n);
	p += n;
	if (*p == '{') {
		p++;
		while (*p != '}') {
			char *k, *v;
			size_t kn = strcspn(p, "=");
			size_t vn = 0;

			if (s->nlabels == 4 || !kn || kn >= sizeof(s->labels[0].key) ||
			    p[kn] != '=' || p[kn + 1] != '"')
				return -1;
			k = s->labels[s->nlabels].key;
			v = s->labels[s->nlabels].value;
			memcpy(k, p, kn);
			for (p += kn + 2; *p && *p != '"'; p++) {
				char c = *p;

				if (c == '\\') {
					c = *++p;
					if (c == 'n')
						c = '\n';
					else if (c != '\\' && c != '"')
						return -1;
				}
				if (vn + 1 >= sizeof(s->labels[0].value))
					return -1;
				v[vn++] = c;
			}
			if (*p != '"')
				return -1;
			s->nlabels++;
			p++;
			if (*p == ',')
				p++;
			else if (*p != '}')
				return -1;
		}
		p++;
	}
	if (*p != ' ')
		return -1;
	/* strtod reads NaN, +Inf and -Inf as the format writes them. */
	s->value = strtod(p, &end);
	return end == p ? -1 : 0;
}

static struct gpu_row *gpu_row(struct status *st, const char *id)
{
	for (int i = 0; i < st->ngpus; i++)
		if (!strcmp(st->gpus[i].id, id))
			return &st->gpus[i];
	if (st->ngpus == MAX_ROWS)
		return NULL;
	snprintf(st->gpus[st->ngpus].id, sizeof(st->gpus[0].id), "%s", id);
	return &st->gpus[st->ngpus++];
}

static struct vm_row *vm_row(struct status *st, const char *name)
{
	for (int i = 0; i < st->nvms; i++)
		if (!strcmp(st->vms[i].name, name))
			return &st->vms[i];
	if (st->nvms == MAX_ROWS)
		return NULL;
	snprintf(st->vms[st->nvms].name, sizeof(st->vms[0].name), "%s", name);
	st->vms[st->nvms].share = NAN;
	return &st->vms[st->nvms++];
}

/* Fold one sample into the table; what status does not show is skipped. */
static void take_sample(struct status *st, const struct sample *s)
{
	const char *gpu = label_of(s, "gpu"), *vm = label_of(s, "vm");
	const char *dir = label_of(s, "direction");
	struct gpu_row *g;
	struct vm_row *v;

	if (!strcmp(s->name, "pvgpu_sampling_interval_seconds")) {
		st->interval = s->value;
		st->samples++;
		return;
	}
	if (gpu && !strncmp(s->name, "pvgpu_gpu_", 10) && (g = gpu_row(st, gpu))) {
		const char *what = s->name + 10;

		st->samples++;
		if (!strcmp(what, "info") && label_of(s, "name"))
			snprintf(g->name, sizeof(g->name), "%s", label_of(s, "name"));
		else if (!strcmp(what, "sessions"))
			g->sessions = s->value;
		else if (!strcmp(what, "memory_used_bytes"))
			g->mem_used = s->value;
		else if (!strcmp(what, "memory_total_bytes"))
			g->mem_total = s->value;
		return;
	}
	if (vm && !strncmp(s->name, "pvgpu_vm_", 9) && (v = vm_row(st, vm))) {
		const char *what = s->name + 9;

		st->samples++;
		if (!strcmp(what, "sessions"))
			v->sessions = s->value;
		else if (!strcmp(what, "memory_used_bytes"))
			v->mem_used = s->value;
		else if (!strcmp(what, "memory_quota_bytes"))
			v->mem_quota = s->value;
		else if (!strcmp(what, "calls_per_second"))
			v->calls_rate = s->value;
		else if (!strcmp(what, "bytes_per_second") && dir &&
			 !strcmp(dir, "h2d"))
			v->h2d_rate = s->value;
		else if (!strcmp(what, "bytes_per_second") && dir &&
			 !strcmp(dir, "d2h"))
			v->d2h_rate = s->value;
		else if (!strcmp(what, "gpu_time_share"))
			v->share = s->value;
	}
}

static void parse_metrics(char *text, struct status *st)
{
	char *save, *line;

	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		struct sample s;

		if (line[0] == '#' || parse_sample(line, &s))
			continue;
		take_sample(st, &s);
	}
}

static void human(double bytes, char *out, size_t len)
{
	if (bytes >= (double)(1ull << 30))
		snprintf(out, len, "%.2f GiB", bytes / (double)(1ull << 30));
	else if (bytes >= (double)(1ull << 20))
		snprintf(out, len, "%.1f MiB", bytes / (double)(1ull << 20));
	else if (bytes >= 1024)
		snprintf(out, len, "%.1f KiB", bytes / 1024);
	else
		snprintf(out, len, "%.0f B", bytes);
}

static void print_status(const struct status *st)
{
	int w = 2;

	printf("%-4s %-28s %8s  %s\n", "GPU", "DEVICE", "SESSIONS", "MEMORY USED");
	for (int i = 0; i < st->ngpus; i++) {
		const struct gpu_row *g = &st->gpus[i];
		char used[32], total[32], id[SHOWN_MAX], name[SHOWN_MAX];

		human(g->mem_used, used, sizeof(used));
		human(g->mem_total, total, sizeof(total));
		printf("%-4s %-28s %8.0f  %s of %s\n", shown(id, g->id),
		       g->name[0] ? shown(name, g->name) : "?", g->sessions,
		       used, total);
	}
	if (!st->ngpus)
		printf("(no device: pvgpud found none at start-up)\n");

	for (int i = 0; i < st->nvms; i++) {
		char name[SHOWN_MAX];

		if ((int)strlen(shown(name, st->vms[i].name)) > w)
			w = (int)strlen(name);
	}
	printf("\n%-*s %8s  %-24s %9s %9s %9s %9s\n", w, "VM", "SESSIONS",
	       "MEMORY USED / QUOTA", "CALLS/S", "MB/S H2D", "MB/S D2H",
	       "GPU TIME");
	for (int i = 0; i < st->nvms; i++) {
		const struct vm_row *v = &st->vms[i];
		char used[32], quota[32], mem[72], share[16], name[SHOWN_MAX];

		human(v->mem_used, used, sizeof(used));
		if (v->mem_quota > 0)
			human(v->mem_quota, quota, sizeof(quota));
		else
			snprintf(quota, sizeof(quota), "none");
		snprintf(mem, sizeof(mem), "%s / %s", used, quota);
		if (isnan(v->share))
			snprintf(share, sizeof(share), "-");
		else
			snprintf(share, sizeof(share), "%.1f%%", v->share * 100);
		printf("%-*s %8.0f  %-24s %9.1f %9.2f %9.2f %9s\n", w,
		       shown(name, v->name),
		       v->sessions, mem, v->calls_rate, v->h2d_rate / 1e6,
		       v->d2h_rate / 1e6, share);
	}
	if (st->interval > 0)
		printf("\nRates over the last %.1f s; GPU TIME: the VM's share of the GPU time measured then (-: none measured).\n",
		       st->interval);
	else
		printf("\nNo rates yet: pvgpud takes them every second.\n");
	for (int i = 0; i < st->nvms; i++)
		if (!strcmp(st->vms[i].name, "-"))
			printf("VM -: sessions of no VM of the policy (all of them without --config).\n");
}

#ifdef PVGPU_NO_CURL

static int fetch(const char *url, char **text)
{
	(void)url;
	(void)text;
	fprintf(stderr, "pvgpuctl: status is not available: this pvgpuctl was built without libcurl (libcurl4-openssl-dev)\n");
	return -1;
}

#else

struct body {
	char *p;
	size_t n;
};

static size_t collect(char *data, size_t size, size_t nmemb, void *ud)
{
	struct body *b = ud;
	size_t len = size * nmemb;
	char *p;

	if (len > MAX_TEXT - b->n)
		return 0;	/* curl: write error, the transfer stops */
	p = realloc(b->p, b->n + len + 1);
	if (!p)
		return 0;
	memcpy(p + b->n, data, len);
	b->n += len;
	p[b->n] = '\0';
	b->p = p;
	return len;
}

/* GET url into *text (malloc'ed): 0, or -1 after saying why. */
static int fetch(const char *url, char **text)
{
	char why[CURL_ERROR_SIZE] = "";
	struct body b = { NULL, 0 };
	CURLcode rc;
	CURL *c;

	if (curl_global_init(CURL_GLOBAL_DEFAULT) || !(c = curl_easy_init())) {
		fprintf(stderr, "pvgpuctl: cannot start libcurl\n");
		return -1;
	}
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, why);
	curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
	/* A loopback endpoint: an http_proxy in the environment must not apply. */
	curl_easy_setopt(c, CURLOPT_PROXY, "");
	rc = curl_easy_perform(c);
	curl_easy_cleanup(c);
	curl_global_cleanup();
	if (rc != CURLE_OK) {
		fprintf(stderr, "pvgpuctl: cannot read %s: %s (is pvgpud running with --metrics?)\n",
			url, why[0] ? why : curl_easy_strerror(rc));
		free(b.p);
		return -1;
	}
	*text = b.p ? b.p : strdup("");
	return *text ? 0 : -1;
}

#endif /* PVGPU_NO_CURL */

static int cmd_status(const char *where)
{
	struct status *st;
	char url[512], *text;
	const char *scheme = strstr(where, "://");

	/* ADDR:PORT, or a URL; a URL without a path gets /metrics. */
	if (!scheme)
		snprintf(url, sizeof(url), "http://%s/metrics", where);
	else if (!strchr(scheme + 3, '/'))
		snprintf(url, sizeof(url), "%s/metrics", where);
	else
		snprintf(url, sizeof(url), "%s", where);
	if (fetch(url, &text))
		return 1;
	st = calloc(1, sizeof(*st));
	if (!st) {
		free(text);
		fprintf(stderr, "pvgpuctl: out of memory\n");
		return 1;
	}
	parse_metrics(text, st);
	free(text);
	if (!st->samples) {
		fprintf(stderr, "pvgpuctl: %s holds no pvgpud figures\n", url);
		free(st);
		return 1;
	}
	print_status(st);
	free(st);
	return 0;
}

/* --- session ---------------------------------------------------------------- */

/* A suspend or resume waits for its end at most this long (pvgpud's own
 * deadline, --suspend-timeout, is 120 s by default). */
#define SESSION_WAIT_MS		(300 * 1000)
#define ADMIN_REPLY_MS		5000

/*
 * One request, one answer line, from pvgpud's admin socket: the answer
 * (malloc'ed, without its newline), or NULL after saying why.
 */
static char *admin_ask(const char *path, const char *line)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	uint64_t deadline = pvgpu_now_ns() + ADMIN_REPLY_MS * 1000000ull;
	size_t cap = 4096, got = 0;
	char *buf = NULL, *nl;
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "pvgpuctl: --admin %s: path too long\n", path);
		return NULL;
	}
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		fprintf(stderr, "pvgpuctl: %s: %s (is pvgpud running, with this --admin?)\n",
			path, strerror(errno));
		goto err;
	}
	if (send(fd, line, strlen(line), MSG_NOSIGNAL) != (ssize_t)strlen(line)) {
		fprintf(stderr, "pvgpuctl: %s: %s\n", path, strerror(errno));
		goto err;
	}
	buf = malloc(cap);
	while (buf) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		uint64_t now = pvgpu_now_ns();
		ssize_t n;

		if (now >= deadline || poll(&pfd, 1, (int)((deadline - now) / 1000000) + 1) == 0) {
			fprintf(stderr, "pvgpuctl: %s: no answer\n", path);
			goto err;
		}
		n = recv(fd, buf + got, cap - got - 1, MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0) {
			fprintf(stderr, "pvgpuctl: %s: the answer was cut short\n", path);
			goto err;
		}
		got += (size_t)n;
		buf[got] = '\0';
		nl = strchr(buf, '\n');
		if (nl) {
			*nl = '\0';
			close(fd);
			return buf;
		}
		if (got + 1 == cap) {
			char *more = cap < PVGPU_ADMIN_REPLY_MAX ? realloc(buf, cap * 2) : NULL;

			if (!more)
				break;
			buf = more;
			cap *= 2;
		}
	}
	fprintf(stderr, "pvgpuctl: %s: answer too long\n", path);
err:
	free(buf);
	if (fd >= 0)
		close(fd);
	return NULL;
}

/* "ok N ID VM STATE RESIDENT SUSPENDED ...": the state of session id, "" if gone. */
static int session_state(const char *path, const char *id, char *state, size_t len)
{
	char *rep = admin_ask(path, "list\n"), *save = NULL, *tok;
	int field = 0, mine = 0;

	if (!rep)
		return -1;
	state[0] = '\0';
	tok = strtok_r(rep, " ", &save);		/* ok */
	tok = tok ? strtok_r(NULL, " ", &save) : NULL;	/* N */
	while (tok && (tok = strtok_r(NULL, " ", &save))) {
		if (field == 0)
			mine = !strcmp(tok, id);
		if (field == 2 && mine)
			snprintf(state, len, "%s", tok);
		field = (field + 1) % 5;
	}
	free(rep);
	return 0;
}

static void print_sessions(char *rep)
{
	char *save = NULL, *f[5];
	char *tok = strtok_r(rep, " ", &save);

	(void)tok;					/* ok */
	strtok_r(NULL, " ", &save);			/* N */
	printf("%-8s %-20s %-11s %12s %12s\n", "SESSION", "VM", "STATE",
	       "RESIDENT", "SUSPENDED");
	for (;;) {
		char res[32], sus[32];
		int k;

		for (k = 0; k < 5 && (f[k] = strtok_r(NULL, " ", &save)); k++)
			;
		if (k < 5)
			break;
		human(strtod(f[3], NULL), res, sizeof(res));
		human(strtod(f[4], NULL), sus, sizeof(sus));
		printf("%-8s %-20s %-11s %12s %12s\n", f[0], f[1], f[2], res, sus);
	}
}

static int cmd_session(int argc, char **argv)
{
	const char *verb, *id = NULL, *path = NULL;
	char def[PVGPU_ADMIN_PATH_MAX], line[PVGPU_ADMIN_LINE_MAX], state[32];
	uint64_t deadline;
	char *rep;
	int i = 3;

	if (argc < 3)
		goto usage;
	verb = argv[2];
	if (!strcmp(verb, "suspend") || !strcmp(verb, "resume")) {
		if (argc < 4 || !argv[3][0] || strspn(argv[3], "0123456789") != strlen(argv[3]) ||
		    strlen(argv[3]) > 19)
			goto usage;
		id = argv[3];
		i = 4;
	} else if (strcmp(verb, "list")) {
		goto usage;
	}
	if (i + 2 == argc && !strcmp(argv[i], "--admin"))
		path = argv[i + 1];
	else if (i != argc)
		goto usage;
	if (!path) {
		pvgpu_admin_default_path(def, sizeof(def));
		path = def;
	}
	snprintf(line, sizeof(line), "%s%s%s\n", verb, id ? " " : "", id ? id : "");
	rep = admin_ask(path, line);
	if (!rep)
		return 1;
	if (strncmp(rep, "ok", 2)) {
		fprintf(stderr, "pvgpuctl: %s\n", rep);
		free(rep);
		return 1;
	}
	if (!id) {
		print_sessions(rep);
		free(rep);
		return 0;
	}
	free(rep);
	/* Started: wait for its end, which pvgpud's log line explains. */
	deadline = pvgpu_now_ns() + SESSION_WAIT_MS * 1000000ull;
	while (!session_state(path, id, state, sizeof(state))) {
		struct timespec tick = { 0, 50 * 1000 * 1000 };
		int suspend = !strcmp(verb, "suspend");

		if (!state[0]) {
			fprintf(stderr, "pvgpuctl: session %s ended (pvgpud's log says why)\n", id);
			return 1;
		}
		if (!strcmp(state, suspend ? "suspended" : "running")) {
			printf("session %s %s\n", id, state);
			return 0;
		}
		if (!strcmp(state, suspend ? "running" : "suspended")) {
			fprintf(stderr, "pvgpuctl: session %s: %s failed, it is %s (pvgpud's log says why)\n",
				id, verb, state);
			return 1;
		}
		if (pvgpu_now_ns() >= deadline) {
			fprintf(stderr, "pvgpuctl: session %s still %s\n", id, state);
			return 1;
		}
		nanosleep(&tick, NULL);
	}
	return 1;
usage:
	fprintf(stderr, "pvgpuctl: usage: pvgpuctl session list|suspend ID|resume ID [--admin PATH]\n");
	return 2;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "devices") && argc <= 3)
		return cmd_devices(argc >= 3 ? argv[2] : PVGPU_CLIENT_DEFAULT_DEVICES);
	if (argc >= 3 && (!strcmp(argv[1], "attach") || !strcmp(argv[1], "detach")))
		return cmd_vm(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "session"))
		return cmd_session(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "status")) {
		if (argc == 2)
			return cmd_status(DEFAULT_METRICS);
		if (argc == 3 && argv[2][0] != '-')
			return cmd_status(argv[2]);
		if (argc == 4 && !strcmp(argv[2], "--metrics"))
			return cmd_status(argv[3]);
	}
	if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		fputs(USAGE, stdout);
		return 0;
	}
	/* One line on stderr for bad usage (DESIGN §8). */
	fprintf(stderr, "pvgpuctl: usage: pvgpuctl devices [URI] | status [ADDR:PORT] | session list|suspend ID|resume ID | attach DOMAIN [options] | detach DOMAIN (try --help)\n");
	return 2;
}
