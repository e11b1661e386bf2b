/*
 * registry_test.c - the VM registry as pvgpud reads it, and who is admitted
 * as which VM: a registered channel is its VM, with the quota qemu-device
 * recorded unless the policy names the VM; a vsock peer whose CID no VM
 * has is refused; damaged entries and windows are left out, not trusted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "admit.h"
#include "registry.h"
#include "window.h"

#include "unit_check.h"

static char dir[64];

#ifndef PVGPU_NO_INIH
/* The registry files: read with inih, so tested only where it is. */

static void write_file(const char *name, const char *text)
{
	char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	CHECK(f && fputs(text, f) >= 0);
	if (f)
		fclose(f);
}

/* A window file as qemu-device writes it: 1 MiB, ring of 2 x 64 KiB. */
static void write_window(const char *name, uint64_t id, uint32_t magic)
{
	struct pvgpu_window_header hdr = {
		.magic = magic, .layout = PVGPU_WINDOW_LAYOUT,
		.size = 1 << 20, .window_id = id,
		.staging_offset = 4096, .slot_size = 65536, .nslots = 2,
	};
	char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	CHECK(fwrite(&hdr, sizeof(hdr), 1, f) == 1);
	fclose(f);
	CHECK(truncate(path, 1 << 20) == 0);
}

static void write_entry(const char *vm, const char *transport, unsigned int cid,
			uint64_t id, const char *extra)
{
	char text[2048], name[80];

	snprintf(text, sizeof(text),
		 "# written by the test\n"
		 "format = 1\nvm = %s\n"
		 "window.path = %s/win-%s\nwindow.size = 1048576\n"
		 "window.id = 0x%016llx\nwindow.staging_offset = 4096\n"
		 "window.slot_size = 65536\nwindow.nslots = 2\n"
		 "vsock.transport = %s\nvsock.cid = %u\nvsock.port = 7100\n"
		 "vsock.listen = %s/%s.sock_7100\ngpu = 0\nmemory = 67108864\n"
		 "qemu.uid = 0\n%s",
		 vm, dir, vm, (unsigned long long)id, transport, cid, dir, vm,
		 extra);
	snprintf(name, sizeof(name), "%s.conf", vm);
	write_file(name, text);
}

static void test_load(void)
{
	struct pvgpu_registry *r = calloc(1, sizeof(*r));
	const struct pvgpu_vm_record *web, *db;
	char err[256], name[128];
	int fd;

	write_window("win-web", 0x1111, PVGPU_WINDOW_MAGIC);
	write_entry("web", "vhost-user", 3, 0x1111, "");
	write_window("win-db", 0x2222, PVGPU_WINDOW_MAGIC);
	write_entry("db", "kernel", 4, 0x2222, "");
	/* Its window says another id: the VM keeps vsock, loses the window. */
	write_window("win-bad", 0x9999, PVGPU_WINDOW_MAGIC);
	write_entry("bad", "kernel", 5, 0x3333, "");
	/* Damaged entries are left out. */
	write_file("broken.conf", "format = 1\nvm = broken\nvsock.cid = x\n");
	write_file("future.conf", "format = 2\nvm = future\n");
	write_entry("dup", "kernel", 4, 0x4444, "");	/* db's CID */
	/* Not entries: pvgpu-vm's temporary files and the lock. */
	write_file(".lock", "");
	write_file("web.conf.123.tmp", "garbage");

	CHECK(pvgpu_registry_load(dir, r, err, sizeof(err)) == 0);
	web = pvgpu_registry_by_name(r, "web");
	{
		struct pvgpu_identity cid4 = { PVGPU_ID_CID, "4" };

		db = pvgpu_registry_lookup(r, &cid4);
	}
	CHECK(web && web->vhost_user && web->cid == 3);
	CHECK(web && web->window.id == 0x1111 && web->window.size == 1 << 20);
	snprintf(name, sizeof(name), "%s/web.sock_7100", dir);
	CHECK(web && !strcmp(web->listen, name));
	/* Two entries claim CID 4: whichever is read first keeps it. */
	CHECK(db && (!strcmp(db->name, "db") || !strcmp(db->name, "dup")) &&
	      !db->vhost_user && db->memory == 64 << 20);
	CHECK(!pvgpu_registry_by_name(r, "db") != !pvgpu_registry_by_name(r, "dup"));
	CHECK(pvgpu_registry_by_name(r, "bad") &&
	      !pvgpu_registry_by_name(r, "bad")->window.path[0]);
	CHECK(!pvgpu_registry_by_name(r, "broken"));
	CHECK(!pvgpu_registry_by_name(r, "future"));
	CHECK(r->nvms == 3);	/* web, db, bad; dup lost to db (or db to dup) */

	/* A window file rewritten after the registry read it is refused. */
	if (web) {
		fd = pvgpu_vm_window_open(&web->window, err, sizeof(err));
		CHECK(fd >= 0);
		if (fd >= 0)
			close(fd);
		write_window("win-web", 0x1111, 0xdeadbeef);
		CHECK(pvgpu_vm_window_open(&web->window, err, sizeof(err)) < 0);
		CHECK(strstr(err, "magic") != NULL);
		write_window("win-web", 0x1111, PVGPU_WINDOW_MAGIC);
		CHECK(truncate(web->window.path, 2 << 20) == 0);
		CHECK(pvgpu_vm_window_open(&web->window, err, sizeof(err)) < 0);
		CHECK(strstr(err, "size disagrees") != NULL);
	}
	CHECK(pvgpu_registry_load("/nonexistent-pvgpu", r, err, sizeof(err)) < 0);
	free(r);
}
#endif /* PVGPU_NO_INIH */

static void test_admit(void)
{
	struct pvgpu_accounting *acct = pvgpu_accounting_create(4);
	struct pvgpu_registry *r = calloc(1, sizeof(*r));
	struct pvgpu_policy *p = calloc(1, sizeof(*p));
	struct pvgpu_peer peer;
	struct pvgpu_slot *slot;
	char why[256] = "";
	int e;

	r->nvms = 2;
	snprintf(r->vms[0].name, sizeof(r->vms[0].name), "web");
	r->vms[0].cid = 3;
	r->vms[0].memory = 64 << 20;
	r->vms[0].gpu = 1;
	snprintf(r->vms[1].name, sizeof(r->vms[1].name), "db");
	r->vms[1].cid = 4;
	r->vms[1].memory = 32 << 20;
	pvgpu_registry_apply(r, NULL, acct);
	e = r->vms[0].entry;
	CHECK(e >= 0 && !strcmp(acct->vms[e].name, "web"));
	CHECK(e >= 0 && acct->vms[e].quota == 64 << 20 && acct->vms[e].gpus == 2);

	/* A registered channel is its VM, with no policy file at all. */
	slot = pvgpu_accounting_claim(acct);
	memset(&peer, 0, sizeof(peer));
	peer.features = PVGPU_TR_VM_CALLERS;
	pvgpu_identity_set(&peer.id, PVGPU_ID_CID, "3");
	peer.vm = r->vms[0];
	CHECK(pvgpu_admit(NULL, acct, slot, &peer, why, sizeof(why)) == 0);
	CHECK(slot->vm == e);
	pvgpu_accounting_release(slot);

	/* A vsock peer no VM is registered for is refused, saying so. */
	slot = pvgpu_accounting_claim(acct);
	memset(&peer, 0, sizeof(peer));
	peer.features = PVGPU_TR_VM_CALLERS;
	pvgpu_identity_set(&peer.id, PVGPU_ID_CID, "9");
	CHECK(pvgpu_admit(NULL, acct, slot, &peer, why, sizeof(why)) < 0);
	CHECK(strstr(why, "cid 9 is not attached to any VM") != NULL);

	/* A local Unix caller without a policy is let in, with no VM. */
	memset(&peer, 0, sizeof(peer));
	peer.features = PVGPU_TR_PASSES_FD;
	atomic_store(&slot->vm, -1);
	CHECK(pvgpu_admit(NULL, acct, slot, &peer, why, sizeof(why)) == 0);
	CHECK(slot->vm == -1);
	pvgpu_accounting_release(slot);

	/* A policy naming the VM wins over what the registry recorded. */
	p->nvms = 1;
	snprintf(p->vms[0].name, sizeof(p->vms[0].name), "web");
	p->vms[0].memory = 1 << 20;
	p->vms[0].max_sessions = 1;
	snprintf(p->unknown.name, sizeof(p->unknown.name), "%s", PVGPU_DEFAULT_VM);
	CHECK(pvgpu_policy_apply(p, acct, why, sizeof(why)) == 0);
	pvgpu_registry_apply(r, p, acct);
	CHECK(r->vms[0].entry == p->vms[0].entry);
	CHECK(acct->vms[e].quota == 1 << 20);
	CHECK(acct->vms[r->vms[1].entry].quota == 32 << 20);	/* db: registry's */
	slot = pvgpu_accounting_claim(acct);
	slot->pid = 1;	/* live, so it counts against max_sessions */
	memset(&peer, 0, sizeof(peer));
	peer.features = PVGPU_TR_PASSES_FD;
	peer.vm = r->vms[0];
	CHECK(pvgpu_admit(p, acct, slot, &peer, why, sizeof(why)) == 0);
	CHECK(slot->vm == e);
	{
		struct pvgpu_slot *second = pvgpu_accounting_claim(acct);

		CHECK(pvgpu_admit(p, acct, second, &peer, why,
				  sizeof(why)) < 0);
		CHECK(strstr(why, "max_sessions") != NULL);
		pvgpu_accounting_release(second);
	}
	pvgpu_accounting_release(slot);
	free(p);
	free(r);
	pvgpu_accounting_destroy(acct);
}

int main(void)
{
	char cmd[96];

	snprintf(dir, sizeof(dir), "/tmp/pvgpu-registry-test-XXXXXX");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
#ifndef PVGPU_NO_INIH
	test_load();
#else
	printf("registry file tests skipped: built without inih\n");
#endif
	test_admit();
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd))
		fprintf(stderr, "could not remove %s\n", dir);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
