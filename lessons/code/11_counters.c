/*
 * 11_counters.c - chapter 11: what the device counts.
 *
 * Reads every file of /sys/class/infiniband/<dev>/ports/1/hw_counters/ (and of
 * ports/1/counters/, the InfiniBand PMA counters, when the driver has them), runs known
 * traffic on two RC QPs of the device, reads again and prints what moved:
 *   - 100 SENDs of 4 KiB (4 packets each at MTU 1024),
 *   - 100 RDMA WRITEs of 4 KiB,
 *   - 1 SEND to a QP with no receive posted and rnr_retry = 0 (one RNR error).
 * `lifespan` is not a counter: it is how long (ms) the driver caches the values, so the
 * program waits longer than that before the second read.
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -o 11_counters 11_counters.c -libverbs
 * Run:   ./11_counters [device]
 */
#include <dirent.h>
#include <unistd.h>
#include "lab_common.h"

#define MAXC 128
#define SZ 4096
#define N 100

struct counters {
	int n;
	char name[MAXC][64];
	unsigned long long val[MAXC];
};

/* Read every numeric file of `dir`. Returns -1 if the directory does not exist. */
static int read_dir(const char *dir, struct counters *c)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[512];
	FILE *f;

	c->n = 0;
	if (!d)
		return -1;
	while ((e = readdir(d)) && c->n < MAXC) {
		size_t len = strlen(e->d_name);

		if (e->d_name[0] == '.' || len >= sizeof(c->name[0]))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fscanf(f, "%llu", &c->val[c->n]) == 1) {
			memcpy(c->name[c->n], e->d_name, len + 1);
			c->n++;
		}
		fclose(f);
	}
	closedir(d);
	return 0;
}

static unsigned long long value_of(const struct counters *c, const char *name, int *found)
{
	int i;

	for (i = 0; i < c->n; i++)
		if (strcmp(c->name[i], name) == 0) {
			*found = 1;
			return c->val[i];
		}
	*found = 0;
	return 0;
}

static void print_deltas(const char *dir, const struct counters *before,
			 const struct counters *after)
{
	int i, found, moved = 0;
	unsigned long long b;

	printf("%s:\n", dir);
	for (i = 0; i < after->n; i++) {
		if (strcmp(after->name[i], "lifespan") == 0)
			continue;
		b = value_of(before, after->name[i], &found);
		if (!found || after->val[i] == b)
			continue;
		printf("  %-24s %10llu -> %10llu  (+%llu)\n", after->name[i], b, after->val[i],
		       after->val[i] - b);
		moved++;
	}
	printf("  (%d of %d counters moved)\n", moved, after->n);
}

/* The traffic whose effect we want to see. */
static int traffic(struct loop *l, struct ibv_mr *mr, char *buf)
{
	struct ibv_wc wc;
	int i;

	if (loop_connect(l, 0, IBV_ACCESS_REMOTE_WRITE, LAB_RNR_RETRY))
		return -1;
	for (i = 0; i < N; i++) {
		if (post_recv_one(l->qp[1], mr, buf + SZ, SZ, 1) ||
		    post_one(l->qp[0], IBV_WR_SEND, mr, buf, SZ, 0, 0, 2) ||
		    poll_wc(l->cq[0], &wc, 2000) != 1 || wc.status != IBV_WC_SUCCESS ||
		    poll_wc(l->cq[1], &wc, 2000) != 1 || wc.status != IBV_WC_SUCCESS) {
			FAIL("SEND %d failed", i);
			return -1;
		}
	}
	for (i = 0; i < N; i++) {
		if (post_one(l->qp[0], IBV_WR_RDMA_WRITE, mr, buf, SZ, (uintptr_t)buf + SZ,
			     mr->rkey, 3) ||
		    poll_wc(l->cq[0], &wc, 2000) != 1 || wc.status != IBV_WC_SUCCESS) {
			FAIL("WRITE %d failed", i);
			return -1;
		}
	}
	printf("traffic: %d SENDs and %d WRITEs of %d bytes done\n", N, N, SZ);
	if (loop_connect(l, 0, IBV_ACCESS_REMOTE_WRITE, 0) ||
	    post_one(l->qp[0], IBV_WR_SEND, mr, buf, 64, 0, 0, 4) || poll_wc(l->cq[0], &wc, 5000) != 1) {
		FAIL("RNR probe failed to complete");
		return -1;
	}
	printf("traffic: one SEND without a receive posted: %s\n", wc_status_name(wc.status));
	return 0;
}

int main(int argc, char **argv)
{
	static struct counters hb, ha, pb, pa;
	struct loop l;
	struct ibv_mr *mr = NULL;
	char *buf = NULL, hw[256], pma[256], lpath[300];
	unsigned long long lifespan = 10;
	int ret = 1, have_hw, have_pma;
	FILE *f;

	if (loop_open(&l, argc > 1 ? argv[1] : NULL))
		return 1;
	snprintf(hw, sizeof(hw), "/sys/class/infiniband/%s/ports/1/hw_counters",
		 ibv_get_device_name(l.ctx->device));
	snprintf(pma, sizeof(pma), "/sys/class/infiniband/%s/ports/1/counters",
		 ibv_get_device_name(l.ctx->device));
	have_hw = read_dir(hw, &hb) == 0;
	have_pma = read_dir(pma, &pb) == 0;
	printf("%s: %s\n", hw, have_hw ? "present" : "absent");
	printf("%s: %s\n", pma, have_pma ? "present" : "absent");
	if (!have_hw && !have_pma) {
		FAIL("this device exposes no counters in sysfs");
		goto out;
	}
	snprintf(lpath, sizeof(lpath), "%s/lifespan", hw);
	f = fopen(lpath, "r");
	if (f) {
		if (fscanf(f, "%llu", &lifespan) != 1)
			lifespan = 10;
		fclose(f);
		printf("lifespan: %llu ms (values are cached that long)\n", lifespan);
	}

	buf = calloc(2, SZ);
	if (!buf) {
		FAIL("calloc");
		goto out;
	}
	mr = ibv_reg_mr(l.pd, buf, 2 * SZ,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!mr) {
		FAIL("ibv_reg_mr: %s", strerror(errno));
		goto out;
	}
	if (traffic(&l, mr, buf))
		goto out;
	usleep((useconds_t)(lifespan + 20) * 1000);
	if (have_hw && read_dir(hw, &ha) == 0)
		print_deltas(hw, &hb, &ha);
	if (have_pma && read_dir(pma, &pa) == 0)
		print_deltas(pma, &pb, &pa);
	printf("OK\n");
	ret = 0;
out:
	if (mr && ibv_dereg_mr(mr))
		ret = 1;
	loop_close(&l);
	free(buf);
	return ret;
}
