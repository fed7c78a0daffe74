/*
 * 09_teardown.c - chapter 9: resource lifetimes and teardown order.
 *
 * Verbs objects form a tree: context -> PD -> {MR, QP, AH}, context -> CQ, completion
 * channel -> CQ -> QP. A parent in use cannot be destroyed: the call fails with EBUSY
 * and the object stays alive. This program creates one of everything, first tries to
 * tear down in the WRONG order (parents first) and prints each EBUSY, then does it in
 * the right order.
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -o 09_teardown 09_teardown.c -libverbs
 * Run:   ./09_teardown [device]
 */
#include "lab_common.h"

static int busy_seen;

/* Report the result of a destroy call that is expected to fail with EBUSY. */
static int expect_busy(const char *what, int rc)
{
	int err = rc < 0 ? errno : rc;

	if (rc == 0) {
		printf("%-46s succeeded (unexpected)\n", what);
		return -1;
	}
	printf("%-46s -> %s (%s)\n", what, err == EBUSY ? "EBUSY" : "error", strerror(err));
	if (err == EBUSY)
		busy_seen++;
	return 0;
}

static int expect_ok(const char *what, int rc)
{
	int err = rc < 0 ? errno : rc;

	printf("%-46s -> %s\n", what, rc == 0 ? "ok" : strerror(err));
	return rc == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct ibv_context *ctx;
	struct ibv_comp_channel *ch = NULL;
	struct ibv_pd *pd = NULL;
	struct ibv_cq *cq = NULL;
	struct ibv_mr *mr = NULL;
	struct ibv_qp *qp = NULL;
	struct ibv_qp_init_attr init;
	char *buf = NULL;
	int ret = 1;

	ctx = open_device(argc > 1 ? argv[1] : NULL);
	if (!ctx)
		return 1;
	buf = malloc(4096);
	ch = ibv_create_comp_channel(ctx);
	pd = ibv_alloc_pd(ctx);
	if (!buf || !ch || !pd) {
		FAIL("setup: %s", strerror(errno));
		goto out;
	}
	cq = ibv_create_cq(ctx, 16, NULL, ch, 0);
	mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	if (!cq || !mr) {
		FAIL("setup: %s", strerror(errno));
		goto out;
	}
	memset(&init, 0, sizeof(init));
	init.send_cq = cq;
	init.recv_cq = cq;
	init.qp_type = IBV_QPT_RC;
	init.cap.max_send_wr = 4;
	init.cap.max_recv_wr = 4;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	qp = ibv_create_qp(pd, &init);
	if (!qp) {
		FAIL("ibv_create_qp: %s", strerror(errno));
		goto out;
	}
	printf("device %s: created channel, PD, CQ, MR (lkey 0x%x), QP 0x%06x\n",
	       ibv_get_device_name(ctx->device), mr->lkey, qp->qp_num);

	printf("-- wrong order: parents first\n");
	if (expect_busy("ibv_dealloc_pd (MR and QP still use it)", ibv_dealloc_pd(pd)) ||
	    expect_busy("ibv_destroy_cq (QP still uses it)", ibv_destroy_cq(cq)) ||
	    expect_busy("ibv_destroy_comp_channel (CQ still uses it)",
			ibv_destroy_comp_channel(ch)))
		goto out;
	if (expect_ok("ibv_destroy_qp", ibv_destroy_qp(qp)))
		goto out;
	qp = NULL;
	if (expect_busy("ibv_dealloc_pd (MR still uses it)", ibv_dealloc_pd(pd)))
		goto out;

	printf("-- right order: children first\n");
	if (expect_ok("ibv_dereg_mr", ibv_dereg_mr(mr)))
		goto out;
	mr = NULL;
	if (expect_ok("ibv_destroy_cq", ibv_destroy_cq(cq)))
		goto out;
	cq = NULL;
	if (expect_ok("ibv_destroy_comp_channel", ibv_destroy_comp_channel(ch)))
		goto out;
	ch = NULL;
	if (expect_ok("ibv_dealloc_pd", ibv_dealloc_pd(pd)))
		goto out;
	pd = NULL;
	if (expect_ok("ibv_close_device", ibv_close_device(ctx)))
		goto out_closed;
	ctx = NULL;
	printf("EBUSY seen %d times; everything freed\n", busy_seen);
	if (busy_seen == 4) {
		printf("OK\n");
		ret = 0;
	}
out:
	/* The error path also frees in the right order. */
	if (qp && ibv_destroy_qp(qp))
		ret = 1;
	if (mr && ibv_dereg_mr(mr))
		ret = 1;
	if (cq && ibv_destroy_cq(cq))
		ret = 1;
	if (ch && ibv_destroy_comp_channel(ch))
		ret = 1;
	if (pd && ibv_dealloc_pd(pd))
		ret = 1;
	if (ctx && ibv_close_device(ctx))
		ret = 1;
out_closed:
	free(buf);
	return ret;
}
