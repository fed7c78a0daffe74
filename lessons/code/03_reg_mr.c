/*
 * 03_reg_mr.c - chapter 3: memory registration.
 *
 * 1. Registers buffers of growing size and times ibv_reg_mr / ibv_dereg_mr.
 * 2. Registers the same buffer twice: two MRs, two different key pairs.
 * 3. Shows the access-flag rule: remote write or remote atomic access without
 *    local write access is rejected with EINVAL.
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -o 03_reg_mr 03_reg_mr.c -libverbs
 * Run:   ./03_reg_mr [device]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static struct ibv_context *open_device(const char *want)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	int n, i;

	list = ibv_get_device_list(&n);
	if (!list) {
		fprintf(stderr, "FAIL: ibv_get_device_list: %s\n", strerror(errno));
		return NULL;
	}
	for (i = 0; i < n; i++) {
		if (want && strcmp(ibv_get_device_name(list[i]), want) != 0)
			continue;
		ctx = ibv_open_device(list[i]);
		if (!ctx)
			fprintf(stderr, "FAIL: ibv_open_device: %s\n", strerror(errno));
		break;
	}
	if (i == n)
		fprintf(stderr, "FAIL: no RDMA device %s\n", want ? want : "");
	ibv_free_device_list(list);
	return ctx;
}

/* Register, time, deregister one buffer of `size` bytes. */
static int time_one(struct ibv_pd *pd, size_t size)
{
	long page = sysconf(_SC_PAGESIZE);
	void *buf = NULL;
	struct ibv_mr *mr;
	double t0, t1, t2;
	int rc;

	if (posix_memalign(&buf, (size_t)page, size)) {
		fprintf(stderr, "FAIL: posix_memalign(%zu)\n", size);
		return -1;
	}
	memset(buf, 0, size); /* touch every page so the timing is registration only */
	t0 = now_us();
	mr = ibv_reg_mr(pd, buf, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	t1 = now_us();
	if (!mr) {
		fprintf(stderr, "FAIL: ibv_reg_mr(%zu): %s\n", size, strerror(errno));
		free(buf);
		return -1;
	}
	printf("reg_mr %9zu B (%6zu pages): reg %9.1f us", size, size / (size_t)page, t1 - t0);
	rc = ibv_dereg_mr(mr);
	t2 = now_us();
	if (rc) {
		fprintf(stderr, "\nFAIL: ibv_dereg_mr: %s\n", strerror(rc));
		free(buf);
		return -1;
	}
	printf("  dereg %8.1f us  (%.2f us/page)\n", t2 - t1, (t1 - t0) / (size / (size_t)page));
	free(buf);
	return 0;
}

/* Try one combination of access flags on a small buffer; print what happened. */
static int try_flags(struct ibv_pd *pd, void *buf, size_t len, int flags, const char *what,
		     int expect_errno)
{
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, len, flags);
	int err = errno;

	if (mr) {
		printf("access %-32s: accepted (lkey 0x%x rkey 0x%x)\n", what, mr->lkey,
		       mr->rkey);
		if (ibv_dereg_mr(mr)) {
			fprintf(stderr, "FAIL: ibv_dereg_mr\n");
			return -1;
		}
		return expect_errno == 0 ? 0 : -1;
	}
	printf("access %-32s: rejected, errno %d (%s)\n", what, err, strerror(err));
	return err == expect_errno ? 0 : -1;
}

int main(int argc, char **argv)
{
	static const size_t sizes[] = { 4096, 65536, 1 << 20, 16 << 20, 64 << 20 };
	struct ibv_context *ctx;
	struct ibv_pd *pd = NULL;
	struct ibv_mr *mr1 = NULL, *mr2 = NULL;
	/* On the heap, never on the stack: a registered buffer must outlive every access
	 * the device (or a peer with its rkey) may make, and a stack frame is reused. */
	char *small = NULL;
	const size_t small_len = 256;
	size_t i;
	int ret = 1;

	ctx = open_device(argc > 1 ? argv[1] : NULL);
	if (!ctx)
		return 1;
	printf("device %s\n", ibv_get_device_name(ctx->device));
	pd = ibv_alloc_pd(ctx);
	if (!pd) {
		fprintf(stderr, "FAIL: ibv_alloc_pd: %s\n", strerror(errno));
		goto out;
	}

	/* 1. Cost grows with the number of pages to pin and translate. */
	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		if (time_one(pd, sizes[i]))
			goto out;

	/* 2. The same memory registered twice: two independent MRs. */
	small = calloc(1, small_len);
	if (!small) {
		fprintf(stderr, "FAIL: calloc\n");
		goto out;
	}
	mr1 = ibv_reg_mr(pd, small, small_len, IBV_ACCESS_LOCAL_WRITE);
	mr2 = ibv_reg_mr(pd, small, small_len, IBV_ACCESS_LOCAL_WRITE);
	if (!mr1 || !mr2) {
		fprintf(stderr, "FAIL: ibv_reg_mr(small buffer): %s\n", strerror(errno));
		goto out;
	}
	printf("same buffer twice: mr1 lkey 0x%x rkey 0x%x, mr2 lkey 0x%x rkey 0x%x\n",
	       mr1->lkey, mr1->rkey, mr2->lkey, mr2->rkey);

	/* 3. The access-flag rules. */
	if (try_flags(pd, small, small_len, 0, "none (local read only)", 0) ||
	    try_flags(pd, small, small_len, IBV_ACCESS_LOCAL_WRITE, "LOCAL_WRITE", 0) ||
	    try_flags(pd, small, small_len, IBV_ACCESS_REMOTE_READ, "REMOTE_READ", 0) ||
	    try_flags(pd, small, small_len,
		      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
		      "LOCAL_WRITE|REMOTE_WRITE", 0) ||
	    try_flags(pd, small, small_len, IBV_ACCESS_REMOTE_WRITE,
		      "REMOTE_WRITE without LOCAL_WRITE", EINVAL) ||
	    try_flags(pd, small, small_len, IBV_ACCESS_REMOTE_ATOMIC,
		      "REMOTE_ATOMIC without LOCAL_WRITE", EINVAL)) {
		fprintf(stderr, "FAIL: an access-flag rule did not behave as expected\n");
		goto out;
	}
	printf("OK\n");
	ret = 0;
out:
	if (mr2 && ibv_dereg_mr(mr2))
		ret = 1;
	if (mr1 && ibv_dereg_mr(mr1))
		ret = 1;
	if (pd && ibv_dealloc_pd(pd))
		ret = 1;
	if (ibv_close_device(ctx))
		ret = 1;
	free(small);
	return ret;
}
