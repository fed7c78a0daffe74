/*
 * 12_inline_signal.c - chapter 12: inline data and selective signalling.
 *
 * Inline: with IBV_SEND_INLINE the payload is copied into the work request when it is
 * posted, so the buffer needs no memory registration (its lkey is ignored) and may be
 * reused as soon as ibv_post_send() returns. Only up to the QP's max_inline_data.
 *
 * Selective signalling: a QP created with sq_sig_all = 0 produces a send completion
 * only for WRs posted with IBV_SEND_SIGNALED. Completions are in order, so one
 * signalled completion also retires every unsignalled WR posted before it; the program
 * must signal at least once per send-queue depth, or the queue fills up with WRs it can
 * never reclaim.
 *
 *   1. an inline SEND from a stack buffer that is overwritten right after the post;
 *   2. 256 RDMA WRITEs, every one signalled, then every 16th: the completions are
 *      counted (256, then 16) and the time per WR printed.
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -o 12_inline_signal 12_inline_signal.c -libverbs
 * Run:   ./12_inline_signal [device]
 */
#include "lab_common.h"

#define N 256
#define EVERY 16
#define SZ 64

/* Post N WRITEs of SZ bytes, signalling every `every`-th; count the completions. */
static int writes(struct loop *l, struct ibv_mr *mr, char *buf, uint64_t raddr, uint32_t rkey,
		  int every, int *completions, double *us_per_wr)
{
	struct ibv_sge sge = { (uintptr_t)buf, SZ, mr->lkey };
	struct ibv_send_wr wr, *bad;
	struct ibv_wc wc[16];
	int i, n, outstanding = 0, rc;
	double t0 = now_us(), deadline;

	*completions = 0;
	for (i = 1; i <= N; i++) {
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = (uint64_t)i;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_RDMA_WRITE;
		wr.send_flags = i % every == 0 ? IBV_SEND_SIGNALED : 0;
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
		/* Never more than 32 unretired WRs: the send queue's depth. */
		while (outstanding >= 32 - every) {
			n = ibv_poll_cq(l->cq[0], 16, wc);
			if (n < 0)
				return -1;
			for (int k = 0; k < n; k++) {
				if (wc[k].status != IBV_WC_SUCCESS) {
					FAIL("WRITE %llu: %s", (unsigned long long)wc[k].wr_id,
					     wc_status_name(wc[k].status));
					return -1;
				}
				outstanding -= every; /* one completion retires `every` WRs */
			}
			*completions += n;
		}
		rc = ibv_post_send(l->qp[0], &wr, &bad);
		if (rc) {
			FAIL("ibv_post_send %d: %s", i, strerror(rc));
			return -1;
		}
		outstanding++;
	}
	deadline = now_us() + 10e6;
	while (outstanding > 0 && now_us() < deadline) {
		n = ibv_poll_cq(l->cq[0], 16, wc);
		if (n < 0)
			return -1;
		for (int k = 0; k < n; k++)
			if (wc[k].status != IBV_WC_SUCCESS)
				return -1;
		outstanding -= n * every;
		*completions += n;
	}
	*us_per_wr = (now_us() - t0) / N;
	/* Nothing else may come: an unsignalled WR makes no completion of its own. */
	if (ibv_poll_cq(l->cq[0], 16, wc) != 0) {
		FAIL("an extra completion");
		return -1;
	}
	return outstanding > 0 ? -1 : 0;
}

int main(int argc, char **argv)
{
	struct ibv_qp_init_attr init;
	struct ibv_qp_attr qa;
	struct loop l;
	struct ibv_mr *amr = NULL, *bmr = NULL;
	struct ibv_wc wc;
	char *abuf = NULL, *bbuf = NULL;
	int ret = 1, c_all, c_sel;
	double us_all, us_sel;

	if (loop_open(&l, argc > 1 ? argv[1] : NULL))
		return 1;
	/* Rebuild A with sq_sig_all = 0 and room for inline data. */
	memset(&init, 0, sizeof(init));
	init.send_cq = l.cq[0];
	init.recv_cq = l.cq[0];
	init.qp_type = IBV_QPT_RC;
	init.sq_sig_all = 0;
	init.cap.max_send_wr = 32;
	init.cap.max_recv_wr = 1;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	init.cap.max_inline_data = 64;
	if (ibv_destroy_qp(l.qp[0])) {
		l.qp[0] = NULL;
		goto out;
	}
	l.qp[0] = ibv_create_qp(l.pd, &init);
	if (!l.qp[0]) {
		FAIL("ibv_create_qp with max_inline_data 64: %s", strerror(errno));
		goto out;
	}
	if (ibv_query_qp(l.qp[0], &qa, IBV_QP_CAP, &init)) {
		FAIL("ibv_query_qp");
		goto out;
	}
	printf("A: sq_sig_all 0, max_inline_data %u (asked for 64)\n", qa.cap.max_inline_data);
	if (loop_connect(&l, 0, IBV_ACCESS_REMOTE_WRITE, LAB_RNR_RETRY))
		goto out;
	abuf = calloc(1, SZ);
	bbuf = calloc(1, SZ);
	amr = abuf ? ibv_reg_mr(l.pd, abuf, SZ, 0) : NULL;
	bmr = amr && bbuf ? ibv_reg_mr(l.pd, bbuf, SZ,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) :
			    NULL;
	if (!bmr)
		goto out;

	/* 1. Inline from an unregistered buffer, overwritten before the packet may leave. */
	if (post_recv_one(l.qp[1], bmr, bbuf, SZ, 1))
		goto out;
	{
		char msg[SZ] = "sent inline from an unregistered buffer";
		struct ibv_sge sge = { (uintptr_t)msg, sizeof(msg), 0 /* lkey: unused */ };
		struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED },
				   *bad;
		int rc = ibv_post_send(l.qp[0], &wr, &bad);

		if (rc) {
			FAIL("inline post: %s", strerror(rc));
			goto out;
		}
		memset(msg, 'X', sizeof(msg) - 1); /* the WR already holds its own copy */
		if (poll_wc(l.cq[0], &wc, 5000) != 1 || wc.status != IBV_WC_SUCCESS ||
		    poll_wc(l.cq[1], &wc, 5000) != 1 || wc.status != IBV_WC_SUCCESS) {
			FAIL("inline SEND");
			goto out;
		}
		printf("1. B received \"%s\" (the buffer was overwritten after the post)\n", bbuf);
		if (strcmp(bbuf, "sent inline from an unregistered buffer"))
			goto out;
	}

	/* 2. Every WR signalled, then one in EVERY. */
	if (writes(&l, amr, abuf, (uintptr_t)bbuf, bmr->rkey, 1, &c_all, &us_all) ||
	    writes(&l, amr, abuf, (uintptr_t)bbuf, bmr->rkey, EVERY, &c_sel, &us_sel))
		goto out;
	printf("2. %d WRITEs all signalled: %d completions, %.1f us per WR\n", N, c_all, us_all);
	printf("   %d WRITEs, every %dth signalled: %d completions, %.1f us per WR\n", N, EVERY,
	       c_sel, us_sel);
	if (c_all != N || c_sel != N / EVERY) {
		FAIL("expected %d and %d completions", N, N / EVERY);
		goto out;
	}
	ret = 0;
out:
	if (amr && ibv_dereg_mr(amr))
		ret = 1;
	if (bmr && ibv_dereg_mr(bmr))
		ret = 1;
	loop_close(&l);
	free(abuf);
	free(bbuf);
	if (ret == 0)
		printf("OK\n");
	return ret;
}
