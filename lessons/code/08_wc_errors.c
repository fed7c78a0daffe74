/*
 * 08_wc_errors.c - chapter 8: how RDMA errors reach you.
 *
 * Errors on the data path come back as work completions with a non-zero status, and
 * the QP that saw the error moves to the ERR state. This program provokes two classic
 * ones on two RC QPs of one device (A = requester, B = responder):
 *
 *   1. RNR: A SENDs with rnr_retry = 0 while B has no receive posted. B answers
 *      "receiver not ready"; A may not retry, so A's WR completes with
 *      IBV_WC_RNR_RETRY_EXC_ERR. A goes to ERR; a WR posted afterwards is flushed
 *      (IBV_WC_WR_FLUSH_ERR).
 *   2. Recovery: both QPs go back through RESET -> INIT -> RTR -> RTS; with a receive
 *      posted the same SEND succeeds.
 *   3. Bad rkey: A RDMA WRITEs with a wrong rkey. B rejects it, A's WR completes with
 *      IBV_WC_REM_ACCESS_ERR, and both QPs end up in ERR.
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -o 08_wc_errors 08_wc_errors.c -libverbs
 * Run:   ./08_wc_errors [device]
 */
#include "lab_common.h"

static void print_wc(const char *who, const struct ibv_wc *wc)
{
	printf("%s: wr_id %llu status %s (%d): %s\n", who, (unsigned long long)wc->wr_id,
	       wc_status_name(wc->status), wc->status, ibv_wc_status_str(wc->status));
}

static void print_states(struct loop *l)
{
	int a = qp_state(l->qp[0]), b = qp_state(l->qp[1]);

	printf("QP states: A %s, B %s\n", a < 0 ? "?" : qp_state_name(a),
	       b < 0 ? "?" : qp_state_name(b));
}

int main(int argc, char **argv)
{
	struct loop l;
	struct ibv_mr *mr = NULL;
	struct ibv_wc wc;
	char *buf = NULL;
	double t0;
	int ret = 1, got;

	if (loop_open(&l, argc > 1 ? argv[1] : NULL))
		return 1;
	buf = calloc(1, 4096);
	if (!buf) {
		FAIL("calloc");
		goto out;
	}
	mr = ibv_reg_mr(l.pd, buf, 4096,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!mr) {
		FAIL("ibv_reg_mr: %s", strerror(errno));
		goto out;
	}

	/* 1. Receiver not ready, and no retries allowed. */
	printf("-- 1. SEND to a QP with no receive posted, rnr_retry = 0\n");
	if (loop_connect(&l, 0, IBV_ACCESS_REMOTE_WRITE, 0))
		goto out;
	t0 = now_us();
	if (post_one(l.qp[0], IBV_WR_SEND, mr, buf, 64, 0, 0, 1))
		goto out;
	got = poll_wc(l.cq[0], &wc, 5000);
	if (got != 1) {
		FAIL("no completion for the SEND");
		goto out;
	}
	print_wc("A", &wc);
	printf("A: error completion after %.1f ms\n", (now_us() - t0) / 1000);
	if (wc.status != IBV_WC_RNR_RETRY_EXC_ERR) {
		FAIL("expected IBV_WC_RNR_RETRY_EXC_ERR");
		goto out;
	}
	print_states(&l);
	/* A QP in ERR does not execute new work: it completes it with a flush error. */
	if (post_one(l.qp[0], IBV_WR_SEND, mr, buf, 64, 0, 0, 2))
		goto out;
	if (poll_wc(l.cq[0], &wc, 2000) != 1) {
		FAIL("no completion for the WR posted in ERR");
		goto out;
	}
	print_wc("A", &wc);
	if (wc.status != IBV_WC_WR_FLUSH_ERR) {
		FAIL("expected IBV_WC_WR_FLUSH_ERR");
		goto out;
	}

	/* 2. Recovery: back to RESET, reconnect, and this time post the receive first. */
	printf("-- 2. recovery: RESET -> INIT -> RTR -> RTS on both QPs, receive posted\n");
	if (loop_connect(&l, 0, IBV_ACCESS_REMOTE_WRITE, LAB_RNR_RETRY))
		goto out;
	print_states(&l);
	if (post_recv_one(l.qp[1], mr, buf + 2048, 64, 3) ||
	    post_one(l.qp[0], IBV_WR_SEND, mr, buf, 64, 0, 0, 4))
		goto out;
	if (poll_wc(l.cq[0], &wc, 2000) != 1) {
		FAIL("no completion for the SEND after recovery");
		goto out;
	}
	print_wc("A", &wc);
	if (wc.status != IBV_WC_SUCCESS) {
		FAIL("the SEND after recovery failed");
		goto out;
	}
	if (poll_wc(l.cq[1], &wc, 2000) != 1 || wc.status != IBV_WC_SUCCESS) {
		FAIL("B: no successful receive completion");
		goto out;
	}
	print_wc("B", &wc);

	/* 3. A one-sided WRITE with a key that does not open B's memory. */
	printf("-- 3. RDMA WRITE with a wrong rkey (0x%x instead of 0x%x)\n", mr->rkey ^ 0x100,
	       mr->rkey);
	if (post_one(l.qp[0], IBV_WR_RDMA_WRITE, mr, buf, 64, (uintptr_t)buf + 1024,
		     mr->rkey ^ 0x100, 5))
		goto out;
	if (poll_wc(l.cq[0], &wc, 5000) != 1) {
		FAIL("no completion for the WRITE");
		goto out;
	}
	print_wc("A", &wc);
	if (wc.status != IBV_WC_REM_ACCESS_ERR) {
		FAIL("expected IBV_WC_REM_ACCESS_ERR");
		goto out;
	}
	got = poll_wc(l.cq[1], &wc, 200);
	printf("B: completions: %d (a one-sided error is reported to the requester)\n", got);
	print_states(&l);
	printf("OK\n");
	ret = 0;
out:
	if (mr && ibv_dereg_mr(mr))
		ret = 1;
	loop_close(&l);
	free(buf);
	return ret;
}
